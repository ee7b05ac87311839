"""Fragments rendered once per job state: when a hint reaches fifty open pages, they all ask for
the same fragment at the same sequence number, and all but the first get the stored bytes.

The key is the view, the request's path and query, the visitor, and the job's state (its
`last_seq`, read before the fragment's rows are: rows at least as new as the key). A page sends
the sequence number of the hint it acts on (`X-Bench-Seq`, set by static/viewer/live.js); a
stored fragment for exactly that state is answered in the event loop, with no database query and
no hop to Django's one thread for sync views, which would queue fifty renders one after another.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse

KEEP = 256  # fragments stored (a few KB each)
_store: OrderedDict[tuple[Any, ...], bytes] = OrderedDict()
_lock = threading.Lock()


def _get(key: tuple[Any, ...]) -> bytes | None:
    with _lock:
        body = _store.get(key)
        if body is not None:
            _store.move_to_end(key)
        return body


def _put(key: tuple[Any, ...], body: bytes) -> None:
    with _lock:
        _store[key] = body
        while len(_store) > KEEP:
            _store.popitem(last=False)


def once_per_seq(
    state: Callable[[HttpRequest, dict[str, Any]], tuple[int, int]],
) -> Callable[[Callable[..., HttpResponse]], Callable[..., Any]]:
    """Serve the view's response from the store while `state(request, kwargs)` (a job's id and
    last_seq, or the jobs' newest event and count) is unchanged."""

    def wrap(view: Callable[..., HttpResponse]) -> Callable[..., Any]:
        def render(
            request: HttpRequest, kwargs: dict[str, Any], base: tuple[Any, ...]
        ) -> HttpResponse:
            key = (*base, state(request, kwargs)[1])
            body = _get(key)
            if body is not None:
                return HttpResponse(body)
            response = view(request, **kwargs)
            if response.status_code == 200 and not response.streaming:
                _put(key, response.content)
            return response

        @wraps(view)
        def inner(request: HttpRequest, **kwargs: Any) -> HttpResponse:
            base = (request.get_full_path(), request.user.pk)
            seq = request.headers.get("X-Bench-Seq", "")
            if seq.isdigit():
                body = _get((*base, int(seq)))
                if body is not None:
                    return HttpResponse(body)
            return render(request, kwargs, base)

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
]


class StoredFragments:
    """ASGI, in front of Django: a fragment GET naming the state it is for (`X-Bench-Seq`) is
    answered from the store when it holds that fragment, and when it is being rendered for
    another page, that render's bytes are shared; only the first request of a state goes through
    Django's request cycle (whose thread hops cost a few ms a request: fifty pages after one hint
    would queue). Only where no login is asked (`bench view`; an anonymous visitor's key) and for
    a Host Django accepts; anything else goes on to Django as it is."""

    def __init__(self, app: Any):
        self.app = app
        self.rendering: dict[tuple[Any, ...], asyncio.Future[bytes | None]] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        key = _key(scope) if scope["type"] == "http" and scope["method"] == "GET" else None
        if key is None:
            await self.app(scope, receive, send)
            return
        body = _get(key)
        if body is None and key in self.rendering:
            body = await asyncio.shield(self.rendering[key])
        if body is not None:
            headers = [*_HEADERS, (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        self.rendering[key] = future
        status, parts = 0, []

        async def capture(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                parts.append(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            body = b"".join(parts) if status == 200 else None
            if body is not None:
                _put(key, body)
            del self.rendering[key]
            future.set_result(body)


def _key(scope: dict[str, Any]) -> tuple[Any, ...] | None:
    """The store's key of a fragment request the fast path may answer, else None."""
    from django.conf import settings
    from django.http.request import split_domain_port, validate_host
    from django.utils.encoding import escape_uri_path, iri_to_uri

    if settings.LOGIN_REQUIRED:
        return None
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
    return (full, None, int(seq))
