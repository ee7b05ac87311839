"""One client connection of the proxy's HTTP/1.1 server (proxy/http11.py): its requests parsed
with httptools, each served as an ASGI cycle (proxy/http11_cycle.py) or by the app's fast lane,
and the limits an untrusted client meets.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import httptools

from proxy.http11_cycle import App, Cycle, Request, error_response

# An app may also serve a request without an ASGI cycle: app.fast(conn, req) -> bool. True: it
# took the request and stands in as conn.cycle and conn.task (with wake, started, close, req,
# done(), cancel() and future()) until it calls conn.cycle_done. False: the request is served
# as an ASGI cycle, with req.ctx in scope["proxy.admitted"] (what the app already worked out).
MAX_BODY = 64 << 20  # an agent's request with its whole conversation (images too) stays below this
MAX_HEAD = 64 << 10  # request line and headers: agents are untrusted, their memory is ours
MAX_QUEUED = 16  # pipelined requests waiting behind the one in progress
# Connections per listener (with requests still running for clients gone); more are closed at
# once: no sandbox takes the fds or the memory that other trials need.
MAX_CONNECTIONS = 1024  # on the main listener
MAX_SANDBOX_CONNECTIONS = 256  # on each listener given to add_listener
# Request bodies a listener's connections may hold at once (being received, queued or being
# served): a body cap alone lets 256 connections hold 64 MB each.
MAX_HELD = 1 << 30  # on the main listener
MAX_SANDBOX_HELD = 256 << 20  # on each listener given to add_listener


class Listener:
    """The connections of one listening socket (the main one, or a sandbox's), and the request
    bytes they hold; its limits are the module's, read when they apply."""

    __slots__ = ("conns", "sandbox", "held")

    def __init__(self, sandbox: bool) -> None:
        self.conns: set[HttpConnection] = set()
        self.sandbox = sandbox
        self.held = 0

    @property
    def cap(self) -> int:
        return MAX_SANDBOX_CONNECTIONS if self.sandbox else MAX_CONNECTIONS

    @property
    def max_held(self) -> int:
        return MAX_SANDBOX_HELD if self.sandbox else MAX_HELD


class Server(Protocol):
    """What a connection uses of its server (proxy/http11.py's HttpServer, which imports this
    module): its loop, and the connections it closes when it stops."""

    loop: asyncio.AbstractEventLoop
    connections: set[HttpConnection]


class RequestReader:
    """The parser's side of a connection (httptools calls these): each request's head and body
    gathered under the limits, and handed whole to the connection. The bytes of request bodies
    it holds count against its listener's limit until the connection releases them."""

    __slots__ = (
        "conn",
        "listener",
        "parser",
        "head_since",
        "body_since",
        "held",
        "over_held",
        "_url",
        "_headers",
        "_body",
        "_size",
        "_head_size",
        "_expect",
    )

    def __init__(self, conn: HttpConnection, listener: Listener) -> None:
        self.conn, self.listener = conn, listener
        self.parser = httptools.HttpRequestParser(self)
        self.head_since: float | None = None  # while a request head is incomplete
        self.body_since: float | None = None  # from a complete head until its body is whole
        self.held = 0  # request body bytes counted in listener.held, until their request is done
        self.over_held = False
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: bytes | bytearray = b""
        self._size = 0
        self._head_size = 0
        self._expect = False

    def refusal(self, exc: Exception) -> tuple[int, str]:
        """The status and text a request the parser gave up on is refused with."""
        if isinstance(exc, httptools.HttpParserUpgrade):
            return 400, "Upgrades are not supported"
        if self.over_held:
            return (
                413,
                f"Request bodies in progress from this client's sandbox hold over "
                f"{self.listener.max_held} bytes",
            )
        if self._size > MAX_BODY:
            return 413, f"Request body too large (over {MAX_BODY} bytes)"
        if self._head_size > MAX_HEAD:
            return 431, f"Request header fields too large (over {MAX_HEAD} bytes)"
        return 400, f"Bad Request: {exc}"  # a callback's exception arrives wrapped

    @property
    def buffered(self) -> int:
        """Bytes of a request body being received (none while the connection idles)."""
        return len(self._body)

    def release(self, n: int) -> None:
        n = min(n, self.held)
        self.held -= n
        self.listener.held -= n

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.head_since = self.conn.last_active
        self._url = b""
        self._headers = []
        self._body = b""
        self._size = 0
        self._head_size = 0
        self._expect = False

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_size += len(url)
        if self._head_size > MAX_HEAD:
            raise ValueError("request head too large")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value)
        if self._head_size > MAX_HEAD:
            raise ValueError("request head too large")
        name = name.lower()
        self._headers.append((name, value))
        if name == b"expect" and value.lower() == b"100-continue":
            self._expect = True

    def on_headers_complete(self) -> None:
        self.head_since = None
        self.body_since = self.conn.last_active
        if self._expect:
            self.conn.continue_if_idle()

    def on_body(self, body: bytes) -> None:
        n = len(body)
        self._size += n
        if self._size > MAX_BODY:
            raise ValueError("request body too large")
        listener = self.listener
        self.held += n
        listener.held += n
        if listener.held > listener.max_held:
            self.over_held = True
            raise ValueError("request bodies held over the listener's limit")
        if not self._body:
            self._body = body  # most bodies come in one piece: keep it, copy nothing
        else:
            # One growing buffer: as a list of pieces, a body sent in 2-byte chunks costs many
            # times its size in memory.
            if isinstance(self._body, bytes):
                self._body = bytearray(self._body)
            self._body += body

    def on_message_complete(self) -> None:
        self.body_since = None
        body, self._body = self._body, b""  # not kept while the connection idles
        parser = self.parser
        self.conn.received(
            Request(
                parser.get_method().decode("ascii"),
                self._url,
                self._headers,
                bytes(body) if isinstance(body, bytearray) else body,
                parser.should_keep_alive(),
                parser.get_http_version(),
            )
        )


