"""Fragments rendered once per job state and shared by every page that asks for that state."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from benchflow_site.asgi import application
from runs.models import Job
from viewer import fragments

pytestmark = pytest.mark.django_db(transaction=True)


async def _get(path: str, seq: str | None, host: bytes = b"127.0.0.1:8888") -> tuple[int, bytes]:
    headers = [(b"host", host)] + ([(b"x-bench-seq", seq.encode())] if seq is not None else [])
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "http_version": "1.1",
        "scheme": "http",
        "server": ("127.0.0.1", 8888),
        "client": ("127.0.0.1", 5000),
    }
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict:
        if messages:
            return messages.pop()
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    await application(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], body


@pytest.fixture
def stored(view_root, job):
    fragments._store.clear()
    yield
    fragments._store.clear()


async def test_pages_asking_for_the_same_state_share_one_render(stored, job, monkeypatch):
    seq = str(await database_sync_to_async(lambda: Job.objects.get().last_seq)())
    path = f"/jobs/{job.name}/progress/"
    renders = []
    from viewer import views  # count Django's renders of the fragment

    real = views.queries.running
    monkeypatch.setattr(views.queries, "running", lambda j: renders.append(1) or real(j))
    results = await asyncio.gather(*[_get(path, seq) for _ in range(10)])
    assert {status for status, _ in results} == {200} and len({body for _, body in results}) == 1
    assert b"passed" in results[0][1]
    assert len(renders) == 1


async def test_a_stored_fragment_is_not_served_to_a_host_django_refuses(stored, job):
    seq = str(await database_sync_to_async(lambda: Job.objects.get().last_seq)())
    path = f"/jobs/{job.name}/progress/"
    assert (await _get(path, seq))[0] == 200
    status, _ = await _get(path, seq, host=b"evil.example")
    assert status == 400


def test_nothing_is_answered_before_django_when_a_login_is_asked(settings):
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/jobs/x/progress/",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8000"), (b"x-bench-seq", b"3")],
    }
    assert fragments._key(scope) == ("/jobs/x/progress/", None, 3)
    settings.LOGIN_REQUIRED = True
    assert fragments._key(scope) is None
