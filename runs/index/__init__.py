"""The database index: the projector that alone writes its rows, one handler per event class
(projector, with the state it keeps in projection and a replayed job folder's handlers in replay),
the bus subscriber that hands it a running job's events (subscriber), `bench index`'s reading of a
job folder (folder), the row writers its handlers share (writer), what a row holds (rows), and the
live path's hints (live)."""

from runs.index.subscriber import Index
from runs.index.writer import outcome_of

__all__ = ["Index", "outcome_of"]
