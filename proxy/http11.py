"""A small HTTP/1.1 server for one ASGI app: the proxy's front door.

uvicorn spends much of the proxy's CPU per call on things a model proxy does not need (a
task-tracking WeakSet, per-message header validation, events per cycle; benchmarks/README.md
has the figures). This server
does only what the proxy's clients use: keep-alive, pipelining, request bodies by length
or chunked, `Expect: 100-continue`, responses by length or chunked, back-pressure and a
disconnect seen by the app. Status line and headers leave with the first body bytes in
one write. No WebSocket, no lifespan, no HTTP/2. Clients are agents' code, so request heads
and bodies, connections per listener, the bodies they hold together and the time to send a
head are bounded. A connection and its requests are proxy/http11_conn.py; this module accepts
them, times out stalled heads and idle connections, and stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from proxy.http11_conn import App, HttpConnection, Listener

HEAD_TIMEOUT = 30.0  # from a request's first byte to its last header's; none once it is served
BODY_TIMEOUT = 120.0  # from a complete head to its body's last byte (a 64 MB body, sent slowly)
IDLE_TIMEOUT = 75.0  # for a keep-alive connection between requests
SWEEP_EVERY = 5.0


class HttpServer:
    """Serves `app` on a listening socket in the running loop until close()."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.loop = asyncio.get_running_loop()
        self.connections: set[HttpConnection] = set()
        self._main = Listener(sandbox=False)
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self, sock: Any) -> None:
        self._server = await self.loop.create_server(
            lambda: HttpConnection(self.app, self, self._main), sock=sock, backlog=2048
        )
        self._sweeper = self.loop.call_later(SWEEP_EVERY, self._sweep)

    async def add_listener(self, sock: Any) -> Callable[..., Awaitable[None]]:
        """Also serve a listening socket made elsewhere (inside a sandbox's network namespace,
        say): connections it accepts are served here directly, with no relay. Returns the
        function that stops it: it closes what it accepted, gives requests still running (their
        clients gone or not) `timeout` s to finish and be counted in full, then cancels them."""
        group = Listener(sandbox=True)
        listener = await self.loop.create_server(
            lambda: HttpConnection(self.app, self, group), sock=sock, backlog=256
        )

        async def close(timeout: float = 10.0) -> None:
            listener.close()
            await _stop(group.conns, timeout)
            await listener.wait_closed()

        return close

    def _sweep(self) -> None:
        """Answer 408 to a request head not all in HEAD_TIMEOUT after its first byte, or a body not
        all in BODY_TIMEOUT after its head (a byte now and then is activity, not progress); close
        keep-alive connections idle for IDLE_TIMEOUT."""
        now = self.loop.time()
        for conn in list(self.connections):
            if conn.reading_paused:  # the wait is ours
                continue
            reader = conn.reader
            if reader.head_since is not None:
                if now - reader.head_since > HEAD_TIMEOUT:
                    conn.reject(408, f"Request Timeout: the head took over {HEAD_TIMEOUT:g} s")
            elif reader.body_since is not None:
                if now - reader.body_since > BODY_TIMEOUT:
                    conn.reject(408, f"Request Timeout: the body took over {BODY_TIMEOUT:g} s")
            elif conn.cycle is None and not conn.queue and now - conn.last_active > IDLE_TIMEOUT:
                conn.close()
        if self._sweeper is not None:
            self._sweeper.cancel()  # when called early
        self._sweeper = self.loop.call_later(SWEEP_EVERY, self._sweep)

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._server is not None:
            self._server.close()
        await _stop(self.connections, 0)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None


async def _stop(conns: set[HttpConnection], timeout: float) -> None:
    """Close `conns` now, give their requests `timeout` s to finish, then cancel the rest."""
    running = [c.task for c in conns if c.task is not None and not c.task.done()]
    for conn in list(conns):
        conn.closed = True
        if conn.transport is not None:  # unread output goes: it could keep a request in drain()
            conn.transport.abort()
    # A task, or a request the app serves by callbacks (app.fast), which gives a future
    waits = {(t if isinstance(t, asyncio.Future) else t.future()): t for t in running}
    pending = set(waits)
    if pending and timeout > 0:
        pending = (await asyncio.wait(pending, timeout=timeout))[1]
    for fut in pending:
        waits[fut].cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
