"""The lease of each dispatched attempt: every change is a conditional UPDATE, so a coordinator and
any number of workers can race on a row and exactly one of them wins.

A worker's writes name the claim it holds (`claim`, bumped at each claim): once its lease was
taken from it (it stopped renewing, and the coordinator requeued it), nothing it writes counts.
Synchronous ORM code: callers run it off their event loop.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from runs.databases import leases_db
from runs.models import Dispatcher, Lease, LeaseState, Worker

S = LeaseState
HELD = (S.PREPARING, S.RUNNING)  # a worker holds it and renews it
ACTIVE = (S.QUEUED, *HELD)
ENDED = (S.FINISHED, S.CANCELLED, S.DISCARDED, S.FAILED, S.ABANDONED)


def now() -> datetime:
    return timezone.now()


@dataclass(frozen=True)
class LeaseRow:
    """What the coordinator knows of a lease: a snapshot of its row."""

    id: int
    state: str
    claim: int
    rollout_name: str
    worker: str  # the holder's name, "" when none
    expires_at: datetime | None
    claimed_at: datetime | None
    usage: dict[str, Any] | None
    result: dict[str, Any] | None
    cancelled_record: dict[str, Any] | None
    error: str
    trial_name: str
    attempt: int
    uid: str


ROW_FIELDS = (
    "id",
    "state",
    "claim",
    "rollout_name",
    "worker__name",
    "expires_at",
    "claimed_at",
    "usage",
    "result",
    "cancelled_record",
    "error",
    "trial_name",
    "attempt",
    "uid",
)


def _row(values: Mapping[str, Any]) -> LeaseRow:
    return LeaseRow(
        id=values["id"],
        state=values["state"],
        claim=values["claim"],
        rollout_name=values["rollout_name"],
        worker=values["worker__name"] or "",
        expires_at=values["expires_at"],
        claimed_at=values["claimed_at"],
        usage=values["usage"],
        result=values["result"],
        cancelled_record=values["cancelled_record"],
        error=values["error"],
        trial_name=values["trial_name"],
        attempt=values["attempt"],
        uid=values["uid"],
    )


def rows(ids: Iterable[int]) -> dict[int, LeaseRow]:
    wanted = list(ids)
    if not wanted:
        return {}
    return {v["id"]: _row(v) for v in Lease.objects.filter(pk__in=wanted).values(*ROW_FIELDS)}


# --- the coordinator's side ---------------------------------------------------------------------


def open_dispatcher(
    job_path: str, cwd: str, queue: str, settings: Mapping[str, Any], slots: int = 0
) -> int:
    """The coordinator's row; `slots` is its -j (0: no limit), which workers hold to."""
    at = now()
    return Dispatcher.objects.create(
        job_path=job_path,
        host=socket.gethostname(),
        pid=os.getpid(),
        cwd=cwd,
        queue=queue,
        settings=dict(settings),
        slots=slots,
        started_at=at,
        last_seen_at=at,
    ).pk


def dispatcher_seen(dispatcher: int) -> None:
    Dispatcher.objects.filter(pk=dispatcher).update(last_seen_at=now())


def close_dispatcher(dispatcher: int) -> list[int]:
    """The coordinator ends: attempts no worker started are abandoned (returns their ids)."""
    queued = list(
        Lease.objects.filter(dispatcher=dispatcher, state=S.QUEUED).values_list("pk", flat=True)
    )
    Lease.objects.filter(pk__in=queued, state=S.QUEUED).update(state=S.ABANDONED)
    Dispatcher.objects.filter(pk=dispatcher).update(ended_at=now(), last_seen_at=now())
    return queued


