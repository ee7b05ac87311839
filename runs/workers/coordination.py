"""Coordination on the worker fleet: the one row per job that says which machine coordinates it.

A job handed to the fleet (a launch from the browser, `bench run --detach`) is `queued`; a worker
takes it (`take`: one conditional UPDATE, so of two workers racing exactly one wins) and starts
its coordinator, which renews the lease every sixth of BENCHFLOW_LEASE_S. Each take bumps the
fencing number `fence`: the coordinator names its number in every renewal and before each write
that counts (`check`), so one that wakes up after another took the job over (its machine was
frozen, or cut off) writes nothing more and stops. A lease not renewed lapses: the next worker
to look takes the job and resumes it as `bench eval resume` would, and the row keeps the
handover ("coordinator on host A lost at ...; adopted by host B at ...").

Synchronous ORM code: callers run it off their event loop.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from runs.databases import leases_db
from runs.models import Coordination

QUEUED, RUNNING, ENDED = "queued", "running", "ended"
# what the coordinator process exits with when its fence moved on (it stops writing at once)
FENCED_EXIT = 75


class Fenced(Exception):
    """This coordinator's lease on the job was taken over: it may write nothing more."""


def now() -> datetime:
    return timezone.now()


@dataclass(frozen=True)
class Taken:
    """A job a worker took: start its coordinator with this fence."""

    id: int
    job_path: str
    fence: int
    adopted: bool  # an earlier coordinator held it (a resume, not the first run)


def submit(job_path: str, queue: str, request: dict[str, Any]) -> int | None:
    """Hand the job to the fleet (again: a resume of an ended one), queued for a worker with its
    settings (`request`: no secret value). None when a live coordinator holds it now."""
    at = now()
    row, created = Coordination.objects.get_or_create(
        job_path=job_path, defaults={"queue": queue, "created_at": at, "request": request}
    )
    if created:
        return int(row.pk)
    again = Coordination.objects.filter(pk=row.pk).exclude(state=RUNNING, expires_at__gte=at)
    moved = again.update(
        state=QUEUED,
        queue=queue,
        request=request,
        created_at=at,
        ended_at=None,
        outcome="",
        avoid_host="",
    )
    return int(row.pk) if moved else None


def request_of(pk: int) -> tuple[str, dict[str, Any]]:
    """The job folder and the settings the launch gave."""
    row = Coordination.objects.filter(pk=pk).values("job_path", "request").get()
    return row["job_path"], dict(row["request"] or {})


def _takeable(at: datetime) -> Q:
    return Q(state=QUEUED) | Q(state=RUNNING, expires_at__lt=at)


def takeable(queues: list[str], host: str) -> list[int]:
    """Jobs of these queues no live coordinator holds; a job to move off `host` (drained) only
    when nothing else is waiting (another worker should take it)."""
    at = now()
    found = list(
        Coordination.objects.filter(_takeable(at), queue__in=queues)
        .order_by("created_at")
        .values_list("pk", "avoid_host")
    )
    return [pk for pk, avoid in found if avoid != host] + [
        pk for pk, avoid in found if avoid == host
    ]


def _released(row: dict[str, Any]) -> bool:
    """Its holder handed it over (`release`: the lease ends the moment it was renewed)."""
    return bool(row["expires_at"] and row["renewed_at"] and row["expires_at"] <= row["renewed_at"])


def avoided_here(pk: int, host: str, queues: list[str]) -> bool:
    """The job is to move off `host` (drained) and a worker on another machine serves its queue."""
    from runs.models import Worker
    from runs.workers.config import worker_alive_s

    if not Coordination.objects.filter(pk=pk, avoid_host=host).exists():
        return False
    since = now() - timedelta(seconds=worker_alive_s())
    others = Worker.objects.filter(last_seen_at__gte=since, stopped_at__isnull=True).exclude(
        host=host
    )
    return any(set(w.queues or []) & set(queues) for w in others)


