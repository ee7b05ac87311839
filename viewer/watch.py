"""The server's own watch of the Event table, for the embedded default (SQLite, no Redis): a run
in another process writes Event rows; this finds the new ones and sends their hints to the job's
group and the list's.

On SQLite the watch reads the table itself, in the event loop, every 10 ms: one indexed SELECT on
its own connection costs less than the two thread hops a query through the ORM takes, so it can
ask often, and each hint waits half as short an interval. The connection never waits for a lock
(timeout 0): a busy moment is read at the next tick. On another database (PostgreSQL without
Redis) the ORM is asked every BENCHFLOW_WATCH_S (0.05 s by default).

With BENCHFLOW_REDIS_URL the writers publish the hints themselves through channels_redis, and the
watch does not run.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from runs.index.live import JOBS_GROUP, hint, job_group
from runs.models import Event

log = logging.getLogger(__name__)
BATCH = 500
SQLITE_TICK_S = 0.01


class _State:
    task: asyncio.Task[None] | None = None
    loop: asyncio.AbstractEventLoop | None = None


_state = _State()


def ensure_started(layer: Any) -> None:
    """Start the watch in this server's loop, once (a consumer calls this as it connects)."""
    if getattr(settings, "REDIS_URL", ""):
        return
    loop = asyncio.get_running_loop()
    if _state.task is None or _state.task.done() or _state.loop is not loop:
        _state.loop = loop
        _state.task = loop.create_task(_watch(layer), name="bench-event-watch")


def _last_id() -> int:
    last = Event.objects.order_by("-id").values_list("id", flat=True).first()
    return last or 0


def _after(last: int) -> list[tuple[int, int, int, str, str]]:
    return list(
        Event.objects.filter(id__gt=last)
        .order_by("id")
        .values_list("id", "job_id", "seq", "kind", "trial_name")[:BATCH]
    )


async def _watch(layer: Any) -> None:
    last = await database_sync_to_async(_last_id)()
    read = _sqlite_reader()
    while True:
        await asyncio.sleep(SQLITE_TICK_S if read else settings.BENCHFLOW_WATCH_S)
        try:
            rows = read(last) if read else await database_sync_to_async(_after)(last)
        except Exception as exc:  # noqa: BLE001 - a locked or moved database: try again next tick
            log.warning("event watch: %s", exc)
            continue
        for event_id, job_id, seq, kind, trial in rows:
            message = hint(job_id, seq, kind, trial)
            await layer.group_send(job_group(job_id), message)
            await layer.group_send(JOBS_GROUP, message)
            last = event_id


def _sqlite_reader() -> Callable[[int], list[tuple[int, int, int, str, str]]] | None:
    """On SQLite: a reader of the Event rows after an id, on a connection of its own made in
    this (the loop's) thread; None on another database."""
    from django.db import connections

    params = connections["default"].settings_dict
    if params["ENGINE"] != "django.db.backends.sqlite3":
        return None
    name = str(params["NAME"])
    db = sqlite3.connect(name, uri=name.startswith("file:"), timeout=0, isolation_level=None)
    meta = Event._meta
    columns = ", ".join(
        meta.get_field(f).column for f in ("id", "job", "seq", "kind", "trial_name")
    )
    sql = f"SELECT {columns} FROM {meta.db_table} WHERE id > ? ORDER BY id LIMIT {BATCH}"

    def read(last: int) -> list[tuple[int, int, int, str, str]]:
        return db.execute(sql, (last,)).fetchall()

    return read
