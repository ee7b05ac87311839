"""What keeps a job's leases moving while its attempts wait on them (runs/workers/dispatch.py): the
workers' hints read from Redis, and a poll of the rows each second that also takes back leases
whose worker stopped renewing them and sends again the ids the broker did not take.

Hints make it fast; the poll makes it correct: a lost hint or a Redis restart (its queue lost with
it) costs time, never an attempt.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from runs import events as ev
from runs.workers import coordination, leases
from runs.workers.broker import Broker
from runs.workers.channel import Channel, events_key
from runs.workers.config import LOST_DIR, dispatcher_stale_s
from runs.workers.lease_book import POLL_S, LeaseBook

S = leases.S
SEEN_EVERY_S = 2.0  # how often the coordinator says it is alive
RESEND_S = 15.0  # a lease queued again (handed back, or lost) that no worker took is sent again
Db = Callable[..., Awaitable[Any]]


class LeaseWatch:
    """The hint reader and the poll of one job's leases, between `start` and `stop`."""

    def __init__(
        self,
        job_dir: Path,
        book: LeaseBook,
        db: Db,
        channel: Channel,
        broker: Broker,
        queue: str,
        emit: Callable[[ev.Event], None],
        alive: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.job_dir, self.job_path = job_dir, str(job_dir.resolve())
        self.on_alive = alive  # what else the coordinator renews as it says it is alive
        self.book, self.db, self.channel = book, db, channel
        self.broker, self.queue, self.emit = broker, queue, emit
        self.dispatcher = 0
        self.unsent: set[int] = set()  # lease ids to send (again) to the broker
        # (lease, claim) queued: since when (or since it was last sent again)
        self._queued: dict[tuple[int, int], float] = {}
        self._counted_at = 0.0  # when the broker's queue was last counted against the rows
        self._server: str | None = None
        self._closing = False  # the hint reader and the poll stop (a cancel alone may be lost)

    async def start(self, dispatcher: int) -> list[asyncio.Task[Any]]:
        self.dispatcher = dispatcher
        self._server = await self.channel.server_id()
        return [asyncio.create_task(self._read_hints()), asyncio.create_task(self._poll())]

    def stop(self) -> None:
        self._closing = True

    def enqueue(self, lease: int) -> None:
        """After the lease's row is committed (a worker must find it): its id to the queue."""
        try:
            self.broker.enqueue(lease, self.queue)
        except Exception:  # noqa: BLE001 - the broker is down: the poll sends it again
            self.unsent.add(lease)
        else:
            self.unsent.discard(lease)

    # --- hints --------------------------------------------------------------------------------------

    async def _read_hints(self) -> None:
        """Workers' events go out on the job's bus; lease changes refresh the row at once."""
        key = events_key(self.job_path)
        while not self._closing:
            for message in await self.channel.receive_all(key, 1.0):
                self.on_hint(message)

    def on_hint(self, message: dict[str, Any]) -> None:
        lease, claim = message.get("lease"), message.get("claim")
        row = self.book.rows.get(lease) if isinstance(lease, int) else None
        if "kind" in message:
            if row is not None and claim != row.claim:
                return  # a lost run's, still talking
            try:
                event = ev.from_payload(message["kind"], message.get("payload") or {})
            except (KeyError, TypeError):
                return
            self.emit(event)
        elif row is not None and isinstance(change := message.get("change"), dict):
            if isinstance(claim, int):
                self.book.hinted(row.id, claim, change)

    # --- the poll ------------------------------------------------------------------------------------

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
                await self.poll_once()
            except Exception:  # noqa: BLE001 - a database hiccup: the next poll tries again
                continue

    async def _alive(self) -> None:
        await self.db(leases.dispatcher_seen, self.dispatcher)
        if self.on_alive is not None:
            await self.on_alive()
        server = await self.channel.server_id()
        if server is not None and self._server is not None and server != self._server:
            # Redis restarted: the queue it held went with it
            self.unsent.update(i for i, r in self.book.rows.items() if r.state == S.QUEUED)
        self._server = server or self._server

    async def poll_once(self) -> None:
        for row in (await self.db(leases.rows, self.book.waited())).values():
            if not self.book.polled(row):
                continue  # read before a change a hint already told of
            if row.state == S.ABANDONED and await self.db(leases.requeue_abandoned, row.id):
                self.unsent.add(row.id)
            elif row.state in leases.HELD and row.expires_at and row.expires_at < leases.now():
                await self._lost(row)
            elif row.state == S.QUEUED:
                self._queued.setdefault((row.id, row.claim), time.monotonic())
        await self._send_missing()
        loop = asyncio.get_running_loop()
        for lease in list(self.unsent):
            await loop.run_in_executor(None, self.enqueue, lease)

    async def _send_missing(self) -> None:
        """Leases queued for RESEND_S that no worker took, while the broker's queue holds fewer
        messages than there are queued leases: some message never reached Redis or was lost in
        it (a worker gave up handing a lease back; a consumer that dropped its connection while
        Redis was paused, as its BRPOP took a message), and would never come. The longest waiting
        are sent again, as many as are missing, each at most once per RESEND_S. A second message
        for a lease is harmless (one claim wins, the other worker finds it taken); a lease that
        waits only for a free worker has its message there and is not sent again."""
        now = time.monotonic()
        for key in list(self._queued):
            row = self.book.rows.get(key[0])
            if row is None or row.state != S.QUEUED or row.claim != key[1]:
                del self._queued[key]
        overdue = sorted(
            (since, lease) for (lease, _), since in self._queued.items() if now - since >= RESEND_S
        )
        if not overdue or now - self._counted_at < POLL_S * 5:
            return
        self._counted_at = now
        waiting = await self.channel.queue_length(self.queue)
        if waiting is None:
            return  # Redis away: its restart (a new run id) sends every queued lease again
        missing = await self.db(leases.queued_on, self.queue, dispatcher_stale_s()) - waiting
        for _since, lease in overdue[: max(missing, 0)]:
            self.unsent.add(lease)
            self._queued[(lease, self.book.rows[lease].claim)] = now

    async def _lost(self, row: leases.LeaseRow) -> None:
        """Its worker stopped renewing the lease (killed, say): queued again for another worker;
        the lost run's folder goes to .lost/ so that nothing of it is counted."""
        coordination.fresh()  # one that woke up taken over takes nothing back
        taken = await self.db(leases.requeue_expired, row.id, row.claim)
        if taken is None:
            return
        self.book.set(taken)
        self.book.taken_back(row.id, row.claim)
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
        self.unsent.add(row.id)
