"""The lease of each dispatched attempt: every change is a conditional UPDATE, so a coordinator and
any number of workers can race on a row and exactly one of them wins.

A worker's writes name the claim it holds (`claim`, bumped at each claim): once its lease was
taken from it (it stopped renewing, and the coordinator requeued it), nothing it writes counts.
Synchronous ORM code: callers run it off their event loop.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.models import F
from django.utils import timezone

from runs.databases import leases_db
from runs.models import Dispatcher, Lease, LeaseState, Worker
from runs.workers import coordination

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
    """A queued lease; `enqueue(id)` runs once it is committed (a worker must find the row). A
    coordinator on the fleet whose fence moved on creates none (it stops)."""
    coordination.guard()
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


def worker_trouble(worker: int, problem: str) -> None:
    """The machine cannot take attempts now (a full disk, say): it serves no queue, and says why."""
    Worker.objects.filter(pk=worker).update(queues=[], problem=problem[:500])


def worker_well(worker: int, queues: list[str]) -> None:
    """The machine is well again: it serves its queues."""
    Worker.objects.filter(pk=worker).update(queues=queues, problem="", last_seen_at=now())


def give_up(lease: int, claim: int) -> bool:
    """This worker cannot go on with the attempt (its machine failed it): the lease lapses now, so
    its coordinator takes it back at its next look and runs it elsewhere, counted once."""
    return _held(lease, claim, *HELD).update(expires_at=now()) == 1


def queued_on(queue: str, stale_s: float) -> int:
    """How many leases of live coordinators (seen in the last `stale_s`) wait in `queue`: each
    should have a message there. One of a coordinator gone is abandoned when a worker takes its
    message; one whose message was lost too would stay queued, and is not counted."""
    return Lease.objects.filter(
        state=S.QUEUED,
        dispatcher__queue=queue,
        dispatcher__ended_at__isnull=True,
        dispatcher__last_seen_at__gte=now() - timedelta(seconds=stale_s),
    ).count()


def queue_of(lease: int) -> str | None:
    """The queue a queued lease goes to (its dispatcher's); None when it is no longer queued."""
    return (
        Lease.objects.filter(pk=lease, state=S.QUEUED)
        .values_list("dispatcher__queue", flat=True)
        .first()
    )


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
    """`claim`, with the lease's `fields` (its own, or its dispatcher's as `dispatcher__name`)
    returned by the claim's own statement: one trip to the database. When no queued lease of a
    live coordinator matched, a second read tells whether its coordinator has gone quiet."""
    at = now()
    alias = leases_db()
    connection = connections[alias]
    wanted = tuple(fields)
    sql, fields_of = _claim_sql(connection.vendor, wanted)
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            [
                worker,
                _at(connection, at + timedelta(seconds=lease_s)),
                _at(connection, at),
                lease,
                _at(connection, at - timedelta(seconds=stale_s)),
            ],
        )
        found = cursor.fetchone()
    if found is None:
        _abandon_if_quiet(lease, at - timedelta(seconds=stale_s))
        return None
    values = {
        name: _from_db(field, value, connection)
        for name, field, value in zip(wanted, fields_of, found[1:], strict=True)
    }
    return found[0], values


def _abandon_if_quiet(lease: int, since: datetime) -> None:
    """A queued lease whose coordinator has not been seen since `since` is abandoned: nobody
    would collect it."""
    row = Lease.objects.filter(pk=lease, state=S.QUEUED, cancel="").values(
        "dispatcher__last_seen_at"
    )
    seen = row.first()
    if seen is not None and seen["dispatcher__last_seen_at"] < since:
        Lease.objects.filter(pk=lease, state=S.QUEUED).update(state=S.ABANDONED)


def _at(connection: Any, when: datetime) -> Any:
    """A datetime as the backend stores it (SQLite: UTC text), for raw SQL."""
    return connection.ops.adapt_datetimefield_value(when)