def take(pk: int, worker: str, lease_s: float, *, host: str = "", pid: int = 0) -> Taken | None:
    """This worker coordinates the job from now on (None: another took it, or it is held)."""
    host = host or socket.gethostname()
    with transaction.atomic(using=leases_db()):
        at = now()
        row = (
            Coordination.objects.select_for_update()
            .filter(_takeable(at), pk=pk)
            .values(
                "fence", "host", "pid", "state", "renewed_at", "expires_at", "handovers", "job_path"
            )
            .first()
        )
        if row is None:
            return None
        handovers = list(row["handovers"] or [])
        adopted = row["state"] == RUNNING
        if adopted:
            lost_at = row["renewed_at"] or row["expires_at"] or at
            handovers.append(
                {
                    "from": row["host"],
                    "pid": row["pid"],  # its coordinator's, on its machine (the lock's holder)
                    "lost_at": lost_at.isoformat(),
                    "to": host,
                    "adopted_at": at.isoformat(),
                    "why": "drained" if _released(row) else "lost",
                }
            )
        taken = Coordination.objects.filter(pk=pk, fence=row["fence"]).update(
            state=RUNNING,
            fence=row["fence"] + 1,
            host=host,
            worker=worker,
            pid=pid,
            expires_at=at + timedelta(seconds=lease_s),
            renewed_at=at,
            handovers=handovers,
        )
    if not taken:
        return None
    return Taken(pk, row["job_path"], row["fence"] + 1, adopted)


def started(pk: int, fence: int, pid: int) -> bool:
    """The coordinator's process is up: its pid on its machine."""
    return Coordination.objects.filter(pk=pk, fence=fence).update(pid=pid) == 1


def renew(pk: int, fence: int, lease_s: float) -> str:
    """The holder's heartbeat: "ok", "drain" (hand the job over now), or "fenced" (another
    coordinator holds it: write nothing more)."""
    at = now()
    held = Coordination.objects.filter(pk=pk, fence=fence, state=RUNNING)
    if not held.update(expires_at=at + timedelta(seconds=lease_s), renewed_at=at):
        return "fenced"
    avoid = held.values_list("avoid_host", "host").first()
    return "drain" if avoid and avoid[0] and avoid[0] == avoid[1] else "ok"


def release(pk: int, fence: int) -> bool:
    """Hand the job over at once (drain): the lease lapses now, the next worker takes it."""
    at = now()
    return (
        Coordination.objects.filter(pk=pk, fence=fence, state=RUNNING).update(
            expires_at=at, renewed_at=at
        )
        == 1
    )


def end(pk: int, fence: int, outcome: str) -> bool:
    return (
        Coordination.objects.filter(pk=pk, fence=fence).update(
            state=ENDED, ended_at=now(), outcome=outcome[:40], expires_at=None
        )
        == 1
    )


CANCELLED = "cancelled"


def cancel_waiting(job_path: str) -> bool:
    """End a job no coordinator holds (queued, or its coordinator lost and not yet adopted): no
    worker ever starts it. False when a live coordinator holds it (or it ended)."""
    at = now()
    waiting = Coordination.objects.filter(Q(_takeable(at)), job_path=job_path)
    return bool(waiting.update(state=ENDED, ended_at=at, outcome=CANCELLED, expires_at=None))


def drain(host: str) -> list[str]:
    """Move every job coordinated on `host` off it: its coordinator hands the job over at its
    next heartbeat, and a worker elsewhere takes it. Returns the jobs' folders."""
    held = Coordination.objects.filter(state=RUNNING, host=host)
    paths = list(held.values_list("job_path", flat=True))
    held.update(avoid_host=host)
    return paths


def holds(pk: int, fence: int) -> bool:
    return Coordination.objects.filter(pk=pk, fence=fence, state=RUNNING).exists()


def _in_loop() -> bool:
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _off_loop(fn: Any, *args: Any) -> Any:
    """`fn(*args)` (an ORM call), from a thread of its own when this one runs an event loop (the
    job's end, an event emitted in the loop); its error is raised here."""
    if not _in_loop():
        return fn(*args)
    answer: list[Any] = []
    failed: list[BaseException] = []

    def ask() -> None:
        from django.db import connections

        try:
            answer.append(fn(*args))
        except Exception as exc:  # noqa: BLE001 - raised again in the caller's thread
            failed.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=ask, name="bench-fence")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return answer[0]


@dataclass(frozen=True)
class Where:
    """Where a job is coordinated, for the job page and `bench results`."""

    state: str
    host: str
    worker: str
    fence: int
    renewed_at: datetime | None
    handovers: list[dict[str, Any]]
    outcome: str

    def lines(self) -> list[str]:
        if self.state == QUEUED and not self.host:
            head = "Coordination: waiting for a worker to take the job"
        elif self.state == ENDED and not self.host:
            head = f"Coordination: {self.outcome} before a worker took the job"
        elif self.state == ENDED:
            head = f"Coordinated on {self.host} (worker {self.worker}); ended: {self.outcome}"
        else:
            head = f"Coordinated on {self.host} (worker {self.worker})"
        return [head, *(handover_line(h) for h in self.handovers)]