def create(
    dispatcher: int,
    *,
    job_path: str,
    trial_name: str,
    task_name: str,
    task_path: str,
    trial_index: int,
    attempt: int,
    env_digest: str,
    enqueue: Callable[[int], None],
) -> int:
    """A queued lease; `enqueue(id)` runs once it is committed (a worker must find the row)."""
    with transaction.atomic(using=leases_db()):
        lease = Lease.objects.create(
            dispatcher_id=dispatcher,
            job_path=job_path,
            trial_name=trial_name,
            task_name=task_name,
            task_path=task_path,
            trial_index=trial_index,
            attempt=attempt,
            env_digest=env_digest,
            dispatched_at=now(),
        )
        transaction.on_commit(lambda: enqueue(lease.pk), using=leases_db())
    return lease.pk


def request_cancel(lease: int, kind: str, cancelled_by: str | None = None) -> str:
    """Ask the holder to discard (never started) or stop (running) the attempt; a queued one is
    discarded here and then. Returns the state the lease is left in."""
    if Lease.objects.filter(pk=lease, state=S.QUEUED).update(state=S.DISCARDED) == 1:
        return S.DISCARDED
    Lease.objects.filter(pk=lease, state__in=HELD).update(
        cancel=kind, cancelled_by=cancelled_by or ""
    )
    return Lease.objects.filter(pk=lease).values_list("state", flat=True).get()


def requeue_expired(lease: int, claim: int) -> LeaseRow | None:
    """Take back a lease its holder stopped renewing (the worker died): queued again for another
    worker, with the lost run noted; one the coordinator had called off ends here instead. None
    when the holder renewed it, or it ended, meanwhile."""
    row = Lease.objects.filter(pk=lease).values("lost", "rollout_name", "worker__name", "cancel")
    found = row.get()
    expired = Lease.objects.filter(pk=lease, claim=claim, state__in=HELD, expires_at__lt=now())
    if found["cancel"]:
        state = S.DISCARDED if found["cancel"] == "discard" else S.CANCELLED
        taken = expired.update(state=state, finished_at=now())
    else:
        lost = [*found["lost"], {"rollout": found["rollout_name"], "worker": found["worker__name"]}]
        taken = expired.update(
            state=S.QUEUED, worker=None, rollout_name="", expires_at=None, usage=None, lost=lost
        )
    return _row(Lease.objects.filter(pk=lease).values(*ROW_FIELDS).get()) if taken else None


def requeue_abandoned(lease: int) -> bool:
    """A live coordinator's lease that a worker took for abandoned (its heartbeat was late)."""
    return Lease.objects.filter(pk=lease, state=S.ABANDONED).update(state=S.QUEUED) == 1


def collected(when: Mapping[int, datetime]) -> None:
    """When the coordinator had each lease's outcome."""
    with transaction.atomic(using=leases_db()):
        for lease, at in when.items():
            Lease.objects.filter(pk=lease).update(collected_at=at)


def adopt(job_path: str, dispatcher: int) -> list[LeaseRow]:
    """A resumed job takes over the attempts an earlier coordinator left running on workers; those
    not started yet are called off (the plan runs their trials again). Returns the adopted."""
    earlier = Lease.objects.filter(job_path=job_path).exclude(dispatcher=dispatcher)
    earlier.filter(state=S.QUEUED).update(state=S.ABANDONED)
    earlier.filter(state=S.PREPARING).update(cancel="discard")
    running = list(earlier.filter(state=S.RUNNING).values_list("pk", flat=True))
    Lease.objects.filter(pk__in=running, state=S.RUNNING).update(dispatcher_id=dispatcher)
    adopted = Lease.objects.filter(pk__in=running, dispatcher=dispatcher, state=S.RUNNING)
    return [_row(v) for v in adopted.values(*ROW_FIELDS)]


def running_elsewhere(job_path: str) -> list[str]:
    """Trials of the job whose attempt a worker holds now (lease not expired)."""
    return list(
        Lease.objects.filter(job_path=job_path, state__in=HELD, expires_at__gte=now())
        .values_list("trial_name", flat=True)
        .distinct()
    )


