"""The worker's side of scale-out: one attempt a coordinator dispatched, run here with the same
trial code as in process (AttemptRunner), held by its lease.

The worker claims the lease and prepares the sandbox (ahead of a free slot: it holds up to
--prepare-ahead such), then starts the attempt the moment one of its slots frees, if fewer than the
job's -j run (the coordinator set -j on its dispatcher row and decides caps), and writes its
result to the lease. While it holds the lease it renews it and reports what its model
proxy counted; a stop (a cap or a signal) or a lost lease cancels the attempt here. Its typed
events go to the coordinator through Redis.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runs import events as ev
from runs.jobfolder import machine_error, out_of_files
from runs.trials.prepared import AttemptPlan, Prepared
from runs.workers import leases
from runs.workers.channel import control_key, events_key
from runs.workers.config import LOST_DIR, dispatcher_stale_s, lease_s, worker_alive_s
from runs.workers.context import JobContext, LeaseInfo, WorkerSetupError

S = leases.S
CHECK_S = 1.0  # the lease's row is read this often while held (the coordinator's hints come sooner)
WAIT_S = 0.25  # a prepared attempt asks again this often for a job slot another worker holds
HAND_BACK_S = 1.0  # and this often whether another worker has a slot free for it


@dataclass
class Held:
    """A lease this worker holds, and what the coordinator asked of it."""

    lease: int
    claim: int
    info: LeaseInfo
    rollout: str = ""
    order: str = ""  # "" | "discard" | "stop" | "lost"
    stop_reason: str | None = None  # a cap's `budget reached: ...`; None for a signal
    run_task: asyncio.Task[Any] | None = None
    prepared: Prepared | None = None
    runner: Any = None  # the job's AttemptRunner on this worker
    slot: bool = False  # it holds one of the worker's run slots
    free_elsewhere: bool | None = None  # another worker had a slot free when it was claimed
    usage_said: tuple[Any, ...] = ()

    def command(self, order: str, reason: str | None = None) -> None:
        """A discard, a stop or a loss: a running attempt is cancelled."""
        if self.order:
            return
        self.order, self.stop_reason = order, reason
        if self.prepared is not None and order == "stop":
            self.prepared.cancelled_by = reason  # timing.json says the cap cancelled it
        if self.run_task is not None and not self.run_task.done():
            self.run_task.cancel()


class LeaseRun:
    """One lease on this worker, from its claim to its last write."""

    def __init__(self, worker: Any, lease: int) -> None:
        self.w = worker  # runs.workers.runtime.WorkerRuntime
        self.lease = lease

    async def __call__(self, claim: int, info: LeaseInfo, free_elsewhere: bool | None) -> None:
        """The attempt of a lease this worker claimed (`claim_lease`), until its last write."""
        w, lease = self.w, self.lease
        started = time.monotonic()
        held = Held(lease, claim, info)
        held.free_elsewhere = free_elsewhere
        keeper = asyncio.create_task(self._keep(held))
        try:
            await self._run(held, started)
        except Exception as exc:
            # the machine failed it (its disk is full, say), not the task: the lease lapses now,
            # its coordinator runs it elsewhere, and this worker takes nothing more until it is well
            if (err := machine_error(exc) or out_of_files()) is None:
                raise
            keeper.cancel()
            await w.db(leases.give_up, held.lease, held.claim)
            w.machine.trouble(err, Path(held.info.job_path))
            self._ended(held, "lost", started, error=w.machine.problem)
            await self._give_up_the_others(held)
        finally:
            keeper.cancel()
            w.held.pop(held.rollout, None)
            await w.channel.drop(control_key(held.info.uid))

    async def _give_up_the_others(self, failed: Held) -> None:
        """The machine failed one attempt: the others held here would fail on it too. Each one's
        lease lapses now (its coordinator runs it elsewhere) and it stops here: a running one is
        cancelled and a prepared one discarded, their sandboxes removed."""
        for other in list(self.w.held.values()):
            if other is failed or other.order:
                continue
            await self.w.db(leases.give_up, other.lease, other.claim)
            other.command("lost")

    async def _run(self, held: Held, started: float) -> None:
        w, info = self.w, held.info
        try:
            context: JobContext = await w.context(info)
            task = context.task(info.task_path)
        except WorkerSetupError as exc:
            if (err := out_of_files()) is not None:
                # the machine failed it (a task that could not be read, a proxy that could not
                # listen, for want of a file), not the task: given up, not failed (__call__)
                raise err from exc
            await w.db(leases.failed, held.lease, held.claim, str(exc))
            self._hint(held, S.FAILED, error=str(exc))
            self._ended(held, "failed", started, error=str(exc))
            return
        if await self._handed_back(held):  # it would wait here while another worker idles
            self._ended(held, "handed back", started)
            return
        runner = held.runner = context.runner
        plan = AttemptPlan(task, info.trial_name, info.trial_index, info.attempt, info.env_digest)
        t = time.monotonic()
        w.pending += 1
        try:
            prepared = held.prepared = await runner.prepare(plan)
            work_s = time.monotonic() - t
            held.rollout = prepared.attempt_dir.name
            w.held[held.rollout] = held
            await self._start(held)
        finally:
            w.pending -= 1
        try:
            if held.order == "handed back":
                runner.discard(prepared)
                self._ended(held, "handed back", started)
                return
            await self._go(held, prepared, started, work_s)
        finally:
            if held.slot:
                w.slots.give()

    async def _handed_back(self, held: Held) -> bool:
        """Back to the queue when it would wait for a slot here (every free one is spoken for)
        while another worker has one free: an attempt must not wait here while a slot idles
        there. Asked at its claim, and each second its prepared sandbox waits."""
        w = self.w
        if w.slots.free > w.pending or held.order:
            return False
        if held.free_elsewhere is not None:  # asked with its claim
            elsewhere, held.free_elsewhere = held.free_elsewhere, None
        else:
            queues = [held.info.queue]
            elsewhere = await w.keep_db(
                leases.slot_free_elsewhere, w.worker_id, queues, worker_alive_s()
            )
        if not elsewhere:
            return False
        if not await w.db(leases.hand_back, held.lease, held.claim):
            return False
        await asyncio.get_running_loop().run_in_executor(
            None, w.requeue, held.lease, held.info.queue
        )
        return True

    async def _start(self, held: Held) -> None:
        """The prepared sandbox waits for a slot of this worker, then for one of its job's -j
        (taken by attempts on other workers): the agent starts the moment both are free, with no
        round trip to the coordinator."""
        w, waited = self.w, time.monotonic()
        asked = waited
        while not held.order:
            if not w.slots.take():
                await w.slots.freed(WAIT_S)
                if not w.slots.free and time.monotonic() - asked >= HAND_BACK_S:
                    asked = time.monotonic()
                    if await self._handed_back(held):
                        held.order = "handed back"
                continue
            held.slot = True
            said = await w.db(
                leases.start,
                held.lease,
                held.claim,
                held.rollout,
                time.monotonic() - waited,
                then=self._hint_if(held, S.RUNNING, lambda said: said == leases.STARTED),
            )
            if said == leases.STARTED:
                return
            held.slot = False
            w.slots.give(wake=said != leases.FULL)
            if said == leases.OFF:  # called off, or taken back, while its sandbox was prepared
                orders = await w.db(leases.orders, held.lease, held.claim, dispatcher_stale_s())
                held.command("discard" if orders is not None and orders[1] else "lost")
                return
            await w.slots.freed(WAIT_S)  # FULL: the job's slots are taken elsewhere

    async def _go(self, held: Held, prepared: Prepared, started: float, work_s: float) -> None:
        w, info, runner = self.w, held.info, held.runner
        if held.order:  # called off before it started, or its lease was taken back
            runner.discard(prepared)
            if held.order != "lost":
                await w.db(leases.discarded, held.lease, held.claim)
                self._hint(held, S.DISCARDED)
            self._ended(held, held.order if held.order == "lost" else "discarded", started)
            return
        w.emit(
            ev.WorkerAttemptStarted(
                w.name, info.job_name, info.trial_name, info.attempt, held.rollout
            )
        )
        t = time.monotonic()
        held.run_task = asyncio.create_task(runner.run(prepared))
        try:
            result = await asyncio.shield(held.run_task)
        except asyncio.CancelledError:
            if not held.run_task.cancelled():
                raise  # this coroutine itself was cancelled (the worker is shutting down)
            await self._stopped(held, prepared, work_s + time.monotonic() - t, started)
            return
        work_s += time.monotonic() - t
        if result.error and (err := out_of_files()) is not None:
            # an error of the machine the attempt recorded as its own (its verifier could not
            # copy the tests, for want of a file): the machine's, given up (__call__), not counted
            raise err
        document = result.to_json()
        took = self._hint_if(held, S.FINISHED, bool, result=document)
        if await w.db(leases.finish, held.lease, held.claim, document, work_s, then=took):
            self._ended(held, "finished", started, result.reward, result.error)
        else:  # taken back while it ran: another worker runs it; nothing of this run counts
            self._salvage(held)
            self._ended(held, "lost", started)

    async def _stopped(self, held: Held, prepared: Prepared, work_s: float, started: float) -> None:
        if held.order == "lost":
            self._salvage(held)
            self._ended(held, "lost", started)
            return
        record = prepared.cancelled_record
        await self.w.db(leases.cancelled, held.lease, held.claim, record, work_s)
        self._hint(held, S.CANCELLED, cancelled_record=record)
        self._ended(held, "cancelled", started, error=held.stop_reason)

    async def _keep(self, held: Held) -> None:
        """While held (until the attempt is done here): the coordinator's hints, the lease renewed
        every sixth of its time (and whenever what the proxy counted changed, which it reports),
        its orders read once a second. A lease taken back stops the attempt here."""
        w = self.w
        renewed = time.monotonic()
        while True:
            message = await w.channel.receive(control_key(held.info.uid), CHECK_S)
            if message is not None:
                self._on_hint(held, message)
            usage = w.usage_report(held)
            if time.monotonic() - renewed >= lease_s() / 6 or usage is not None:
                if not await w.keep_db(leases.renew, held.lease, held.claim, lease_s(), usage):
                    held.command("lost")
                    return
                renewed = time.monotonic()
            orders = await w.keep_db(leases.orders, held.lease, held.claim, dispatcher_stale_s())
            if orders is None:
                held.command("lost")
                return
            self._on_orders(held, *orders)

    def _on_hint(self, held: Held, message: dict[str, Any]) -> None:
        if "stop" in message:
            held.command("stop", message.get("stop") or None)
        elif message.get("discard"):
            held.command("discard")

    def _on_orders(self, held: Held, state: str, cancel: str, reason: str, fresh: bool) -> None:
        if cancel == "stop":
            held.command("stop", reason or None)
        elif cancel == "discard" or (state == S.PREPARING and not fresh):
            held.command("discard")  # called off, or its coordinator is gone

    def _hint(self, held: Held, state: str, **row: Any) -> None:
        """The lease's new state (just written to its row), with what the coordinator reads of
        it: it need not read the row to act (it does once a second anyway)."""
        message = {
            "lease": held.lease,
            "claim": held.claim,
            "change": {"state": state, "rollout_name": held.rollout, "worker": self.w.name, **row},
        }
        self.w.post(events_key(held.info.job_path), message)

    def _hint_if(
        self, held: Held, state: str, took: Callable[[Any], bool], **row: Any
    ) -> Callable[[Any], None]:
        """For a database trip's `then`: the hint goes from the database's thread the moment the
        write took (`took` of its answer), with no hop back through the loop first."""

        def then(answer: Any) -> None:
            if took(answer):
                self._hint(held, state, **row)

        return then

    def _ended(
        self,
        held: Held,
        state: str,
        started: float,
        reward: float | None = None,
        error: str | None = None,
    ) -> None:
        info = held.info
        self.w.emit(
            ev.WorkerAttemptEnded(
                self.w.name,
                info.job_name,
                info.trial_name,
                held.rollout,
                state,
                time.monotonic() - started,
                reward,
                error,
            )
        )

    def _salvage(self, held: Held) -> None:
        """A run whose lease was taken back wrote on after its folder went to .lost/: what it wrote
        goes there too, so no stray folder counts as an attempt."""
        job_dir = Path(held.info.job_path)
        stray = job_dir / held.rollout
        if held.rollout and stray.is_dir():
            target = job_dir / LOST_DIR / held.rollout
            if target.exists():
                target = target.with_name(f"{held.rollout}.{held.claim}")
            target.parent.mkdir(exist_ok=True)
            try:
                stray.rename(target)
            except OSError:
                shutil.rmtree(stray, ignore_errors=True)


def claim_lease(
    lease: int, worker: int, would_wait: bool
) -> tuple[int, LeaseInfo, bool | None] | None:
    """The claim, what the lease names and, when it would wait for a slot here, whether another
    worker has one free; None when another worker holds it, it ended, or its coordinator is gone.
    Blocking: in the Celery thread that got the lease's id, whose database connection lives on
    between attempts (Celery's per-task close is off: settings.CELERY_DB_REUSE_MAX); one past
    CONN_MAX_AGE or broken by an error is replaced here."""
    from django.db import close_old_connections

    from runs.workers.context import INFO_FIELDS, info_of

    close_old_connections()
    taken = leases.claim_reading(lease, worker, lease_s(), dispatcher_stale_s(), INFO_FIELDS)
    if taken is None:
        return None
    claim, row = taken
    info = info_of(row)
    elsewhere = (
        leases.slot_free_elsewhere(worker, [info.queue], worker_alive_s()) if would_wait else None
    )
    return claim, info, elsewhere


def forward(
    post: Callable[[str, dict[str, Any]], None], held: dict[str, Held]
) -> Callable[[ev.Event], None]:
    """The AttemptRunner's emit on a worker: each event to its job's coordinator, named by the
    lease it belongs to (an event of a run that lost its lease is dropped there)."""

    def emit(event: ev.Event) -> None:
        rollout = getattr(event, "rollout_name", None)
        h = held.get(rollout) if isinstance(rollout, str) else None
        if h is None:
            return
        message = {"lease": h.lease, "claim": h.claim, "kind": event.kind}
        message["payload"] = event.to_payload()
        post(events_key(h.info.job_path), message)

    return emit


def usage_of(usage: Any) -> dict[str, Any] | None:
    """What the proxy counted, as the lease's JSON."""
    if not dataclasses.is_dataclass(usage) or isinstance(usage, type):
        return None
    return dataclasses.asdict(usage)
