"""The live path's names and its publisher: a hint per Event row, to one group per job and one for
the jobs list. Through channels_redis when BENCHFLOW_REDIS_URL is set; without Redis the server
that shows the pages watches the Event table itself (viewer/watch.py) and nothing is sent here."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Any

from django.conf import settings

JOBS_GROUP = "jobs"
log = logging.getLogger(__name__)


def job_group(job_id: int) -> str:
    """Channels' group names allow ASCII letters, digits, '-', '.' and '_': the job's primary key."""
    return f"job-{job_id}"


def hint(job_id: int, seq: int, kind: str, trial_name: str) -> dict[str, Any]:
    """What a page is told: which job changed, its sequence number, and what (it fetches the rest)."""
    return {"type": "job.hint", "job": job_id, "seq": seq, "kind": kind, "trial": trial_name}


class _Sender:
    """One event loop in a thread of its own: channels_redis keeps its connections per loop, so
    every hint of this process goes through the same loop (async_to_sync would make one a call)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._pending: set[concurrent.futures.Future[None]] = set()

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="bench-live", daemon=True).start()
                self._loop = loop
            return self._loop

    def send(self, job_id: int, message: dict[str, Any]) -> None:
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        if layer is None:
            return
        future = asyncio.run_coroutine_threadsafe(_send_both(layer, job_id, message), self._start())
        self._pending.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: concurrent.futures.Future[None]) -> None:
        self._pending.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.warning("live hint not sent: %s", future.exception())

    def flush(self, timeout: float = 5.0) -> None:
        concurrent.futures.wait(list(self._pending), timeout=timeout)


_sender = _Sender()


def publish(job_id: int, seq: int, kind: str, trial_name: str) -> None:
    """After commit: send the hint through Redis when configured. A lost hint loses nothing: the
    Event row is the truth, and a page catches up with ?after=<seq>."""
    if getattr(settings, "REDIS_URL", ""):
        _sender.send(job_id, hint(job_id, seq, kind, trial_name))


def flush() -> None:
    """Wait (a little) for the hints still being sent: before a process exits."""
    _sender.flush()


async def _send_both(layer: Any, job_id: int, message: dict[str, Any]) -> None:
    await layer.group_send(job_group(job_id), message)
    await layer.group_send(JOBS_GROUP, message)
