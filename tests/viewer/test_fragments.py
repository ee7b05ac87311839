"""Fragments rendered once per job state and shared by every page that asks for that state; under
`bench serve`, answered before Django only to a logged-in user's session."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async

from benchflow_site.asgi import application
from runs.models import Job
from tests.jobfolders import key
from viewer import fragments, sessions

pytestmark = pytest.mark.django_db(transaction=True)


async def _get(
    path: str,
    seq: str | None,
    host: bytes = b"127.0.0.1:8888",
    cookie: str = "",
    app=application,
) -> tuple[int, bytes]:
    headers = [(b"host", host)] + ([(b"x-bench-seq", seq.encode())] if seq is not None else [])
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": query.encode(),
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

    await app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], body


@pytest.fixture
def stored(view_root, job):
    fragments._store.clear()
    yield
    fragments._store.clear()


@pytest.fixture
def renders(monkeypatch):
    """Counts Django's renders of the job page's live fragment."""
    from viewer import views

    counted: list[int] = []
    real = views.queries.running
    monkeypatch.setattr(views.queries, "running", lambda j: counted.append(1) or real(j))
    return counted


async def _seq() -> str:
    return str(await database_sync_to_async(lambda: Job.objects.get().last_seq)())


async def test_pages_asking_for_the_same_state_share_one_render(stored, job, renders):
    k = await database_sync_to_async(key)(job)
    seq = await _seq()
    path = f"/jobs/{k}/live/"
    results = await asyncio.gather(*[_get(path, seq) for _ in range(10)])
    assert {status for status, _ in results} == {200} and len({body for _, body in results}) == 1
    assert b"passed" in results[0][1]
    assert len(renders) == 1
    # and a page asking later for the same state gets the stored bytes too
    assert (await _get(path, seq))[1] == results[0][1] and len(renders) == 1


async def test_a_new_state_is_rendered_anew(stored, job, renders):
    k = await database_sync_to_async(key)(job)
    from django.db import transaction

    from runs.index.writer import record_event

    path = f"/jobs/{k}/live/"
    await _get(path, await _seq())

    def write() -> None:
        with transaction.atomic():
            record_event(Job.objects.get().pk, "phase_changed", "hello", {})

    await database_sync_to_async(write)()
    assert (await _get(path, await _seq()))[0] == 200
    assert len(renders) == 2


async def test_a_stored_fragment_is_not_served_to_a_host_django_refuses(stored, job):
    k = await database_sync_to_async(key)(job)
    seq = await _seq()
    path = f"/jobs/{k}/live/"
    assert (await _get(path, seq))[0] == 200
    status, _ = await _get(path, seq, host=b"evil.example")
    assert status == 400


async def test_a_page_that_is_not_a_shared_fragment_is_never_stored(stored, job):
    k = await database_sync_to_async(key)(job)
    # the job page itself (operators' forms carry their own CSRF token) always goes to Django
    seq = await _seq()
    await _get(f"/jobs/{k}/", seq)
    assert len(fragments._store) == 0


# --- bench serve: a login is asked


@pytest.fixture
def serve(settings, stored):
    """The ASGI app as `bench serve` builds it (LoginRequiredMiddleware), with two users' sessions:
    a viewer's and an operator's."""
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
    from django.core.asgi import get_asgi_application
    from django.test import Client

    from runs.operations import roles

    settings.LOGIN_REQUIRED = True
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "benchflow_site.middleware.LoginRequired"]
    app = fragments.StoredFragments(ASGIStaticFilesHandler(get_asgi_application()))
    cookies = {}
    for role in ("viewer", "operator"):
        roles.add_user(role, role, f"pw-{role}-123")
        client = Client()
        from django.contrib.auth import get_user_model

        client.force_login(get_user_model().objects.get(username=role))
        cookies[role] = f"sessionid={client.cookies['sessionid'].value}"
    return app, cookies


async def test_a_logged_in_session_is_answered_from_the_store_under_bench_serve(
    serve, job, renders, monkeypatch
):
    k = await database_sync_to_async(key)(job)
    app, cookies = serve
    checked: list[list[str]] = []
    real = sessions.logged_in_keys
    monkeypatch.setattr(sessions, "logged_in_keys", lambda keys: checked.append(keys) or real(keys))
    seq, path = await _seq(), f"/jobs/{k}/live/"
    first = await _get(path, seq, cookie=cookies["operator"], app=app)
    assert first[0] == 200 and len(renders) == 1
    # twenty pages of another user after the same hint: no render, their sessions checked together
    results = await asyncio.gather(
        *[_get(path, seq, cookie=cookies["viewer"], app=app) for _ in range(20)]
    )
    assert {r for r in results} == {first}
    assert len(renders) == 1
    assert 1 <= len(checked) <= 2 and all(len(set(keys)) == 1 for keys in checked)


async def test_a_session_django_would_not_accept_goes_to_django(serve, job, renders):
    k = await database_sync_to_async(key)(job)
    from django.contrib.auth import get_user_model

    app, cookies = serve
    seq, path = await _seq(), f"/jobs/{k}/live/"
    assert (await _get(path, seq, cookie=cookies["operator"], app=app))[0] == 200
    # no session, an unknown one: the login page
    for cookie in ("", "sessionid=not-a-session"):
        status, _ = await _get(path, seq, cookie=cookie, app=app)
        assert status == 302, cookie

    # a user made inactive, and one whose password changed (the session's hash no longer matches)
    def change() -> None:
        users = get_user_model().objects
        users.filter(username="viewer").update(is_active=False)
        operator = users.get(username="operator")
        operator.set_password("another-pw-456")
        operator.save()

    await database_sync_to_async(change)()
    for role in ("viewer", "operator"):
        status, _ = await _get(path, seq, cookie=cookies[role], app=app)
        assert status == 302, role
    assert len(renders) == 1


async def test_shared_fragments_are_the_same_for_every_user(serve, job):
    k = await database_sync_to_async(key)(job)
    """What is stored once goes to everyone who may see the job: it holds nothing of who asked
    (no CSRF token, no user name, no operating control)."""
    app, cookies = serve
    seq = await _seq()
    paths = [
        f"/jobs/{k}/live/",
        f"/jobs/{k}/live/?parts=finished",
        f"/jobs/{k}/trials/",
        f"/jobs/{k}/grid/",
        "/jobs/table/",
    ]
    for path in paths:
        bodies = []
        for role in ("operator", "viewer"):
            fragments._store.clear()
            status, body = await _get(path, seq, cookie=cookies[role], app=app)
            assert status == 200, path
            bodies.append(body)
        assert bodies[0] == bodies[1], path
        assert b"csrfmiddlewaretoken" not in bodies[0] and b"operator" not in bodies[0], path


def test_a_session_cookie_is_read_from_the_scope():
    scope = {"headers": [(b"host", b"x"), (b"cookie", b"csrftoken=a; sessionid=abc123")]}
    assert sessions.session_key(scope) == "abc123"
    assert sessions.session_key({"headers": [(b"cookie", b"csrftoken=a")]}) == ""


@pytest.mark.parametrize(
    "engine",
    ["django.contrib.sessions.backends.db", "django.contrib.sessions.backends.cached_db"],
)
def test_sessions_are_checked_as_django_checks_them(engine, settings):
    """One query for all (database sessions) or one session at a time (any other engine): the
    same answer as Django's auth."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    settings.SESSION_ENGINE = engine
    users = get_user_model().objects
    keys = {}
    for name in ("alice", "bob", "carol"):
        client = Client()
        client.force_login(users.create(username=name))
        keys[name] = client.cookies["sessionid"].value
    users.filter(username="bob").update(is_active=False)
    carol = users.get(username="carol")
    carol.set_password("changed-pw-789")
    carol.save()
    assert sessions.logged_in_keys([*keys.values(), "no-such-session"]) == {keys["alice"]}
