"""The database index: rows written live as a job runs (writer), rebuilt from a job folder's files
(folder), from the same row functions (rows); and the live path's hints (live)."""

from runs.index.writer import Index, outcome_of

__all__ = ["Index", "outcome_of"]
