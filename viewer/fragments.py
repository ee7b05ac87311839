"""Fragments rendered once per job state: when a hint reaches fifty open pages, they all ask for
the same fragment at the same sequence number, and all but the first get the stored bytes.

The key is the request's path and query and the job's state (its `last_seq`, read before the
fragment's rows are: rows at least as new as the key). A page sends the sequence number of the
hint it acts on (`X-Bench-Seq`, set by static/viewer/live.js); a stored fragment for that state
is answered in the event loop, in front of Django (`StoredFragments`), with no hop to Django's
threads, which would queue fifty requests one after another.

A stored fragment is shared by everyone who may see the dashboard, so only views that declare
they depend on nothing of the visitor (`once_per_seq`: no user, no CSRF token, no message) are
stored; under `bench serve` the fast path answers only a request whose session is a logged-in
user's, checked as Django checks it (viewer/sessions.py), and leaves everything else to Django.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse

from runs.bytecache import ByteBoundedCache
from viewer import sessions

# Fragments stored, by their bytes (a few KB each; a 10,000-trial table, a few hundred): the URL's
# query is the visitor's to choose, so the count of keys is not a bound.
KEEP_BYTES = 32 << 20
_store: ByteBoundedCache[bytes] = ByteBoundedCache(KEEP_BYTES, lambda body: len(body) + 200)


def _get(key: tuple[str | int, ...]) -> bytes | None:
    return _store.get(key)


def _put(key: tuple[str | int, ...], body: bytes) -> None:
    _store.put(key, body)


def _asked_seq(request: HttpRequest) -> int | None:
    seq = request.headers.get("X-Bench-Seq", "")
    return int(seq) if seq.isdigit() else None


def once_per_seq(
    state: Callable[[HttpRequest, dict[str, Any]], tuple[int, int]],
) -> Callable[[Callable[..., HttpResponse]], Callable[..., Any]]:
    """Serve the view's response from the store while `state(request, kwargs)` (a job's id and
    last_seq, or the number of jobs and of their events) is unchanged; a page naming a sequence
    number (X-Bench-Seq) gets what was rendered at a state whose last number is at least that.
    The view must not depend on who asks: its bytes go to every visitor
    (tests/viewer/test_fragments.py renders each for two)."""

    def wrap(view: Callable[..., HttpResponse]) -> Callable[..., Any]:
        @wraps(view)
        def inner(request: HttpRequest, **kwargs: Any) -> HttpResponse:
            path = request.get_full_path()
            asked = _asked_seq(request)
            if asked is not None and (body := _get((path, asked))) is not None:
                return HttpResponse(body)
            now = state(request, kwargs)
            body = _get((path, *now))
            if body is not None:
                response = HttpResponse(body)
            else:
                response = view(request, **kwargs)
                if response.status_code != 200 or response.streaming:
                    return response
                body = response.content
                _put((path, *now), body)
            # rendered at a state at least as new as the one asked for: good for that one too
            if asked is not None and asked <= now[-1]:
                _put((path, asked), body)
            return response

        return inner

    return wrap


# What Django's middleware adds to a page (SecurityMiddleware, XFrameOptionsMiddleware), for the
# fragments answered before Django (below).
_HEADERS = [
    (b"content-type", b"text/html; charset=utf-8"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"vary", b"Cookie"),
]


class StoredFragments:
    """ASGI, in front of Django: a fragment GET naming the state it is for (`X-Bench-Seq`) is
    answered from the store when it holds that fragment, and when it is being rendered for
    another page, that render's bytes are shared; only the first request of a state goes through
    Django's request cycle (whose thread hops cost a few ms a request: fifty pages after one hint
    would queue). Only for a Host Django accepts, and under `bench serve` only for a logged-in
    user's session; anything else goes on to Django as it is."""

    def __init__(self, app: Any):
        self.app = app
        self.rendering: dict[tuple[str, int], asyncio.Future[bytes | None]] = {}
        self.sessions = sessions.SessionCheck()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        key = _key(scope) if scope["type"] == "http" and scope["method"] == "GET" else None
        if key is None:
            await self.app(scope, receive, send)
            return
        body = _get(key)
        if body is None and key in self.rendering:
            body = await asyncio.shield(self.rendering[key])
        if body is not None and await self._may_see(scope):
            headers = [*_HEADERS, (b"content-length", str(len(body)).encode())]
            if _login_required():  # a logged-in user's page, as PageHeaders marks it
                headers.append((b"cache-control", b"no-store, private"))
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        if key in self.rendering:
            await self.app(scope, receive, send)
            return
        future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        self.rendering[key] = future
        try:
            await self.app(scope, receive, send)
        finally:
            del self.rendering[key]
            # stored by once_per_seq when the view is a shared fragment; else nothing to share
            future.set_result(_get(key))

    async def _may_see(self, scope: dict[str, Any]) -> bool:
        if not _login_required():
            return True
        key = sessions.session_key(scope)
        return bool(key) and await self.sessions.logged_in(key)


def _login_required() -> bool:
    from django.conf import settings

    return bool(settings.LOGIN_REQUIRED)


def _key(scope: dict[str, Any]) -> tuple[str, int] | None:
    """The store's key of a fragment request the fast path may answer, else None."""
    from django.conf import settings
    from django.http.request import split_domain_port, validate_host
    from django.utils.encoding import escape_uri_path, iri_to_uri

    headers = dict(scope.get("headers") or ())
    seq = headers.get(b"x-bench-seq", b"").decode("latin-1")
    if not seq.isdigit():
        return None
    domain, _port = split_domain_port(headers.get(b"host", b"").decode("latin-1"))
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    path = escape_uri_path(scope.get("root_path", "") + scope["path"])
    query = scope.get("query_string", b"").decode("latin-1")
    full = path + ("?" + iri_to_uri(query) if query else "")
    return (full, int(seq))
