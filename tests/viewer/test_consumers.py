"""The websockets: hints reach one job's page and the jobs list, through the server's watch of
the Event table (no Redis) or through Redis; origin checked, read-only, login when asked."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import transaction

from benchflow_site.asgi import application
from runs.index.writer import record_event
from runs.models import Job
from viewer import watch

# a page of the dashboard itself: its origin is the Host it was served from, port included
ORIGIN = [(b"origin", b"http://127.0.0.1:8888"), (b"host", b"127.0.0.1:8888")]
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast_watch(settings):
    settings.BENCHFLOW_WATCH_S = 0.02
    settings.REDIS_URL = ""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    yield
    if watch._state.task is not None:
        watch._state.task.cancel()
        watch._state.task = None


def _job(name: str = "2026-11-29__12-00-00") -> Job:
    return Job.objects.create(name=name, path=f"/tmp/jobs/{name}", tasks_dir="t", agent="oracle")


def _event(job_id: int, kind: str, trial: str = "") -> int:
    with transaction.atomic():
        return record_event(job_id, kind, trial, {})


async def test_a_job_page_gets_a_hint_when_another_process_writes_an_event(settings):
    # given a page open on one job, and another job beside it
    job = await database_sync_to_async(_job)()
    other = await database_sync_to_async(_job)("2026-11-29__13-00-00")
    page = WebsocketCommunicator(application, f"/ws/jobs/{job.key}/", headers=ORIGIN)
    assert (await page.connect())[0]
    # when rows are written (as bench run's writer does, in its own transaction)
    await asyncio.sleep(0.05)  # the watch has read where the table ends
    await database_sync_to_async(_event)(other.pk, "attempt_finished", "x")
    seq = await database_sync_to_async(_event)(job.pk, "attempt_finished", "hello")
    # then only this job's hint arrives, with its sequence number
    hint = await page.receive_json_from(timeout=2)
    assert hint == {"job": job.pk, "seq": seq, "kind": "attempt_finished", "trial": "hello"}
    assert await page.receive_nothing(timeout=0.2)
    await page.disconnect()


async def test_the_jobs_list_gets_every_jobs_hints():
    job = await database_sync_to_async(_job)()
    page = WebsocketCommunicator(application, "/ws/jobs/", headers=ORIGIN)
    assert (await page.connect())[0]
    await asyncio.sleep(0.05)
    await database_sync_to_async(_event)(job.pk, "job_started")
    assert (await page.receive_json_from(timeout=2))["kind"] == "job_started"
    await page.disconnect()


async def test_a_socket_from_another_origin_is_refused():
    await database_sync_to_async(_job)()
    page = WebsocketCommunicator(
        application,
        "/ws/jobs/",
        headers=[(b"origin", b"http://evil.example"), (b"host", b"127.0.0.1:8888")],
    )
    connected, _ = await page.connect()
    assert not connected


async def test_an_unknown_job_is_refused():
    page = WebsocketCommunicator(application, "/ws/jobs/nope/", headers=ORIGIN)
    connected, code = await page.connect()
    assert not connected and code == 4404


async def test_the_socket_is_read_only():
    job = await database_sync_to_async(_job)()
    page = WebsocketCommunicator(application, f"/ws/jobs/{job.key}/", headers=ORIGIN)
    assert (await page.connect())[0]
    await page.send_json_to(
        {"type": "job.hint", "job": job.pk, "seq": 99, "kind": "x", "trial": ""}
    )
    await page.send_to(text_data="delete everything")
    assert await page.receive_nothing(timeout=0.2)
    assert await database_sync_to_async(lambda: Job.objects.get(pk=job.pk).last_seq)() == 0
    await page.disconnect()


async def test_an_anonymous_socket_is_refused_when_login_is_required(settings):
    settings.LOGIN_REQUIRED = True
    await database_sync_to_async(_job)()
    page = WebsocketCommunicator(application, "/ws/jobs/", headers=ORIGIN)
    connected, code = await page.connect()
    assert not connected and code == 4403


async def test_hints_go_through_redis_when_it_is_configured(settings):
    # given Redis (db 11, this suite's own) as the channel layer and the writers' publisher
    url = "redis://127.0.0.1:6379/11"
    settings.REDIS_URL = url
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [url]}}
    }
    job = await database_sync_to_async(_job)()
    page = WebsocketCommunicator(application, f"/ws/jobs/{job.key}/", headers=ORIGIN)
    assert (await page.connect())[0]
    # when a row is written; the server's own watch does not run with Redis
    seq = await database_sync_to_async(_event)(job.pk, "attempt_finished", "hello")
    # then the hint came through Redis, after the commit
    hint = await page.receive_json_from(timeout=3)
    assert (hint["seq"], hint["trial"]) == (seq, "hello")
    assert watch._state.task is None
    await page.disconnect()


def test_on_sqlite_the_watch_reads_the_event_table_itself():
    """SQLite: the watch reads new rows on its own connection, in the loop (no thread hop); on
    another database it asks the ORM."""
    from django.db import connection

    read = watch._sqlite_reader()
    if connection.vendor != "sqlite":
        assert read is None
        return
    assert read is not None
    job = _job()
    before = Job.objects.get(pk=job.pk).last_seq
    seq = _event(job.pk, "attempt_finished", "hello")
    rows = read(0)
    assert rows[-1][1:] == (job.pk, seq, "attempt_finished", "hello") and seq > before
    assert read(rows[-1][0]) == []