@functools.cache
def _claim_sql(vendor: str, fields: tuple[str, ...]) -> tuple[str, list[Any]]:
    """The claim as one compare-and-swap on the lease's own row (a condition through a join is
    not rechecked on PostgreSQL after a racing UPDATE; this one's is its row's state), returning
    the new claim and `fields` (with their model fields, to read the values as the ORM would)."""
    q = connections[leases_db()].ops.quote_name
    lease, dispatcher = q(Lease._meta.db_table), q(Dispatcher._meta.db_table)
    returning, fields_of = [], []
    for name in fields:
        owner, _, field_name = name.rpartition("__")
        model = Dispatcher if owner == "dispatcher" else Lease
        field = model._meta.get_field(field_name)
        column = q(field.column)
        if model is Dispatcher:
            column = f"(SELECT d.{column} FROM {dispatcher} d WHERE d.id = {lease}.dispatcher_id)"
        returning.append(column)
        fields_of.append(field)
    sql = (
        f"UPDATE {lease} SET state = '{S.PREPARING}', worker_id = %s, claim = claim + 1, "
        "expires_at = %s, claimed_at = %s "
        f"WHERE id = %s AND state = '{S.QUEUED}' AND cancel = '' AND dispatcher_id IN "
        f"(SELECT id FROM {dispatcher} WHERE last_seen_at >= %s) "
        f"RETURNING claim{''.join(', ' + c for c in returning)}"
    )
    return sql, fields_of


def _from_db(field: Any, value: Any, connection: Any) -> Any:
    """A raw column's value as the ORM reads it (a JSON column comes as text)."""
    from_db = getattr(field, "from_db_value", None)
    if from_db is None or not isinstance(value, str):
        return value
    return from_db(value, None, connection)


def _held(lease: int, claim: int, *states: str) -> Any:
    return Lease.objects.filter(pk=lease, claim=claim, state__in=states or HELD)


STARTED, FULL, OFF = "started", "full", "off"


def start(lease: int, claim: int, rollout: str, slot_wait_s: float = 0.0) -> str:
    """Its sandbox is up and a slot of its worker free: its agent starts now (STARTED) if fewer of
    its job's leases run than the coordinator's -j (else FULL: try again when one ends), unless it
    was called off or taken back meanwhile (OFF).

    One UPDATE whose condition counts the job's running leases: SQLite runs a writing statement
    under the file's write lock from its first read, so two workers' starts of one job never both
    see a free slot. PostgreSQL reads each statement's rows as they were when it began, so there
    the dispatcher's row is locked first, in a statement of its own, and the count then sees every
    start committed before it."""
    alias = leases_db()
    connection = connections[alias]
    q = connection.ops.quote_name
    lease_t, dispatcher_t = q(Lease._meta.db_table), q(Dispatcher._meta.db_table)
    params = [rollout, _at(connection, now()), round(slot_wait_s, 4), lease, claim]
    update = (
        f"UPDATE {lease_t} SET state = '{S.RUNNING}', rollout_name = %s, started_at = %s, "
        f"slot_wait_s = %s WHERE id = %s AND claim = %s AND state = '{S.PREPARING}' "
        f"AND cancel = '' AND (SELECT d.slots = 0 OR d.slots > (SELECT COUNT(*) FROM {lease_t} r "
        f"WHERE r.dispatcher_id = d.id AND r.state = '{S.RUNNING}') FROM {dispatcher_t} d "
        f"WHERE d.id = {lease_t}.dispatcher_id)"
    )
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(update, params)
            took = cursor.rowcount
    else:
        with transaction.atomic(using=alias), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT d.id FROM {dispatcher_t} d JOIN {lease_t} l ON l.dispatcher_id = d.id "
                "WHERE l.id = %s FOR UPDATE OF d",
                [lease],
            )
            cursor.execute(update, params)
            took = cursor.rowcount
    if took == 1:
        return STARTED
    # not started: FULL while it is still prepared under this claim, uncalled-off
    still = _held(lease, claim, S.PREPARING).filter(cancel="").exists()
    return FULL if still else OFF


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
    lease it holds (running, or prepared for it) takes. One statement (it rides on claims)."""
    connection = connections[leases_db()]
    q = connection.ops.quote_name
    worker_t, lease_t = q(Worker._meta.db_table), q(Lease._meta.db_table)
    held = ", ".join(f"'{state}'" for state in HELD)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT w.queues FROM {worker_t} w WHERE w.last_seen_at >= %s AND w.stopped_at IS "
            f"NULL AND w.id <> %s AND w.slots > (SELECT COUNT(*) FROM {lease_t} l WHERE "
            f"l.worker_id = w.id AND l.state IN ({held}))",
            [_at(connection, now() - timedelta(seconds=alive_s)), worker],
        )
        found = cursor.fetchall()
    field = Worker._meta.get_field("queues")
    wanted = set(queues)
    return any(wanted & set(_from_db(field, row[0], connection) or []) for row in found)


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