def live_workers(queue: str) -> list[tuple[str, int]]:
    """(name, slots) of the workers up now that serve `queue`."""
    from runs.workers.config import worker_alive_s

    since = now() - timedelta(seconds=worker_alive_s())
    found = Worker.objects.filter(last_seen_at__gte=since, stopped_at__isnull=True)
    return [(w.name, w.slots) for w in found.order_by("name") if queue in (w.queues or [])]


# --- the worker's side --------------------------------------------------------------------------


def register_worker(name: str, slots: int, queues: list[str]) -> int:
    at = now()
    worker, _ = Worker.objects.update_or_create(
        name=name,
        defaults={
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "slots": slots,
            "queues": queues,
            "started_at": at,
            "last_seen_at": at,
            "stopped_at": None,
        },
    )
    return worker.pk


def worker_seen(worker: int) -> None:
    Worker.objects.filter(pk=worker).update(last_seen_at=now())


def worker_serving(worker: int, queues: list[str]) -> None:
    """It takes messages from `queues` now (registered with none while Celery started)."""
    Worker.objects.filter(pk=worker).update(queues=queues, last_seen_at=now())


def worker_draining(worker: int) -> None:
    """It takes nothing more (a warm shutdown: its attempts finish): it serves no queue now, so no
    other worker hands it a lease and no `bench run` counts on it."""
    Worker.objects.filter(pk=worker).update(queues=[])


def worker_stopped(worker: int) -> None:
    Worker.objects.filter(pk=worker).update(stopped_at=now(), last_seen_at=now())


def claim(lease: int, worker: int, lease_s: float, stale_s: float) -> int | None:
    """Take a queued lease for this worker; its claim number, or None when another worker holds
    it, it ended, or its coordinator has gone quiet (then it is abandoned: nobody would collect it)."""
    taken = claim_reading(lease, worker, lease_s, stale_s, ())
    return None if taken is None else taken[0]


def claim_reading(
    lease: int, worker: int, lease_s: float, stale_s: float, fields: Iterable[str]
) -> tuple[int, dict[str, Any]] | None:
    """`claim`, with the lease's `fields` (and its dispatcher's, as `dispatcher__name`) read in the
    same statement as the state it checks."""
    at = now()
    row = (
        Lease.objects.filter(pk=lease)
        .values("state", "cancel", "claim", "dispatcher__last_seen_at", *fields)
        .first()
    )
    if row is None or row["state"] != S.QUEUED or row["cancel"]:
        return None
    seen_claim, seen = row["claim"], row["dispatcher__last_seen_at"]
    if seen < at - timedelta(seconds=stale_s):
        Lease.objects.filter(pk=lease, state=S.QUEUED).update(state=S.ABANDONED)
        return None
    # a compare-and-swap on the lease's own row, with no join: on PostgreSQL a condition through
    # a join is not rechecked after a racing UPDATE, and both racers could match
    took = Lease.objects.filter(pk=lease, state=S.QUEUED, cancel="", claim=seen_claim).update(
        state=S.PREPARING,
        worker_id=worker,
        claim=seen_claim + 1,
        expires_at=at + timedelta(seconds=lease_s),
        claimed_at=at,
    )
    return (seen_claim + 1, row) if took == 1 else None


def _held(lease: int, claim: int, *states: str) -> Any:
    return Lease.objects.filter(pk=lease, claim=claim, state__in=states or HELD)


STARTED, FULL, OFF = "started", "full", "off"


def start(lease: int, claim: int, rollout: str, slot_wait_s: float = 0.0) -> str:
    """Its sandbox is up and a slot of its worker free: its agent starts now (STARTED) if fewer of
    its job's leases run than the coordinator's -j (else FULL: try again when one ends), unless it
    was called off or taken back meanwhile (OFF).

    The dispatcher's row is locked first (on SQLite the transaction holds the write lock from its
    start), so two workers' starts of one job never both see a free slot."""
    with transaction.atomic(using=leases_db()):
        found = Lease.objects.filter(pk=lease).values_list("dispatcher_id", flat=True).first()
        if found is None:
            return OFF
        # FOR UPDATE on PostgreSQL; SQLite has no row locks and no such clause (Django leaves it
        # out)
        dispatcher = Dispatcher.objects.select_for_update().filter(pk=found)
        limit = dispatcher.values_list("slots", flat=True).first() or 0
        running = Lease.objects.filter(dispatcher=found, state=S.RUNNING)
        if limit and running.count() >= limit:
            return FULL
        took = (
            _held(lease, claim, S.PREPARING)
            .filter(cancel="", dispatcher=found)
            .update(
                state=S.RUNNING,
                rollout_name=rollout,
                started_at=now(),
                slot_wait_s=round(slot_wait_s, 4),
            )
        )
    return STARTED if took == 1 else OFF


