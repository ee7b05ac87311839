"""What stands between the network and the app: a websocket's Origin must be the page's own
(scheme, host and port), an unknown websocket path is a 404, and a static path that leaves the
static folders is a 404 (Django's handler answered 500)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.exceptions import SuspiciousOperation
from django.http import Http404
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}
DENIAL = "websocket.http.response"


def _header(scope: dict[str, Any], name: bytes) -> str:
    for key, value in scope.get("headers") or ():
        if key == name:
            return bytes(value).decode("latin-1")
    return ""


def secure(scope: dict[str, Any]) -> bool:
    """Whether the client reached us over TLS: our own (bench serve --tls-cert), or a reverse
    proxy's, as the header it sets says (BENCHFLOW_FORWARDED_PROTO_HEADER; trusted only when set)."""
    if settings.BENCHFLOW_TLS or scope.get("scheme") in ("https", "wss"):
        return True
    name = settings.BENCHFLOW_FORWARDED_PROTO_HEADER
    return bool(name) and _header(scope, name.lower().encode()).strip().lower() == "https"


def same_origin(origin: str, host: str, is_secure: bool) -> bool:
    """Whether a page at `origin` is this site as reached through `host` (the Host header): the
    same scheme (https under TLS, else http), host name and port (a default port made explicit),
    and a host this site answers to (ALLOWED_HOSTS)."""
    scheme = "https" if is_secure else "http"
    try:
        parts = urlsplit(origin)
        origin_port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return False
    domain, port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    if parts.scheme != scheme or (parts.hostname or "").lower() != domain.strip("[]").lower():
        return False
    return origin_port == (int(port) if port.isdigit() else DEFAULT_PORTS[scheme])


async def deny(scope: dict[str, Any], send: Any, status: int) -> None:
    """Refuse a websocket handshake with an HTTP status (403 where the server cannot say more)."""
    if DENIAL in (scope.get("extensions") or {}):
        await send({"type": f"{DENIAL}.start", "status": status, "headers": []})
        await send({"type": f"{DENIAL}.body", "body": b""})
    else:
        await send({"type": "websocket.close"})


class SameOrigin:
    """Websockets only from a page of this site: a page on another port or scheme of the same host
    must not open a socket with a viewer's cookies."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        origin, host = _header(scope, b"origin"), _header(scope, b"host")
        if scope["type"] == "websocket" and not same_origin(origin, host, secure(scope)):
            await deny(scope, send, 403)
            return
        await self.app(scope, receive, send)


class KnownPaths:
    """A websocket path no route takes is a 404 (Channels' router raised, and daphne said 500)."""

    def __init__(self, router: Any, app: Any):
        self.router, self.app = router, app  # the app: the router behind its middleware

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        known = path.startswith(root) and any(
            route.pattern.match(path[len(root) :].lstrip("/")) for route in self.router.routes
        )
        if not known:
            await deny(scope, send, 404)
            return
        await self.app(scope, receive, send)


class StaticFiles(ASGIStaticFilesHandler):
    """Django's static files handler, with a path that leaves the static folders (`/static/..`)
    answered 404 like any missing file."""

    def serve(self, request: Any) -> Any:
        try:
            return super().serve(request)
        except SuspiciousOperation as exc:
            raise Http404("no such static file") from exc
