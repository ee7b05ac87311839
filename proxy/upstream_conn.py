"""One keep-alive connection to an upstream (proxy/upstream.py pools them): its response parsed
with httptools as bytes arrive, for a waiting coroutine or, in the fast lane, for a Sink."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

import httptools

Headers = list[tuple[bytes, bytes]]
HIGH_WATER = 1 << 20  # pause reading the upstream when this much body waits for the client
# A pooled connection that fails before any answer is sent again only if it failed this soon
# after the write: a server that had already closed it fails it at once, while one that
# fails later may have run (and billed) the call, and must not get it twice.
STALE_WINDOW = 0.5


def header_value(headers: Headers, name: bytes) -> bytes | None:
    """The first header called `name` (lower case), in any case."""
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


class Sink(Protocol):
    """Where UpstreamClient.start delivers an answer, once, outside the parser's callbacks."""

    def on_done(self, conn: UpstreamConn) -> None:
        """The whole response is in conn (status, headers, chunks); release it to the client."""

    def on_error(self, conn: UpstreamConn, exc: BaseException, resend: bool) -> None:
        """The call failed; `resend`: it never reached the server and may be sent again."""


class UpstreamError(Exception):
    """The upstream could not be reached, or the connection broke or timed out."""


class UpstreamTimeout(UpstreamError):
    """The upstream went silent for longer than the read timeout."""


class UpstreamConn(asyncio.Protocol):
    """One keep-alive connection; parses responses with httptools as bytes arrive."""

    def __init__(self, origin: tuple[str, str, int]) -> None:
        # Kept: get_running_loop() costs a getpid() syscall on Python 3.11.
        self.loop = asyncio.get_running_loop()
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.waiter: asyncio.Future[None] | None = None
        self.sink: Sink | None = None  # set by UpstreamClient.start: the answer goes there
        self.sent_at = 0.0
        self.reset()

    def reset(self) -> None:
        self.status = 0
        self.headers: Headers = []
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.headers_done = False
        self.done = False
        self.error: BaseException | None = None
        self.got_bytes = False
        self.keep_alive = False
        self.last_active = self.loop.time()

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        self.last_active = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.fail(UpstreamError(f"bad HTTP from upstream: {exc}"))
            self.close()
            return
        if self.done and self.sink is not None:  # after the parser, never inside its callbacks
            sink, self.sink = self.sink, None
            sink.on_done(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.done and self.error is None:
            if self.headers_done and not self._framed():
                self.done = True  # a body delimited by the connection's end
                self._wake()
                if self.sink is not None:
                    sink, self.sink = self.sink, None
                    sink.on_done(self)
            else:
                self.fail(UpstreamError(f"upstream closed the connection: {exc or 'EOF'}"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and self.transport is not None and self.sink is None:
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()  # only valid inside this callback
        self.done = True
        self._wake()

    # helpers
    def _framed(self) -> bool:
        for name, value in self.headers:
            low = name.lower()
            if low == b"content-length" or (
                low == b"transfer-encoding" and b"chunked" in value.lower()
            ):
                return True
        return False

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def fail(self, exc: BaseException) -> None:
        self.error = exc
        sink = self.sink
        if sink is not None:
            self.sink = None
            # As post() decides: a pooled connection the server had already closed fails at
            # once, with no answer, and the call may be sent again on another.
            resend = (
                not self.got_bytes
                and not isinstance(exc, UpstreamTimeout)
                and self.loop.time() - self.sent_at < STALE_WINDOW
            )
            sink.on_error(self, exc, resend)
            return
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_exception(exc)

    async def wait(self) -> None:
        """Until the parser has news; a stalled read is failed by UpstreamClient._sweep."""
        if self.error is not None:
            raise self.error
        fut = self.loop.create_future()
        self.waiter = fut
        try:
            await fut
        finally:
            self.waiter = None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
