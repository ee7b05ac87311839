"""The index as a bus subscriber: a running job's (or a regrade's) events handed to the index's
projector (runs/index/projector.py) in one writer thread of their own, in order. SQLite takes one
writer at a time, the event loop never waits for it, and Django refuses the ORM in a loop's thread.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runs import events as ev
from runs.databases import reconnecting
from runs.index import live
from runs.index.projector import Projector

log = logging.getLogger(__name__)


class Index:
    """One job's index writer: call it with each of the job's events (a `Bus` subscriber).
    `job_dir`: the job whose rows a regrade's events attach to (a run's own events name it)."""

    def __init__(self, job_dir: Path | None = None) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="bench-index"
        )
        self.projector = Projector(job_dir)

    def __call__(self, event: ev.Event) -> None:
        if type(event) is not ev.Heartbeat:  # the one event a page never shows: not even queued
            self._pool.submit(self._apply, event)

    def _apply(self, event: ev.Event) -> None:
        try:
            reconnecting(self.projector.apply, event)
        except Exception:  # noqa: BLE001 - a row not written must not stop the job (the folder is the record)
            log.exception("the index could not apply %s", event.kind)

    def after(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run `fn` in the writer thread once every event handed over so far is applied (their
        transactions committed)."""
        return self._pool.submit(fn)

    def flush(self) -> None:
        """Wait until every event handed over so far is applied."""
        self.after(lambda: None).result()

    def close(self) -> None:
        from django.db import connections

        self._pool.submit(connections.close_all)  # the writer thread's own connection
        self._pool.shutdown(wait=True)
        live.flush()
