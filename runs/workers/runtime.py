"""A `bench worker` process: one event loop where its attempts run (as in a `bench run`) and its
model proxy serves their sandboxes, its row in the database (seen every 2 s), and a sweep that
removes this machine's containers whose owning process died (a worker killed mid-attempt).

Celery's threads hand each attempt (a lease id) to `run`, which claims it there and blocks until
the attempt is done here; the attempt itself runs in the loop. Hints to coordinators go out from a
thread of their own (runs.workers.channel.Outbox).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from runs import events as ev
from runs.databases import reconnecting
from runs.gateway import ModelGateway
from runs.jobfolder import machine_error, out_of_files
from runs.sandboxes.owners import reap_orphans
from runs.workers import leases
from runs.workers.broker import Broker
from runs.workers.channel import Channel, Outbox
from runs.workers.config import reap_every_s
from runs.workers.context import JobContext, LeaseInfo, WorkerSetupError, build_context
from runs.workers.duties import JobTaker, MachineTrouble
from runs.workers.execute import Held, LeaseRun, claim_lease, forward, usage_of
from runs.workers.sealed import (
    Sealed,
    SealError,
    deployment_key,
    sealed_key,
    ttl_s,
    unseal,
)

SEEN_EVERY_S = 2.0
# how long a worker asks Redis for a run's sealed values: when it answers (holding none yet), and
# while it does not
SEALED_WAIT_S = {True: 6.0, False: 60.0}
PASS_ON_S = 2.0  # a worker in trouble holds a Celery thread this long after it passes a lease on
MAX_CONTEXTS = 32  # runs remembered (their agent, tasks, image cache); the oldest goes first

_current: WorkerRuntime | None = None


class PassOn(Exception):
    """This worker takes no attempt now (its machine is in trouble): the lease's message goes
    back to the queue for another worker (runs/workers/celery_tasks.py)."""


def current() -> WorkerRuntime:
    """The runtime `bench worker` started in this process (the Celery task's way to it)."""
    if _current is None:
        raise RuntimeError("no worker runtime in this process: start it with `bench worker`")
    return _current


class Slots:
    """The worker's run slots (its --concurrency), in its event loop: prepared attempts take one
    to start and give it back when they end here."""

    def __init__(self, n: int) -> None:
        self.free = n
        self._given = asyncio.Event()

    def take(self) -> bool:
        if self.free <= 0:
            return False
        self.free -= 1
        return True

    def give(self, wake: bool = True) -> None:
        """A slot back; `wake=False` when it was taken only to find the job's -j full: the others
        waiting here would find the same, so they are not woken to ask again."""
        self.free += 1
        if wake:
            self._given.set()

    async def freed(self, timeout: float) -> None:
        """Until a slot is given back here, or `timeout` seconds (a job slot may free elsewhere)."""
        self._given.clear()
        try:
            await asyncio.wait_for(self._given.wait(), timeout)
        except TimeoutError:
            pass


class WorkerRuntime:
    def __init__(
        self,
        *,
        name: str,
        slots: int,
        queues: list[str],
        client: Any,
        ahead: int = 0,
        broker: Broker | None = None,
        gateway: ModelGateway | None,
        redis_url: str,
        emit: Callable[[ev.Event], None],
        pass_env: dict[str, str] | None = None,
        coordinate_argv: list[str] | None = None,
    ) -> None:
        self.name, self.run_slots, self.queues = name, slots, queues
        # the values of this worker's environment its admin lets sandboxes have (--pass-env)
        self.pass_env = dict(pass_env or {})
        self.ahead = ahead  # sandboxes prepared beside the running attempts, ready for a slot
        self.broker = broker  # to queue again a lease it hands back
        self.pending = 0  # attempts held here that have not started: preparing, or prepared
        self.client = client
        self.gateway = gateway
        self.redis_url = redis_url
        self.emit = emit
        self.worker_id = 0
        self.serves = False  # Celery takes messages: it may take jobs too
        self.consumer: Any = None  # Celery's consumer, which takes the queues' messages
        self.jobs = JobTaker(self, coordinate_argv)  # the jobs on the fleet it coordinates
        self.machine = MachineTrouble(self)  # why it takes nothing now (a full disk, say)
        self.held: dict[str, Held] = {}  # by rollout: whose events go to which coordinator
        self.loop = asyncio.new_event_loop()
        self.channel: Channel
        self.outbox: Outbox
        # an attempt's start and end each wait on their database trip (its claim is made in
        # Celery's thread); the renewals and reads of the held leases (each a second) have a
        # thread of their own, not to queue ahead of them
        self._db = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bench-leases")
        self._keep_db = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bench-keep")
        self._contexts: dict[int, JobContext] = {}
        self._context_lock: asyncio.Lock
        self._gateway_port = 0
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._reaped = 0  # orphan containers removed as it started

    # --- the process ----------------------------------------------------------------------------

    def start(self) -> None:
        global _current
        self.outbox = Outbox(self.redis_url)
        try:
            import uvloop

            self.loop = uvloop.new_event_loop()  # the model proxy's figures are uvloop's
        except ImportError:  # pragma: no cover - uvloop is a dependency
            pass
        self.loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(
                max_workers=max(16, 3 * (self.run_slots + self.ahead) + 4)
            )
        )
        ready = threading.Event()
        loop_thread = threading.Thread(
            target=self._serve, args=(ready,), name="bench-worker-loop", daemon=True
        )
        loop_thread.start()
        ready.wait()
        # it serves no queue until Celery takes messages (`serving`): no coordinator counts on
        # it, and no other worker hands it a lease, before then
        self.worker_id = leases.register_worker(self.name, self.run_slots, [])
        self._reaped = len(reap_orphans(self.client))
        seen = threading.Thread(target=self._seen, name="bench-worker-seen", daemon=True)
        seen.start()
        self._threads = [loop_thread, seen]
        _current = self

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.channel = Channel(self.redis_url)
        self.slots = Slots(self.run_slots)
        self._context_lock = asyncio.Lock()
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    def run(self, lease: int) -> None:
        """Run the lease's attempt here (from a Celery thread); returns when it is done here. Its
        claim is made in this thread: the loop gets the attempt with its lease held."""
        if self.machine.problem:
            self._send_on(lease)
            return
        # whether it would wait for a slot here (read across threads: a hint for the claim's
        # question whether another worker has one free)
        would_wait = self.slots.free <= self.pending
        try:
            # the database may have dropped this Celery thread's connection (it restarted)
            taken = reconnecting(claim_lease, lease, self.worker_id, would_wait)
        except Exception as exc:
            # the machine failed the claim (too many open files for a connection, say): an
            # error would ack the message and leave the lease queued with no message
            if (err := machine_error(exc) or out_of_files()) is None:
                raise
            self.machine.trouble(err)
            self._pass_on(lease)
        if taken is not None:
            asyncio.run_coroutine_threadsafe(LeaseRun(self, lease)(*taken), self.loop).result()

    def _send_on(self, lease: int) -> None:
        """A lease that reached this worker while its machine is in trouble (Celery still takes
        the queue's messages): unclaimed, sent to the back of the queue again for another worker
        (a message put back at its head came straight back to workers in trouble). This thread
        then waits a moment, so that this worker does not take it back at once, again and again."""
        from django.db import close_old_connections

        try:
            close_old_connections()
            queue = reconnecting(leases.queue_of, lease)
        except Exception:  # noqa: BLE001 - its database away: put back as the claim's failure is
            self._pass_on(lease)
        if queue is not None:
            self.requeue(lease, queue)
        self._stopping.wait(PASS_ON_S)

    def _pass_on(self, lease: int) -> NoReturn:
        """A lease whose claim the machine failed (too many open files for a connection) goes back
        to the queue unclaimed: the Celery task rejects its message with requeue, on the
        consumer's own connection (which needs no new file; an error would ack it). This thread
        waits a moment first, so that this worker does not take it back at once."""
        self._stopping.wait(PASS_ON_S)
        raise PassOn(lease)

    def serving(self, consumer: Any = None) -> None:
        """Celery's consumer is up (its `worker_ready`): the row names the queues it serves, and
        the log says it is up."""
        from django.db import connections

        self.consumer = consumer
        if self.machine.problem:  # in trouble before Celery was up
            self.machine.consume(False)
        try:
            leases.worker_serving(self.worker_id, self.queues)
        finally:
            connections.close_all()
        self.serves = True
        self.emit(
            ev.WorkerStarted(
                self.name, self.run_slots, tuple(self.queues), self._reaped, self.ahead
            )
        )

    def draining(self) -> None:
        """Celery's warm shutdown began (it takes nothing more): the row says it serves no queue,
        so other workers stop handing it leases. From a thread of its own: this is called from a
        signal handler."""

        def mark() -> None:
            from django.db import connections

            try:
                leases.worker_draining(self.worker_id)
            except Exception:  # noqa: BLE001 - the database away: it stops anyway
                pass
            finally:
                connections.close_all()

        self.serves = False
        threading.Thread(target=mark, name="bench-worker-draining", daemon=True).start()

    def stop(self) -> None:
        """After Celery's warm shutdown (no attempt running): the row says stopped, sandboxes of
        attempts cut short are removed."""
        self._stopping.set()
        future = asyncio.run_coroutine_threadsafe(self._close(), self.loop)
        try:
            future.result(timeout=60)
        except Exception:  # noqa: BLE001 - stopping anyway
            pass
        leases.worker_stopped(self.worker_id)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.outbox.close()

    async def _close(self) -> None:
        for context in self._contexts.values():
            await context.runner.drain()
            for sandbox in list(context.live):
                await asyncio.get_running_loop().run_in_executor(None, sandbox.remove)
        if self._gateway_port and self.gateway is not None:
            await self.gateway.stop()
        await self.channel.close()

    def _seen(self) -> None:
        """Every 2 s: this worker is alive, and says whether its machine is well; it takes the
        fleet's jobs no one coordinates; every BENCHFLOW_REAP_EVERY_S, this machine's containers
        whose owner died (another worker killed mid-attempt) are removed. Each duty on its own: one
        that fails (the engine, or a machine out of open files) keeps no other from its turn, and
        the thread's database connection, the one thing a machine out of open files cannot open
        again, is closed only when the database broke it (it restarted: the next trip reconnects)."""
        from django.db import Error as DatabaseError
        from django.db import connections

        self._reaped_at = time.monotonic()
        duties = (
            lambda: leases.worker_seen(self.worker_id),
            self.machine.look,
            self.jobs.take,
            self._reap,
        )
        while not self._stopping.wait(SEEN_EVERY_S):
            for duty in duties:
                try:
                    duty()
                except DatabaseError:
                    for conn in connections.all(initialized_only=True):
                        # the one that failed and is broken, not one that still works
                        if conn.errors_occurred and not conn.is_usable():
                            conn.close()
                except Exception:  # noqa: BLE001 - the engine or the machine hiccuped: next time
                    continue

    def _reap(self) -> None:
        if time.monotonic() - self._reaped_at < reap_every_s():
            return
        self._reaped_at = time.monotonic()
        if removed := reap_orphans(self.client):
            self.emit(ev.OrphansReaped(self.name, len(removed)))

    # --- for the attempts -------------------------------------------------------------------------

    async def db(
        self, fn: Callable[..., Any], *args: Any, then: Callable[[Any], None] | None = None
    ) -> Any:
        """A trip an attempt's next step waits on (its start, its end); `then` gets the answer in
        the database's thread, before the trip returns to the loop (a hint of what was written)."""

        def trip() -> Any:
            answer = reconnecting(fn, *args)
            if then is not None:
                then(answer)
            return answer

        return await asyncio.get_running_loop().run_in_executor(self._db, trip)

    async def keep_db(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A trip of a held lease's upkeep (renewal, orders, a slot asked for elsewhere)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._keep_db, lambda: reconnecting(fn, *args)
        )

    async def context(self, info: LeaseInfo) -> JobContext:
        async with self._context_lock:
            if info.dispatcher not in self._contexts:
                if len(self._contexts) >= MAX_CONTEXTS:
                    self._contexts.pop(next(iter(self._contexts)))
                self._contexts[info.dispatcher] = await build_context(
                    info,
                    client=self.client,
                    gateway_port=self._start_gateway,
                    gateway=self.gateway,
                    emit=forward(self.post, self.held),
                    sealed=await self._sealed(info.dispatcher),
                    pass_env=self.pass_env,
                )
            return self._contexts[info.dispatcher]

    async def _sealed(self, dispatcher: int) -> Sealed | None:
        """What the run's coordinator sealed for its workers, or None when Redis holds nothing.
        Asked again for a while when Redis does not answer (paused, say), or holds nothing yet
        (it restarted: the coordinator seals it anew every 2 s): an attempt set up without the
        job's secrets and host values would fail, or run differently."""
        started = time.monotonic()
        while (token := await self.channel.get(sealed_key(dispatcher))) is None:
            waited = time.monotonic() - started
            if waited >= SEALED_WAIT_S[self.channel.up] or self._stopping.is_set():
                return None
            await asyncio.sleep(1.0)
        try:
            return unseal(token, deployment_key(), max_age_s=ttl_s())
        except SealError as exc:
            raise WorkerSetupError(str(exc)) from None

    async def _start_gateway(self) -> int:
        if not self._gateway_port:
            assert self.gateway is not None
            try:
                self._gateway_port = await self.gateway.start()
            except OSError as exc:
                raise WorkerSetupError(f"the model proxy did not start here: {exc}") from None
        return self._gateway_port

    def requeue(self, lease: int, queue: str) -> None:
        """A lease handed back goes to the queue again (blocking: run it off the loop). Tried for
        a few seconds; after a Redis restart its coordinator sends every queued lease again."""
        if self.broker is None:
            return
        for wait in (0.0, 0.5, 2.0, 5.0):
            time.sleep(wait)
            try:
                self.broker.enqueue(lease, queue)
                return
            except Exception:  # noqa: BLE001 - Redis away for a moment: try again
                continue

    def post(self, key: str, message: dict[str, Any]) -> None:
        """A hint for a coordinator, from any thread; hints go in the order posted."""
        self.outbox.post(key, message)

    def usage_report(self, held: Held) -> dict[str, Any] | None:
        """What the proxy counted for the held attempt, when it changed since last said."""
        if self.gateway is None or not self._gateway_port or not held.rollout:
            return None
        usage = self.gateway.usage(held.rollout)
        if usage is None:
            return None
        said = (usage.turns, usage.total_tokens, usage.in_flight, usage.cost_usd)
        if said == held.usage_said:
            return None
        held.usage_said = said
        return usage_of(usage)
