"""What the dashboard shows of scale-out: the workers (host, slots, attempts running and prepared
ahead, last seen) and which worker ran each attempt."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from runs.models import Job, Lease, LeaseState, Worker, job_key
from runs.workers.config import worker_alive_s
from runs.workers.leases import HELD, now


@dataclass
class WorkerRow:
    name: str
    host: str
    slots: int
    queues: list[str]
    started_at: datetime
    last_seen_at: datetime
    state: str  # up | stopped | gone (not seen lately, never said it stopped: killed, say)
    seen_s: float  # seconds since it was last seen
    # (job key, job name, trial name): the key names the job in the dashboard's URLs ("" for a
    # job the index has no row of)
    running: list[tuple[str, str, str]] = field(default_factory=list)
    prepared: int = 0  # attempts claimed whose sandbox is being made or waits for a slot
    problem: str = ""  # why it takes no attempt now (its disk is full, say)


def workers(limit: int = 200) -> list[WorkerRow]:
    """The workers, the most lately seen first, with the attempts each holds now."""
    at = now()
    by_id: dict[int, WorkerRow] = {}
    for w in Worker.objects.order_by("-last_seen_at")[:limit]:
        seen = max((at - w.last_seen_at).total_seconds(), 0.0)
        state = "stopped" if w.stopped_at else "up" if seen <= worker_alive_s() else "gone"
        by_id[w.pk] = WorkerRow(
            w.name,
            w.host,
            w.slots,
            list(w.queues or []),
            w.started_at,
            w.last_seen_at,
            state,
            seen,
            problem=w.problem,
        )
    held = Lease.objects.filter(worker_id__in=list(by_id), state__in=HELD, expires_at__gte=at)
    rows = list(held.order_by("id").values_list("worker_id", "job_path", "trial_name", "state"))
    # the jobs' rows are in the index's database (the leases may have one of their own)
    ids = dict(Job.objects.filter(path__in={r[1] for r in rows}).values_list("path", "id"))
    for worker_id, job_path, trial, state in rows:
        if state == LeaseState.RUNNING:
            name = Path(job_path).name
            key = job_key(name, ids[job_path]) if job_path in ids else ""
            by_id[worker_id].running.append((key, name, trial))
        else:
            by_id[worker_id].prepared += 1
    return list(by_id.values())


def attempt_workers(job_path: str, rollouts: Iterable[str]) -> dict[str, str]:
    """rollout -> the worker that ran it, for the job's attempts that ran on workers."""
    wanted = [r for r in rollouts if r]
    found = Lease.objects.filter(job_path=job_path, rollout_name__in=wanted, worker__isnull=False)
    return dict(found.values_list("rollout_name", "worker__name"))
