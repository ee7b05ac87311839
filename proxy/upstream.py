"""A small, fast HTTP/1.1 keep-alive client for upstream calls (asyncio + httptools).

httpx costs well over a millisecond of CPU per request here and its pool degrades with
concurrency, which alone would break the proxy's latency budget. This client does only
what the proxy needs: POST a body, read the status and headers, then the body as it
arrives, over pooled keep-alive connections (TLS for https). Origins that an HTTP(S)_PROXY
setting covers go through httpx instead, which knows how to tunnel.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import urlsplit

from proxy.upstream_conn import (
    HIGH_WATER,
    STALE_WINDOW,
    Headers,
    Sink,
    UpstreamConn,
    UpstreamError,
    UpstreamTimeout,
    header_value,
)

__all__ = [
    "UpstreamClient",
    "UpstreamError",
    "UpstreamResponse",
    "UpstreamTimeout",
    "Sink",
    "encode_headers",
    "decode_headers",
    "header_value",
    "STALE_WINDOW",
]


def encode_headers(headers: Headers) -> bytes:
    """Headers as the block of lines post() sends; build once, send many times."""
    return b"".join(b"%s: %s\r\n" % (name, value) for name, value in headers)


def decode_headers(headers: Headers | bytes) -> Headers:
    if not isinstance(headers, bytes):
        return headers
    pairs = (line.split(b": ", 1) for line in headers.split(b"\r\n") if line)
    return [(name, value) for name, value in pairs]


class UpstreamResponse:
    """Status and headers are known; iterate for the body chunks, then it is released."""

    def __init__(self, conn: UpstreamConn, client: UpstreamClient) -> None:
        self._conn: UpstreamConn | None = conn
        self._client = client
        self.status = conn.status
        self.headers = conn.headers

    def header(self, name: bytes) -> bytes | None:
        return header_value(self.headers, name)

    async def batches(self) -> AsyncGenerator[tuple[bytes, bool], None]:
        """(everything received so far, whether that is the end), until the end.

        Joining what arrived together means one send to the client per network read,
        not one per chunk: a stream's frames usually arrive several at a time.
        """
        conn = self._conn
        if conn is None:
            return
        try:
            while True:
                chunks = conn.chunks
                if chunks:
                    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                    chunks.clear()
                    if conn.buffered > HIGH_WATER and conn.transport is not None:
                        conn.transport.resume_reading()
                    conn.buffered = 0
                    done = conn.done
                    yield data, done
                    if done:
                        return
                elif conn.done:
                    yield b"", True
                    return
                else:
                    await conn.wait()
        finally:
            self.release()

    async def read(self) -> bytes:
        conn = self._conn
        if conn is not None and conn.done:  # the usual case for a small JSON answer
            data = b"".join(conn.chunks)
            conn.chunks.clear()
            self.release()
            return data
        return b"".join([data async for data, _ in self.batches()])

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._client.release(conn)


class UpstreamClient:
    """Pools keep-alive connections per origin; one instance serves every upstream."""

    def __init__(
        self,
        connect_timeout: float = 30.0,
        read_timeout: float = 900.0,
        max_idle_per_origin: int = 256,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_idle = max_idle_per_origin
        self._idle: dict[tuple[str, str, int], list[UpstreamConn]] = {}
        self._urls: dict[str, tuple[tuple[str, str, int], bytes, bytes, bool]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._httpx: Any = None
        self._busy: set[UpstreamConn] = set()
        self._sweeper: asyncio.TimerHandle | None = None

    def _parse(self, url: str) -> tuple[tuple[str, str, int], bytes, bytes, bool]:
        hit = self._urls.get(url)
        if hit is None:
            parts = urlsplit(url)
            scheme, host = parts.scheme, parts.hostname or ""
            port = parts.port or (443 if scheme == "https" else 80)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            default = port == (443 if scheme == "https" else 80)
            hostport = host if default else f"{host}:{port}"
            proxied = bool(
                urllib.request.getproxies().get(scheme)
            ) and not urllib.request.proxy_bypass(host)
            hit = ((scheme, host, port), target.encode(), hostport.encode(), proxied)
            if len(self._urls) < 4096:
                self._urls[url] = hit
        return hit

    def _request(
        self, url: str, headers: Headers | bytes, body: bytes
    ) -> tuple[tuple[str, str, int], bytes, bytes]:
        """(origin, the request bytes to write, a large body to write after them)."""
        origin, target, hostport, _ = self._parse(url)
        head = [
            b"POST ",
            target,
            b" HTTP/1.1\r\nhost: ",
            hostport,
            b"\r\ncontent-length: %d\r\n" % len(body),
        ]
        if isinstance(headers, bytes):
            head.append(headers)
        else:
            for name, value in headers:
                head += (name, b": ", value, b"\r\n")
        head.append(b"\r\n")
        if len(body) < 65536:
            head.append(body)  # one write, one syscall
            body = b""
        return origin, b"".join(head), body

    def _send(self, conn: UpstreamConn, request: bytes, body: bytes) -> None:
        conn.reset()
        assert conn.transport is not None
        conn.transport.write(request)
        if body:
            conn.transport.write(body)
        self._busy.add(conn)
        if self._sweeper is None:
            self._sweeper = conn.loop.call_later(1.0, self._sweep)

    def start(self, url: str, headers: bytes, body: bytes, sink: Sink) -> UpstreamConn | None:
        """Send on an idle pooled connection without waiting: `sink` gets the answer by callback
        (on_done or on_error), and the connection is returned. None, and nothing sent, when no
        connection is idle or the origin is reached through an HTTP proxy: post() is the way."""
        origin, _, _, proxied = self._parse(url)
        conn = None if proxied else self._idle_conn(origin)
        if conn is None:
            return None
        _, request, rest = self._request(url, headers, body)
        self._send(conn, request, rest)
        conn.sink = sink
        conn.sent_at = conn.loop.time()
        return conn

    async def post(self, url: str, headers: Headers | bytes, body: bytes) -> UpstreamResponse | Any:
        """Send and wait for the status and headers; raises UpstreamError.

        `headers` may be a ready block of "name: value\\r\\n" lines (see encode_headers).
        """
        if self._parse(url)[3]:
            return await self._post_httpx(url, decode_headers(headers), body)
        origin, request, body = self._request(url, headers, body)
        for _ in range(2):
            conn = self._idle_conn(origin)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(origin)
            self._send(conn, request, body)
            sent_at = conn.loop.time()
            try:
                while not conn.headers_done:
                    await conn.wait()
            except UpstreamError as exc:
                self._busy.discard(conn)
                conn.close()
                # A pooled connection the server had already closed: safe to send again,
                # since the server never answered on it and failed it at once.
                stale = conn.loop.time() - sent_at < STALE_WINDOW
                if reused and stale and not conn.got_bytes and not isinstance(exc, UpstreamTimeout):
                    continue
                raise
            except BaseException:  # cancelled: the connection's state is unknown, drop it
                self._busy.discard(conn)
                conn.close()
                raise
            return UpstreamResponse(conn, self)
        raise UpstreamError("upstream closed two connections in a row")

    async def connect_ahead(self, url: str, count: int = 1) -> None:
        """Open `count` connections to the origin of `url` and pool them, idle."""
        origin = self._parse(url)[0]
        for _ in range(count):
            conn = await self._connect(origin)
            self._idle.setdefault(origin, []).append(conn)

    def _idle_conn(self, origin: tuple[str, str, int]) -> UpstreamConn | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        return None

    async def _connect(self, origin: tuple[str, str, int]) -> UpstreamConn:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        ssl_ctx = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            ssl_ctx = self._ssl
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: UpstreamConn(origin), host, port, ssl=ssl_ctx),
                self.connect_timeout,
            )
        except (TimeoutError, OSError, ssl.SSLError) as exc:
            raise UpstreamError(
                f"cannot connect to {host}:{port}: {type(exc).__name__}: {exc}"
            ) from exc
        return conn

    def _sweep(self) -> None:
        """Fail calls whose upstream has been silent for read_timeout (checked each second)."""
        self._sweeper = None
        now = asyncio.get_running_loop().time()
        for conn in [c for c in self._busy if now - c.last_active > self.read_timeout]:
            self._busy.discard(conn)
            conn.fail(UpstreamTimeout(f"upstream sent nothing for {self.read_timeout:.0f} s"))
            conn.close()
        if self._busy:
            self._sweeper = asyncio.get_running_loop().call_later(1.0, self._sweep)

    def discard(self, conn: UpstreamConn) -> None:
        """Close a connection whose call failed."""
        self._busy.discard(conn)
        conn.close()

    def release(self, conn: UpstreamConn) -> None:
        """Back to the pool (kept alive) or closed, once its response is read whole."""
        self._busy.discard(conn)
        keep = conn.done and conn.keep_alive and not conn.closed and conn.error is None
        if not keep:
            conn.close()
            return
        idle = self._idle.setdefault(conn.origin, [])
        if len(idle) >= self.max_idle:
            conn.close()
        else:
            idle.append(conn)

    async def _post_httpx(self, url: str, headers: Headers, body: bytes) -> Any:
        import httpx

        if self._httpx is None:
            self._httpx = httpx.AsyncClient(
                timeout=httpx.Timeout(self.read_timeout, connect=self.connect_timeout)
            )
        try:
            req = self._httpx.build_request("POST", url, content=body, headers=headers)
            resp = await self._httpx.send(req, stream=True)
        except httpx.HTTPError as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from exc
        return _HttpxResponse(resp)

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        if self._httpx is not None:
            await self._httpx.aclose()


class _HttpxResponse:
    """The same surface as UpstreamResponse, for origins reached through an HTTP proxy."""

    def __init__(self, resp: Any) -> None:
        self._resp = resp
        self.status = resp.status_code
        self.headers = list(resp.headers.raw)

    def header(self, name: bytes) -> bytes | None:
        value = self._resp.headers.get(name.decode())
        return value.encode() if value is not None else None

    async def batches(self) -> AsyncGenerator[tuple[bytes, bool], None]:
        import httpx

        try:
            async for chunk in self._resp.aiter_raw():
                yield chunk, False
            yield b"", True
        except httpx.HTTPError as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            await self._resp.aclose()

    async def read(self) -> bytes:
        return b"".join([data async for data, _ in self.batches()])

    def release(self) -> None:
        pass