MAX_HAND_BACKS = 2  # then it waits where it is (a free worker that does not take it: no ping-pong)


def hand_back(lease: int, claim: int) -> bool:
    """A lease this worker holds but has not started goes back to the queue (another worker has a
    slot free now, this one has none), under a new claim number: the coordinator reads it as
    queued again (and sends it again if Redis lost it), and this worker's writes no longer count."""
    return (
        _held(lease, claim, S.PREPARING)
        .filter(cancel="", handed_back__lt=MAX_HAND_BACKS)
        .update(
            state=S.QUEUED,
            worker=None,
            rollout_name="",
            expires_at=None,
            claim=F("claim") + 1,
            handed_back=F("handed_back") + 1,
        )
        == 1
    )


def slot_free_elsewhere(worker: int, queues: list[str], alive_s: float) -> bool:
    """Whether a live worker other than this one, serving one of `queues`, has a slot that no
    lease it holds (running, or prepared for it) takes."""
    since = now() - timedelta(seconds=alive_s)
    others = (
        Worker.objects.filter(last_seen_at__gte=since, stopped_at__isnull=True)
        .exclude(pk=worker)
        .annotate(held=Count("leases", filter=Q(leases__state__in=HELD)))
        .filter(held__lt=F("slots"))
    )
    return any(set(queues) & set(w.queues or []) for w in others.only("queues"))


def renew(lease: int, claim: int, lease_s: float, usage: dict[str, Any] | None) -> bool:
    """Keep holding it (and report what the proxy counted); False once it was taken back."""
    fields: dict[str, Any] = {"expires_at": now() + timedelta(seconds=lease_s)}
    if usage is not None:
        fields["usage"] = usage
    return _held(lease, claim).update(**fields) == 1


def orders(lease: int, claim: int, stale_s: float) -> tuple[str, str, str, bool] | None:
    """(state, cancel, cancelled_by, whether its coordinator is alive) while this claim holds
    the lease, else None."""
    found = (
        _held(lease, claim)
        .values_list("state", "cancel", "cancelled_by", "dispatcher__last_seen_at")
        .first()
    )
    if found is None:
        return None
    state, cancel, cancelled_by, seen = found
    return state, cancel, cancelled_by, seen >= now() - timedelta(seconds=stale_s)


def finish(lease: int, claim: int, result: dict[str, Any], work_s: float) -> bool:
    return (
        _held(lease, claim, S.RUNNING).update(
            state=S.FINISHED, result=result, finished_at=now(), work_s=work_s
        )
        == 1
    )


def cancelled(lease: int, claim: int, record: dict[str, Any] | None, work_s: float) -> bool:
    return (
        _held(lease, claim, S.RUNNING).update(
            state=S.CANCELLED, cancelled_record=record, finished_at=now(), work_s=work_s
        )
        == 1
    )


def discarded(lease: int, claim: int) -> bool:
    return _held(lease, claim, S.PREPARING).update(state=S.DISCARDED) == 1


def failed(lease: int, claim: int, error: str) -> bool:
    return _held(lease, claim).update(state=S.FAILED, error=error, finished_at=now()) == 1


def held_by(worker: int) -> list[str]:
    """Trials this worker runs now."""
    return list(
        Lease.objects.filter(worker=worker, state__in=HELD).values_list("trial_name", flat=True)
    )
