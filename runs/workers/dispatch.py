"""The coordinator's side of scale-out: an attempt runner whose attempts run on `bench worker`s.

It has the AttemptRunner's shape (prepare / run / discard), so the coordinator decides -j, caps,
retries and resume exactly as in process. `prepare` queues a lease (the broker carries its id
only) and waits until a worker has started it: workers prepare sandboxes ahead and start one the
moment a slot of theirs frees, while fewer than the job's -j run (the dispatcher's row holds -j;
the start is a locked check in the database, so no round trip to the coordinator leaves a slot
idle). `run` waits for its result; a cancel asks the worker to stop it and waits for what it
spent. The worker's typed events come back through Redis and go out on the job's bus. A lease whose worker stopped renewing it is
queued again (its lost run moved to `.lost/`), so the attempt runs once more, elsewhere, and
counts once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from runs import events as ev
from runs.jobfolder import NOT_STARTED_MARK, new_attempt_dir, write_json
from runs.results.attempt_folder import RESULT
from runs.results.trial_result import TrialResult
from runs.trials.prepared import AttemptPlan, Prepared
from runs.workers import leases
from runs.workers.broker import Broker
from runs.workers.channel import Channel, control_key, events_key
from runs.workers.config import LOST_DIR
from runs.workers.sealed import Sealed, deployment_key, seal, sealed_key, ttl_s

S = leases.S
POLL_S = 1.0  # the database is read this often for every lease waited on (hints come sooner)
SEEN_EVERY_S = 2.0
STOP_WAIT_S = 60.0  # how long a cancel waits for the worker to stop the attempt and say so
CLOSE_WAIT_S = 5.0  # how long the end of a job waits for its hint reader and poll to stop
RESEND_S = 15.0  # a lease queued again (handed back, or lost) that no worker took is sent again
# what `prepare` waits for: the sandbox is up and the attempt started (or it went no further)
PREPARED = (S.RUNNING, S.FINISHED, S.FAILED, S.CANCELLED, S.DISCARDED)
DONE = (S.FINISHED, S.FAILED, S.CANCELLED, S.DISCARDED)  # nothing more happens to it


@dataclass
class RemotePrepared(Prepared):
    lease: int = 0
    claim: int = 0  # the claim its sandbox was prepared under


class RemoteRunner:
    """Runs a job's attempts on workers; one per job run, in the job's event loop."""

    def __init__(
        self,
        job_dir: Path,
        emit: Callable[[ev.Event], None],
        broker: Broker,
        channel: Channel,
        queue: str,
        sealed: Sealed | None = None,
    ) -> None:
        self.job_dir = job_dir
        self.sealed = (
            sealed or Sealed()
        )  # what its workers are handed sealed (runs/workers/sealed.py)
        self.job_path = str(job_dir.resolve())
        self.emit = emit
        self.broker = broker
        self.channel = channel
        self.queue = queue
        self.dispatcher = 0
        self.rows: dict[int, leases.LeaseRow] = {}
        self._changed: dict[int, asyncio.Event] = {}
        self._adopted: dict[str, leases.LeaseRow] = {}
        self._by_key: dict[str, int] = {}  # the rollout the coordinator knows an attempt by
        self._unsent: set[int] = set()
        self._requeued: dict[tuple[int, int], float | None] = {}  # (lease, claim): queued since
        self._seen_claimed: dict[int, float] = {}
        self._floor: dict[int, int] = {}  # the lowest claim whose hints still count
        self._collected_at: dict[int, Any] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._removals: set[asyncio.Task[Any]] = set()
        self._db = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bench-leases")
        self._server: str | None = None
        self._closing = False  # the hint reader and the poll stop (a cancel alone may be lost)

    # --- life -----------------------------------------------------------------------------------

    async def db(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Lease rows are read and written in one thread of their own, off the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._db, lambda: fn(*args, **kwargs))

    async def open(self, cwd: Path, settings: dict[str, Any], slots: int) -> list[str]:
        """Register as the job's dispatcher (its -j `slots` held by the workers) and take over
        attempts an earlier coordinator left running on workers; returns their rollouts (the plan
        must not count them as ended)."""
        self.dispatcher = await self.db(
            leases.open_dispatcher, self.job_path, str(cwd), self.queue, settings, slots
        )
        await self._seal()  # before any attempt of it can reach a worker
        adopted = await self.db(leases.adopt, self.job_path, self.dispatcher)
        for row in adopted:
            self._adopted[row.trial_name] = row
            self._set(row)
        self._server = await self.channel.server_id()
        self._tasks = [
            asyncio.create_task(self._read_hints()),
            asyncio.create_task(self._poll()),
        ]
        return [row.rollout_name for row in adopted]

    async def close(self) -> None:
        self._closing = True
        for task in self._tasks:
            task.cancel()
        # a task that does not end on its cancel (a client library swallowed it) is left: the job
        # has ended, its leases' rows are written below
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=CLOSE_WAIT_S)
        await self.db(leases.close_dispatcher, self.dispatcher)
        await self.db(leases.collected, self._collected_at)
        await self.channel.drop(sealed_key(self.dispatcher))
        await self.channel.close()
        self._db.shutdown(wait=True)

    # --- the AttemptRunner's shape ------------------------------------------------------------

    async def prepare(self, plan: AttemptPlan) -> Prepared:
        """Queue the attempt for a worker and wait until its sandbox is up there."""
        adopted = self._adopted.pop(plan.trial_name, None)
        if adopted is not None:
            lease = adopted.id
            plan = replace(plan, attempt=adopted.attempt)
        else:
            lease = await self.db(
                leases.create,
                self.dispatcher,
                job_path=self.job_path,
                trial_name=plan.trial_name,
                task_name=plan.task.name,
                task_path=str(Path(plan.task.path).resolve()),
                trial_index=plan.trial_index,
                attempt=plan.attempt,
                env_digest=plan.env_digest,
                enqueue=self._enqueue,
            )
            self._set((await self.db(leases.rows, [lease]))[lease])
        try:
            row = await self._wait(lease, lambda r: r.state in PREPARED)
        except asyncio.CancelledError:  # a signal or a cap while a worker had it: called off
            self._discard_later(lease)
            raise
        now = time.monotonic()
        prepared = RemotePrepared(
            plan,
            self.job_dir / (row.rollout_name or f"{plan.task.name}__unstarted"),
            row.claimed_at.isoformat() if row.claimed_at else "",
            self._seen_claimed.get(lease, now),
            ready_at=now,
            lease=lease,
            claim=row.claim,
        )
        self._by_key[prepared.attempt_dir.name] = lease
        if row.state == S.FAILED:
            prepared.error, prepared.error_category = row.error, "worker_setup"
        # its worker started it (one of the job's -j): the coordinator's slot follows
        prepared.running = row.state in (S.RUNNING, S.FINISHED)
        return prepared

    async def run(self, prepared: Prepared) -> TrialResult:
        """Give the attempt its slot on its worker and wait for its result; a cancel stops it
        there and waits for what it spent (`prepared.cancelled_record`)."""
        assert isinstance(prepared, RemotePrepared)
        prepared.begin()
        if prepared.error is not None:
            return self._failed(prepared, prepared.error)
        lease = prepared.lease
        changed = self._event(lease)
        try:
            while True:
                changed.clear()
                row = self.rows[lease]
                if row.state == S.FINISHED and row.result is not None:
                    self._collected(lease)
                    return TrialResult.from_json(row.result)
                if row.state in (S.FAILED, S.CANCELLED, S.DISCARDED):
                    # the worker gave up on it, or was stopped (a cold shutdown): retried as
                    # infrastructure
                    self._collected(lease)
                    why = row.error or f"its worker {row.worker} stopped it ({row.state})"
                    return self._failed(prepared, why)
                await self._sleep_on(changed)
        except asyncio.CancelledError:
            await self._stop(prepared)
            raise

    def discard(self, prepared: Prepared) -> None:
        """An attempt that never takes its slot: its worker removes the sandbox and the folder."""
        if isinstance(prepared, RemotePrepared) and prepared.lease != 0:
            self._discard_later(prepared.lease)

    def _discard_later(self, lease: int) -> None:
        task = asyncio.get_running_loop().create_task(self._discard(lease))
        self._removals.add(task)
        task.add_done_callback(self._removals.discard)

    async def drain(self) -> None:
        while self._removals:
            await asyncio.gather(*list(self._removals), return_exceptions=True)

    def remove_never_started(self) -> None:
        for mark in self.job_dir.glob(f"*__*/{NOT_STARTED_MARK}"):
            if not (mark.parent / RESULT).exists():
                shutil.rmtree(mark.parent, ignore_errors=True)

    def in_flight(self, key: str) -> int:
        usage = self.usage(key)
        return int(getattr(usage, "in_flight", 0) or 0)

    def usage(self, key: str) -> Any:
        """What the worker's proxy counted for the attempt so far (its lease's last report)."""
        row = self.rows.get(self._by_key.get(key, 0))
        return SimpleNamespace(**row.usage) if row is not None and row.usage else None

    # --- the lease's life -------------------------------------------------------------------------

    def _enqueue(self, lease: int) -> None:
        """After the lease's row is committed (a worker must find it): its id to the queue."""
        try:
            self.broker.enqueue(lease, self.queue)
        except Exception:  # noqa: BLE001 - the broker is down: the poll sends it again
            self._unsent.add(lease)
        else:
            self._unsent.discard(lease)

    def _set(self, row: leases.LeaseRow) -> None:
        old = self.rows.get(row.id)
        if row.state != S.QUEUED and (old is None or old.claim != row.claim):
            self._seen_claimed.setdefault(row.id, time.monotonic())
        self.rows[row.id] = row
        self._changed.setdefault(row.id, asyncio.Event()).set()

    def _newer(self, row: leases.LeaseRow, claim: int, state: Any) -> bool:
        """A hint tells of a later state than the row as known here (hints of a claim taken back
        are stale whatever they say)."""
        if claim < self._floor.get(row.id, 0) or claim < row.claim:
            return False
        return claim > row.claim or ORDER.get(state, 0) > ORDER.get(row.state, 0)

    def _event(self, lease: int) -> asyncio.Event:
        return self._changed.setdefault(lease, asyncio.Event())

    async def _wait(self, lease: int, done: Callable[[leases.LeaseRow], bool]) -> leases.LeaseRow:
        changed = self._event(lease)
        while True:
            changed.clear()  # before the row is read: a change from here on wakes the wait
            if done(row := self.rows[lease]):
                return row
            await self._sleep_on(changed)

    @staticmethod
    async def _sleep_on(changed: asyncio.Event) -> None:
        try:
            await asyncio.wait_for(changed.wait(), POLL_S * 2)
        except TimeoutError:
            pass

    async def _stop(self, prepared: RemotePrepared) -> None:
        """Cancelled while it ran (a cap or a signal): the worker stops it and removes its sandbox;
        for a cap, what its agent spent comes back with it."""
        lease = prepared.lease
        state = await self.db(leases.request_cancel, lease, "stop", prepared.cancelled_by)
        await self.channel.send(control_key(self.rows[lease].uid), {"stop": prepared.cancelled_by})
        if state not in leases.ENDED:
            try:
                await asyncio.wait_for(
                    self._wait(lease, lambda r: r.state in leases.ENDED), STOP_WAIT_S
                )
            except TimeoutError:
                pass
        elif self.rows[lease].state not in leases.ENDED:
            # it ended before the cancel reached it, and no hint or poll said so yet: the row
            # read now tells how (a finished run's spend counts against the cap below)
            fresh = (await self.db(leases.rows, [lease])).get(lease)
            if fresh is not None and fresh.claim >= self.rows[lease].claim:
                self._set(fresh)
        row = self.rows[lease]
        if row.state == S.CANCELLED and prepared.cancelled_by is not None:
            prepared.cancelled_record = row.cancelled_record
        elif row.state == S.FINISHED and row.result and prepared.cancelled_by is not None:
            # it finished on its worker as the cap cancelled it here: its result.json stands, and
            # the cap counts what it spent, as it would a cancelled attempt's
            prepared.cancelled_record = finished_record(row.result, prepared.cancelled_by)
        self._collected(lease)

    async def _discard(self, lease: int) -> None:
        state = await self.db(leases.request_cancel, lease, "discard")
        if state not in leases.ENDED:
            await self.channel.send(control_key(self.rows[lease].uid), {"discard": True})

    def _collected(self, lease: int) -> None:
        """When the coordinator had the outcome (the benchmark's clock), written at the end in one go."""
        self._collected_at[lease] = leases.now()

    def _failed(self, prepared: RemotePrepared, error: str) -> TrialResult:
        """An attempt no worker could run: its own folder and result.json, as an infrastructure
        failure the error table retries."""
        plan = prepared.plan
        folder = new_attempt_dir(self.job_dir, plan.task.name)
        result = TrialResult(
            task_name=plan.task.name,
            rollout_name=folder.name,
            trial_name=plan.trial_name,
            trial_index=plan.trial_index,
            attempt=plan.attempt,
            agent="",
            agent_name="",
            model=None,
            started_at=prepared.started_at,
        )
        result.fail(error, "worker_setup")
        write_json(folder / RESULT, result.to_json())
        return result

    # --- hints and the poll -----------------------------------------------------------------------

    async def _read_hints(self) -> None:
        """Workers' events go out on the job's bus; lease changes refresh the row at once."""
        key = events_key(self.job_path)
        while not self._closing:
            for message in await self.channel.receive_all(key, 1.0):
                self._on_hint(message)

    def _on_hint(self, message: dict[str, Any]) -> None:
        lease, claim = message.get("lease"), message.get("claim")
        row = self.rows.get(lease) if isinstance(lease, int) else None
        if "kind" in message:
            if row is not None and claim != row.claim:
                return  # a lost run's, still talking
            try:
                event = ev.from_payload(message["kind"], message.get("payload") or {})
            except (KeyError, TypeError):
                return
            self.emit(event)
        elif row is not None and isinstance(change := message.get("change"), dict):
            if isinstance(claim, int) and self._newer(row, claim, change.get("state")):
                self._set(replace(row, claim=claim, **_fields(change)))

    async def _poll(self) -> None:
        """Each second: the rows of the leases waited on, expired leases taken back, ids the broker
        did not take sent again; every 2 s the coordinator says it is alive."""
        seen = 0.0
        while not self._closing:
            await asyncio.sleep(POLL_S)
            try:
                if time.monotonic() - seen >= SEEN_EVERY_S:
                    seen = time.monotonic()
                    await self._alive()
                await self._poll_once()
            except Exception:  # noqa: BLE001 - a database hiccup: the next poll tries again
                continue

    async def _seal(self) -> None:
        """The run's secrets for its workers, sealed anew with a fresh time limit."""
        token = seal(self.sealed, deployment_key())
        await self.channel.put(sealed_key(self.dispatcher), token, ttl_s())

    async def _alive(self) -> None:
        await self.db(leases.dispatcher_seen, self.dispatcher)
        await self._seal()
        server = await self.channel.server_id()
        if server is not None and self._server is not None and server != self._server:
            # Redis restarted: the queue it held went with it
            self._unsent.update(i for i, r in self.rows.items() if r.state == S.QUEUED)
        self._server = server or self._server

    async def _poll_once(self) -> None:
        waited = [i for i, r in self.rows.items() if r.state not in DONE]
        for row in (await self.db(leases.rows, waited)).values():
            known = self.rows[row.id]
            if row.claim < known.claim or (
                row.claim == known.claim and ORDER.get(row.state, 0) < ORDER.get(known.state, 0)
            ):
                continue  # read before a change a hint already told of
            self._set(row)
            if row.state == S.ABANDONED and await self.db(leases.requeue_abandoned, row.id):
                self._unsent.add(row.id)
            elif row.state in leases.HELD and row.expires_at and row.expires_at < leases.now():
                await self._lost(row)
            elif row.state == S.QUEUED and row.claim > 0:
                self._queued_again(row)
        loop = asyncio.get_running_loop()
        for lease in list(self._unsent):
            await loop.run_in_executor(None, self._enqueue, lease)

    def _queued_again(self, row: leases.LeaseRow) -> None:
        """A lease queued again under a later claim (a worker handed it back, or it was lost) that
        no worker has taken for RESEND_S: its message may never have reached Redis (the worker
        gives up after some seconds), so it is sent once more. A second message for a lease is
        harmless: one claim wins, the other worker finds it taken."""
        key = (row.id, row.claim)
        since = self._requeued.setdefault(key, time.monotonic())
        if since is not None and time.monotonic() - since >= RESEND_S:
            self._requeued[key] = None  # once per claim; a send that fails is tried each poll
            self._unsent.add(row.id)

    async def _lost(self, row: leases.LeaseRow) -> None:
        """Its worker stopped renewing the lease (killed, say): queued again for another worker;
        the lost run's folder goes to .lost/ so that nothing of it is counted."""
        taken = await self.db(leases.requeue_expired, row.id, row.claim)
        if taken is None:
            return
        self._set(taken)
        self._floor[row.id] = row.claim + 1
        if taken.state != S.QUEUED:
            return  # it had been called off: it ends with its worker
        if row.rollout_name:
            lost = self.job_dir / LOST_DIR
            lost.mkdir(exist_ok=True)
            try:
                (self.job_dir / row.rollout_name).rename(lost / row.rollout_name)
            except OSError:
                pass
            shutil.rmtree(self.job_dir / ".staging" / row.rollout_name, ignore_errors=True)
        self.emit(ev.AttemptLost(row.trial_name, row.rollout_name, row.worker))
        self._unsent.add(row.id)


def finished_record(result: dict[str, Any], cancelled_by: str) -> dict[str, Any]:
    """What the cap counts of an attempt that finished as it cancelled it: its spend (a timing.json
    record's shape: runs.trials.attempt.cancelled_record)."""
    return {
        "total": (result.get("timing") or {}).get("total"),
        "cancelled": True,
        "cancelled_by": cancelled_by,
        "agent_result": result.get("agent_result") or {},
    }


# a lease's states in the order one claim goes through them
ORDER = {S.QUEUED: 0, S.PREPARING: 1, S.RUNNING: 2, **dict.fromkeys(DONE, 3)}
HINTED = ("state", "rollout_name", "worker", "result", "cancelled_record", "error")


def _fields(change: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in change.items() if k in HINTED}
