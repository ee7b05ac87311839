"""The coordinator's copy of its leases' rows (runs/workers/dispatch.py): kept up to date by the
workers' hints and the coordinator's poll, whichever comes first, and waited on by the attempts.

A hint and a poll may arrive in either order, so a row is replaced only by a later one: a later
claim, or a later state of the same claim (ORDER); hints of a claim taken back count for nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from runs.workers import leases

S = leases.S
POLL_S = 1.0  # the database is read this often for every lease waited on (hints come sooner)
# what `prepare` waits for: the sandbox is up and the attempt started (or it went no further)
PREPARED = (S.RUNNING, S.FINISHED, S.FAILED, S.CANCELLED, S.DISCARDED)
DONE = (S.FINISHED, S.FAILED, S.CANCELLED, S.DISCARDED)  # nothing more happens to it
# a lease's states in the order one claim goes through them
ORDER = {S.QUEUED: 0, S.PREPARING: 1, S.RUNNING: 2, **dict.fromkeys(DONE, 3)}
HINTED = ("state", "rollout_name", "worker", "result", "cancelled_record", "error")


class LeaseBook:
    """Lease id -> its row as last known here, and an asyncio.Event set on each change."""

    def __init__(self) -> None:
        self.rows: dict[int, leases.LeaseRow] = {}
        self.seen_claimed: dict[int, float] = {}  # when a worker was first seen holding it
        self._changed: dict[int, asyncio.Event] = {}
        self._floor: dict[int, int] = {}  # the lowest claim whose hints still count

    def set(self, row: leases.LeaseRow) -> None:
        old = self.rows.get(row.id)
        if row.state != S.QUEUED and (old is None or old.claim != row.claim):
            self.seen_claimed.setdefault(row.id, time.monotonic())
        self.rows[row.id] = row
        self.changed(row.id).set()

    def changed(self, lease: int) -> asyncio.Event:
        return self._changed.setdefault(lease, asyncio.Event())

    def hinted(self, lease: int, claim: int, change: dict[str, Any]) -> None:
        """A worker's hint of a change to its lease: taken when it tells of a later state than the
        row as known here."""
        row = self.rows[lease]
        if claim < self._floor.get(lease, 0) or claim < row.claim:
            return
        state = change.get("state")
        if claim > row.claim or ORDER.get(str(state), 0) > ORDER.get(row.state, 0):
            self.set(replace(row, claim=claim, **{k: v for k, v in change.items() if k in HINTED}))

    def polled(self, row: leases.LeaseRow) -> bool:
        """A row read by the poll: taken unless a hint already told of a later change."""
        known = self.rows[row.id]
        if row.claim < known.claim or (
            row.claim == known.claim and ORDER.get(row.state, 0) < ORDER.get(known.state, 0)
        ):
            return False
        self.set(row)
        return True

    def taken_back(self, lease: int, claim: int) -> None:
        """The coordinator took the lease back from `claim`: its hints count no more."""
        self._floor[lease] = claim + 1

    def waited(self) -> list[int]:
        """The leases something may still happen to."""
        return [i for i, r in self.rows.items() if r.state not in DONE]

    async def wait(self, lease: int, done: Callable[[leases.LeaseRow], bool]) -> leases.LeaseRow:
        changed = self.changed(lease)
        while True:
            changed.clear()  # before the row is read: a change from here on wakes the wait
            if done(row := self.rows[lease]):
                return row
            await sleep_on(changed)


async def sleep_on(changed: asyncio.Event) -> None:
    """Until the row changes, or a poll's time (a hint may be lost: the poll reads it then)."""
    try:
        await asyncio.wait_for(changed.wait(), POLL_S * 2)
    except TimeoutError:
        pass
