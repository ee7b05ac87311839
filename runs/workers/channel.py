"""Hints between a coordinator and its workers, as Redis lists: a worker's typed events and lease
changes to the job's coordinator, the coordinator's stop and discard to the worker holding a lease.

Hints only wake the other side up quickly; the lease rows are the truth. So a hint lost (Redis
restarted, say) costs at most a poll's delay, and an error here never stops an attempt.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import queue
import threading
from typing import Any

log = logging.getLogger(__name__)

EXPIRE_S = 24 * 3600  # hints nobody read (their reader died) do not stay in Redis for ever


def events_key(job_path: str) -> str:
    return f"benchflow:job:{hashlib.sha1(job_path.encode()).hexdigest()[:16]}:events"


def control_key(lease_uid: str) -> str:
    return f"benchflow:lease:{lease_uid}:control"


def redis_answers(url: str) -> str | None:
    """None when Redis answers at `url`, else why not."""
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except (redis.RedisError, OSError, ValueError) as exc:
        return f"{exc.__class__.__name__}: {exc}"
    return None


class Channel:
    """One Redis connection pool, used from one event loop."""

    def __init__(self, url: str) -> None:
        import redis.asyncio

        # a command Redis holds (paused, say) fails after 5 s: a caller's poll of the database
        # goes on meanwhile (its blocking reads wait at most a second or two)
        self._redis = redis.asyncio.Redis.from_url(
            url, socket_connect_timeout=2, socket_timeout=5, health_check_interval=10
        )
        self.up = True  # False while Redis does not answer; the caller polls the database

    async def send(self, key: str, message: dict[str, Any]) -> bool:
        return await self.send_all([(key, message)])

    async def send_all(self, messages: list[tuple[str, dict[str, Any]]]) -> bool:
        """Messages, each to its key in order, in one round trip."""
        from redis.exceptions import RedisError

        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                _push(pipe, messages)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            self._down(exc)
            return False
        self.up = True
        return True

    async def receive(self, key: str, timeout: float) -> dict[str, Any] | None:
        """The next message on `key`, or None after `timeout` seconds (or at once when Redis is
        down: the caller's poll of the database carries on meanwhile). For a loop of reads: a
        cancel of the calling task always ends it (see `_not_cancelled`)."""
        from redis.exceptions import RedisError

        try:
            got = await self._redis.blpop([key], timeout=timeout)
        except (RedisError, OSError) as exc:
            _not_cancelled()
            self._down(exc)
            await asyncio.sleep(min(timeout, 1.0))
            return None
        _not_cancelled()
        self.up = True
        return None if got is None else _message(got[1])

    async def receive_all(self, key: str, timeout: float, most: int = 100) -> list[dict[str, Any]]:
        """The messages waiting on `key` (up to `most`) in one round trip; when none waits, the
        next one, or none after `timeout` seconds."""
        from redis.exceptions import RedisError

        try:
            waiting = await self._redis.lpop(key, most)
        except (RedisError, OSError) as exc:
            _not_cancelled()
            self._down(exc)
            await asyncio.sleep(min(timeout, 1.0))
            return []
        _not_cancelled()
        if waiting:
            self.up = True
            return [m for raw in waiting if (m := _message(raw)) is not None]
        message = await self.receive(key, timeout)
        return [] if message is None else [message]

    async def put(self, key: str, value: bytes, ttl_s: int) -> bool:
        """Set `key` to `value` for `ttl_s` seconds (a sealed token: runs/workers/sealed.py)."""
        from redis.exceptions import RedisError

        try:
            await self._redis.set(key, value, ex=ttl_s)
        except (RedisError, OSError) as exc:
            self._down(exc)
            return False
        self.up = True
        return True

    async def get(self, key: str) -> bytes | None:
        """The value of `key`, or None when it has none (or Redis does not answer)."""
        from redis.exceptions import RedisError

        try:
            value = await self._redis.get(key)
        except (RedisError, OSError) as exc:
            self._down(exc)
            return None
        self.up = True
        return None if value is None else value.encode() if isinstance(value, str) else value

    async def drop(self, key: str) -> None:
        from redis.exceptions import RedisError

        try:
            await self._redis.delete(key)
        except (RedisError, OSError) as exc:
            self._down(exc)

    async def queue_length(self, queue: str) -> int | None:
        """How many messages wait in the broker's queue `queue` (Celery's Redis transport keeps
        a queue as a list of that name), or None when Redis does not answer."""
        from redis.exceptions import RedisError

        try:
            length = await self._redis.llen(queue)
        except (RedisError, OSError) as exc:
            self._down(exc)
            return None
        self.up = True
        return int(length)

    async def server_id(self) -> str | None:
        """Redis's run id: a new one means it restarted (and, without persistence, lost its
        queues)."""
        from redis.exceptions import RedisError

        try:
            info = await self._redis.info("server")
        except (RedisError, OSError) as exc:
            self._down(exc)
            return None
        self.up = True
        return str(info.get("run_id") or "") or None

    async def close(self) -> None:
        try:
            await self._redis.aclose()
        except Exception:  # noqa: BLE001 - closing a connection that is already gone
            pass

    def _down(self, exc: BaseException) -> None:
        if self.up:
            log.warning("Redis does not answer (%s); carrying on from the database", exc)
        self.up = False


class Outbox:
    """Hints sent from a thread of its own, with a blocking client: whoever posts (the event loop,
    or a database thread the moment its write took) hands the message over with no hop through
    the loop. They go in the order posted; what waits goes in one round trip. Best effort, as every
    hint: while Redis does not answer, they are dropped (the rows are the truth)."""

    MOST = 100

    def __init__(self, url: str) -> None:
        import redis

        self._redis = redis.Redis.from_url(
            url, socket_connect_timeout=2, socket_timeout=5, health_check_interval=10
        )
        self._queue: queue.SimpleQueue[tuple[str, dict[str, Any]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="bench-hints", daemon=True)
        self.up = True
        self._thread.start()

    def post(self, key: str, message: dict[str, Any]) -> None:
        """From any thread."""
        self._queue.put((key, message))

    def close(self, timeout: float = 5.0) -> None:
        """What was posted is sent (for up to `timeout` seconds), then the thread ends."""
        self._queue.put(None)
        self._thread.join(timeout)
        self._redis.close()

    def _run(self) -> None:
        while (first := self._queue.get()) is not None:
            batch, last = [first], False
            while len(batch) < self.MOST and not self._queue.empty():
                if (more := self._queue.get_nowait()) is None:
                    last = True
                    break
                batch.append(more)
            self._send(batch)
            if last:
                return

    def _send(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        from redis.exceptions import RedisError

        try:
            pipe = self._redis.pipeline(transaction=False)
            _push(pipe, batch)
            pipe.execute()
        except (RedisError, OSError) as exc:
            if self.up:
                log.warning("Redis does not answer (%s); hints wait for the database", exc)
            self.up = False
            return
        self.up = True


def _push(pipe: Any, messages: list[tuple[str, dict[str, Any]]]) -> None:
    """Each message to the end of its key's list; a list nobody reads expires."""
    for key, message in messages:
        pipe.rpush(key, json.dumps(message, default=str))
    for key in dict.fromkeys(key for key, _ in messages):
        pipe.expire(key, EXPIRE_S)


def _message(raw: Any) -> dict[str, Any] | None:
    try:
        message = json.loads(raw)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _not_cancelled() -> None:
    """In a read: raises the cancel of the calling task that Redis's client turned into one of
    its errors or an empty answer (a cancel landing as a blocking read ended). A loop of reads
    would otherwise never end, and whoever cancelled it would wait for ever. Not for sends: a
    task may go on sending after it caught its own cancel (a stop it passes on)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
