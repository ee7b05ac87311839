"""One request on the proxy's HTTP/1.1 server (proxy/http11_conn.py): its parsed form, the
bytes of a response head and of the server's own refusals, and the ASGI cycle that serves it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import unquote

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]

log = logging.getLogger(__name__)
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_ASGI = {"version": "3.0", "spec_version": "2.3"}
_DISCONNECT = {"type": "http.disconnect"}


def response_head(status: int, headers: Any, chunked: bool, close: bool) -> bytes:
    parts = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))]
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
    if chunked:
        parts.append(b"transfer-encoding: chunked\r\n")
    if close:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


# The server's own refusals, in the shape both OpenAI's and Anthropic's SDKs read an error from
# ({"error": {"message", "type"}}), so that an agent's SDK shows the reason, not a parse failure.
_ERROR_TYPES = {
    400: "invalid_request_error",
    408: "invalid_request_error",
    413: "request_too_large",
    431: "invalid_request_error",
}


def error_response(status: int, text: str) -> bytes:
    error = {"type": _ERROR_TYPES.get(status, "api_error"), "message": text}
    body = json.dumps({"type": "error", "error": error}).encode() + b"\n"
    head = response_head(
        status,
        [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
        False,
        True,
    )
    return head + body


class Connection(Protocol):
    """What a cycle uses of its connection (proxy/http11_conn.py's HttpConnection, which imports
    this module)."""

    loop: asyncio.AbstractEventLoop
    peer: tuple[str, int] | None
    sockname: tuple[str, int] | None
    closed: bool
    lost: bool
    paused: bool

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def cycle_done(self, cycle: Any) -> None: ...

    def close(self) -> None: ...

    def forget(self) -> None: ...


class Request:
    __slots__ = ("method", "url", "headers", "body", "keep_alive", "version", "ctx")

    def __init__(
        self,
        method: str,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        keep_alive: bool,
        version: str,
    ) -> None:
        self.method, self.url, self.headers = method, url, headers
        self.body, self.keep_alive, self.version = body, keep_alive, version
        self.ctx: Any = None


class Cycle:
    """One request and its response: the ASGI receive and send callables."""

    __slots__ = (
        "conn",
        "req",
        "started",
        "complete",
        "chunked",
        "head",
        "close",
        "body_read",
        "waiter",
        "is_head",
    )

    def __init__(self, conn: Connection, req: Request) -> None:
        self.conn, self.req = conn, req
        self.started = self.complete = self.chunked = self.body_read = False
        self.close = not req.keep_alive
        self.head = b""
        self.waiter: asyncio.Future[None] | None = None
        self.is_head = req.method == "HEAD"

    async def run(self, app: App) -> None:
        req, conn = self.req, self.conn
        path, _, query = req.url.partition(b"?")
        scope = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": req.version,
            "method": req.method,
            "scheme": "http",
            "path": unquote(path.decode("latin-1"))
            if path.find(b"%") >= 0
            else path.decode("latin-1"),
            "raw_path": path,
            "query_string": query,
            "root_path": "",
            "headers": req.headers,
            "client": conn.peer,
            "server": conn.sockname,
            "proxy.admitted": req.ctx,
        }
        try:
            await app(scope, self.receive, self.send)
        except asyncio.CancelledError:
            conn.close()
            raise
        except Exception:
            log.exception("the proxy app failed on %s %s", req.method, path.decode("latin-1"))
            if not self.started and not conn.closed:
                conn.write(error_response(500, "Internal Server Error"))
            conn.close()
        else:
            if self.complete:
                conn.cycle_done(self)
                return
            if not self.started and not conn.closed:
                log.error(
                    "the proxy app sent no response to %s %s", req.method, path.decode("latin-1")
                )
                conn.write(error_response(500, "Internal Server Error"))
            conn.close()  # a half-sent response cannot be followed on this connection
        finally:
            if conn.lost:  # connection_lost left the connection counted until now
                conn.forget()

    async def receive(self) -> dict[str, Any]:
        if not self.body_read:
            self.body_read = True
            return {"type": "http.request", "body": self.req.body, "more_body": False}
        # Afterwards the only news is a disconnect (or the end of this response).
        if not self.conn.closed and not self.complete:
            fut = self.waiter = self.conn.loop.create_future()
            try:
                await fut
            finally:
                self.waiter = None
        return _DISCONNECT

    def wake(self) -> None:
        fut = self.waiter
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def send(self, message: dict[str, Any]) -> None:
        conn = self.conn
        kind = message["type"]
        if kind == "http.response.body":
            if not self.started or self.complete:
                raise RuntimeError("http.response.body outside a response")
            body: bytes = message.get("body", b"")
            more = message.get("more_body", False)
            if conn.closed:
                if not more:
                    self.complete = True
                return
            if self.is_head:
                data = self.head
                self.head = b""
            elif self.chunked:
                data = self.head
                if body:
                    data += b"%x\r\n%s\r\n" % (len(body), body)
                if not more:
                    data += b"0\r\n\r\n"
                self.head = b""
            elif self.head:
                data = self.head + body
                self.head = b""
            else:
                data = body
            if data:
                conn.write(data)
            if not more:
                self.complete = True
                self.wake()
            elif conn.paused:
                await conn.drain()
        elif kind == "http.response.start":
            if self.started:
                raise RuntimeError("http.response.start sent twice")
            self.started = True
            headers = message.get("headers", ())
            status = message["status"]
            framed = False
            for name, _ in headers:
                if name.lower() == b"content-length":
                    framed = True
                    break
            bodiless = status < 200 or status in (204, 304) or self.is_head
            self.chunked = not framed and not bodiless and self.req.version == "1.1"
            if not framed and not bodiless and not self.chunked:
                self.close = True  # HTTP/1.0 without a length: the end is the connection's end
            self.head = response_head(status, headers, self.chunked, self.close)
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
