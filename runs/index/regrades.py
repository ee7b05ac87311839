"""A regrade's events into the index: an Event row per regraded trial (with its before and after),
so every open page of the job hears of it; regrade.json in the attempt folder stays the record."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

from django.db import transaction

from runs import events as ev
from runs.index import live
from runs.index.writer import record_event
from runs.models import Job


class RegradeIndex:
    """The regrade bus's subscriber. Regrades run in an event loop, where Django refuses the ORM:
    rows are written in one thread of their own, in order."""

    def __init__(self, job_dir: Path):
        self.job_dir = job_dir.resolve()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="bench-regrade-index"
        )

    def __call__(self, event: ev.Event) -> None:
        if isinstance(event, ev.RegradeStarted):
            self._pool.submit(self._write, "regrade_started", "", event.to_payload())
        elif isinstance(event, ev.Regraded):
            self._pool.submit(self._write, "regraded", event.trial_name, event.to_payload())

    def _write(self, kind: str, trial_name: str, payload: dict[str, object]) -> None:
        job_id = Job.objects.filter(path=str(self.job_dir)).values_list("id", flat=True).first()
        if job_id is None:
            return  # a job the index does not know: `bench index` reads regrade.json later
        with transaction.atomic():
            record_event(job_id, kind, trial_name, payload)

    def close(self) -> None:
        from django.db import connections

        self._pool.submit(connections.close_all)
        self._pool.shutdown(wait=True)
        live.flush()