def _clock(text: str) -> str:
    try:
        return timezone.localtime(datetime.fromisoformat(text)).strftime("%H:%M:%S")
    except (TypeError, ValueError):
        return str(text)


def handover_line(h: dict[str, Any]) -> str:
    lost = "handed over (drained)" if h.get("why") == "drained" else "lost"
    return (
        f"coordinator on {h.get('from')} {lost} at {_clock(str(h.get('lost_at')))}; "
        f"adopted by {h.get('to')} at {_clock(str(h.get('adopted_at')))}"
    )


def where(job_path: str) -> Where | None:
    row = (
        Coordination.objects.filter(job_path=job_path)
        .values("state", "host", "worker", "fence", "renewed_at", "handovers", "outcome")
        .first()
    )
    if row is None:
        return None
    return Where(
        row["state"],
        row["host"],
        row["worker"],
        row["fence"],
        row["renewed_at"],
        list(row["handovers"] or []),
        row["outcome"],
    )


# --- the fence of this process ------------------------------------------------------------------

_held: tuple[int, int] | None = None
_lost = threading.Event()
_lease_s = 0.0
_renewed_at = 0.0  # time.monotonic() when the last renewal that took was sent
_asked_at = 0.0  # when `fresh` last asked the database and it did not answer


def hold(pk: int, fence: int, lease_s: float = 0.0) -> None:
    """This process coordinates the job under `fence` with leases of `lease_s`: `check` holds its
    writes to it, and every event it emits passes `fresh` first."""
    global _held, _lease_s, _renewed_at
    from runs import events

    _held, _lease_s, _renewed_at = (pk, fence), lease_s, 0.0
    _lost.clear()
    events.gate(fresh)


def renewed(sent_at: float) -> None:
    """A renewal sent at `sent_at` (time.monotonic()) took: the lease is this process's for at
    least `lease_s` from then."""
    global _renewed_at
    _renewed_at = max(_renewed_at, sent_at)


def lost() -> None:
    """The heartbeat found the fence moved on."""
    _lost.set()


def fresh() -> None:
    """Before each event (and each lease's outcome taken in): nothing when this process renewed
    its lease within half its length (no other coordinator can have taken the job); otherwise it
    renews now, and a fence that moved on stops the process here, having written nothing. A
    process frozen past its lease (SIGSTOP, a paused machine) wakes up with every thread at once:
    its heartbeat's next beat may come after another thread's write, this check comes before it.
    The monotonic clock counts the time a process was stopped."""
    global _asked_at
    if _held is None:
        return
    if _lost.is_set():
        fenced_exit()
    at = time.monotonic()
    if at - _renewed_at < _lease_s / 2 or at - _asked_at < 1.0:
        return
    try:
        said = _off_loop(renew, _held[0], _held[1], _lease_s)
    except Exception:  # noqa: BLE001 - the database away: no other coordinator can take it either
        _asked_at = at
        return
    if said == "fenced":
        _lost.set()
        import sys

        print(
            f"bench: the job was taken over (fence {_held[1]} is no longer its own); this "
            "coordinator stops here",
            file=sys.stderr,
            flush=True,
        )
        fenced_exit()
    renewed(at)


def check() -> None:
    """Raise Fenced when this process coordinates under a fence that is no longer the job's
    (nothing when it coordinates none: `bench run` in a terminal)."""
    if _held is None:
        return
    try:
        ours = not _lost.is_set() and _off_loop(holds, *_held)
    except Exception as exc:
        if not _in_loop():
            raise  # the caller's own database error, as any of its queries would raise
        raise Fenced("the job's coordination row could not be read") from exc
    if not ours:
        _lost.set()
        raise Fenced(f"the job was taken over (fence {_held[1]} is no longer its own)")


def guard() -> None:
    """Before a write that counts (a lease for an attempt, the job's summary): a coordinator whose
    fence moved on stops here, having written nothing."""
    try:
        check()
    except Fenced as exc:
        import sys

        print(f"bench: {exc}; this coordinator stops here", file=sys.stderr, flush=True)
        fenced_exit()


def fenced_exit() -> None:
    """Stop this coordinator at once, writing nothing more: its attempts on workers go on, and
    the coordinator that took over adopts them."""
    os._exit(FENCED_EXIT)