class HttpConnection(asyncio.Protocol):
    """One client connection; requests on it are served one after the other."""

    def __init__(self, app: App, server: Server, listener: Listener):
        self.app, self.server, self.listener = app, server, listener
        self.fast: Callable[[HttpConnection, Request], bool] | None = getattr(app, "fast", None)
        self.loop = server.loop
        self.reader = RequestReader(self, listener)
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[str, int] | None = None
        self.sockname: tuple[str, int] | None = None
        self.closed = False
        self.lost = False  # the client is gone; a request may still run, to be counted in full
        self.paused = False
        self._drain: asyncio.Future[None] | None = None
        self.cycle: Cycle | Any = None  # or what app.fast put there
        self.task: asyncio.Task[None] | Any = None
        self.queue: deque[Request] = deque()
        self.reading_paused = False
        self.last_active = self.loop.time()

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if len(self.listener.conns) >= self.listener.cap:
            self.closed = True
            transport.close()
            return
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        self.peer = tuple(peer[:2]) if isinstance(peer, tuple) else None  # type: ignore[assignment]
        self.sockname = tuple(sock[:2]) if isinstance(sock, tuple) else None  # type: ignore[assignment]
        self.server.connections.add(self)
        self.listener.conns.add(self)

    def data_received(self, data: bytes) -> None:
        self.last_active = self.loop.time()
        try:
            self.reader.parser.feed_data(data)
        except (httptools.HttpParserUpgrade, httptools.HttpParserError) as exc:
            self.reject(*self.reader.refusal(exc))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = self.lost = True
        if self.task is None or self.task.done():
            self.forget()
        if self.cycle is not None:
            self.cycle.wake()
        self._release_drain()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._release_drain()

    # serving
    def continue_if_idle(self) -> None:
        """`Expect: 100-continue`: the client may send its body now, unless a request is ahead."""
        if self.cycle is None and not self.queue:
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def received(self, req: Request) -> None:
        if self.cycle is None:
            self._start(req)
        else:
            self.queue.append(req)
            if len(self.queue) >= MAX_QUEUED and not self.reading_paused and self.transport:
                self.reading_paused = True
                self.transport.pause_reading()

    def _start(self, req: Request) -> None:
        if self.fast is None or not self.fast(self, req):
            self.start_cycle(req)

    def start_cycle(self, req: Request) -> None:
        """Serve `req` as an ASGI cycle, in a task of its own."""
        cycle = self.cycle = Cycle(self, req)
        self.task = self.loop.create_task(cycle.run(self.app))

    def cycle_done(self, cycle: Cycle | Any) -> None:
        self.reader.release(len(cycle.req.body))
        self.cycle = self.task = None
        self.last_active = self.loop.time()
        if cycle.close or self.closed:
            self.close()
            return
        if self.queue:
            if self.reading_paused and self.transport is not None:
                self.reading_paused = False
                self.transport.resume_reading()
            self._start(self.queue.popleft())

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    async def drain(self) -> None:
        if self.paused and not self.closed:
            fut = self._drain
            if fut is None:
                fut = self._drain = self.loop.create_future()
            await fut

    def _release_drain(self) -> None:
        fut, self._drain = self._drain, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    def reject(self, status: int, text: str) -> None:
        """Answer `status` with `text` (unless a response began) and close."""
        if self.cycle is None or not self.cycle.started:
            self.write(error_response(status, text))
        self.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.closed = True

    def forget(self) -> None:
        """Stop counting this connection: its socket is shut and its last request done."""
        self.server.connections.discard(self)
        self.listener.conns.discard(self)
        self.reader.release(self.reader.held)
