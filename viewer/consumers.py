"""Read-only websockets: a page subscribes to one job's hints, or the jobs list's, and is told
(job, seq, kind, trial) when something changed; it fetches what changed over HTTP.

The hints reach the groups through channels_redis when Redis is configured, else from this
server's own watch of the Event table (viewer/watch.py). Nothing a client sends is acted on.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from runs.index.live import JOBS_GROUP, job_group
from viewer import queries, watch


def _allowed(scope: dict[str, Any]) -> bool:
    user = scope.get("user")
    return not settings.LOGIN_REQUIRED or bool(user and user.is_authenticated)


class _ReadOnly(AsyncJsonWebsocketConsumer):
    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """Read-only: whatever a client sends (JSON or not) is ignored."""

    async def job_hint(self, event: dict[str, Any]) -> None:
        await self.send_json({k: event[k] for k in ("job", "seq", "kind", "trial")})


class JobsConsumer(_ReadOnly):
    """The jobs list: every job's hints (one group for the list)."""

    async def connect(self) -> None:
        if not _allowed(self.scope):
            await self.close(code=4403)
            return
        await self.channel_layer.group_add(JOBS_GROUP, self.channel_name)
        watch.ensure_started(self.channel_layer)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(JOBS_GROUP, self.channel_name)


class JobConsumer(_ReadOnly):
    """One job's page: that job's hints only."""

    group = ""

    async def connect(self) -> None:
        if not _allowed(self.scope):
            await self.close(code=4403)
            return
        job_id = await database_sync_to_async(_job_id)(self.scope["url_route"]["kwargs"]["job"])
        if job_id is None:
            await self.close(code=4404)
            return
        self.group = job_group(job_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        watch.ensure_started(self.channel_layer)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)


def _job_id(key: str) -> int | None:
    job = queries.find_job(key)
    return job.pk if job is not None else None
