"""The database index: the job bus's subscriber that writes rows as a job runs (subscriber), the
row writers it shares with `bench index` (writer, folder), what a row holds (rows), and the live
path's hints (live)."""

from runs.index.subscriber import Index
from runs.index.writer import outcome_of

__all__ = ["Index", "outcome_of"]
