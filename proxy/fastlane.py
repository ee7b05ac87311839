"""The fast lane: a plain forwarded call served by callbacks alone, with no task and no ASGI.

Most calls an agent makes are the same: a non-streamed POST, routed to a provider, with a
keep-alive connection to it idle in the pool. For those, the request's last byte starts the
upstream write (HttpConnection -> serve), and the answer's last byte writes the response and
counts the call (UpstreamConn -> FastCall.on_done). That skips, per call, a task, two coroutine
resumptions, a future and four ASGI messages: the most common call is the one whose cost the
proxy adds to every agent's turn (benchmarks/README.md has the figures).
Everything else (a stream, the mock, a refusal, an error before routing, no idle connection,
an HTTP proxy on the way) goes to ProxyApp._api with what was worked out here, so that no
check runs twice and nothing is counted twice.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from proxy import jsonio
from proxy.call import Call
from proxy.forward import (
    JSON_CT,
    Outcome,
    body_outcome,
    prepare_body,
    redact_error_body,
    response_headers,
    upstream_header_block,
)
from proxy.http11_cycle import error_response, response_head
from proxy.mock_wire import error_body
from proxy.registry import Refusal, Registry
from proxy.upstream_conn import header_value
from proxy.usage import StreamTap

if TYPE_CHECKING:
    from proxy.http11_conn import HttpConnection
    from proxy.http11_cycle import Request
    from proxy.trajectory import TrajectoryWriter
    from proxy.upstream import UpstreamClient
    from proxy.upstream_conn import UpstreamConn

log = logging.getLogger(__name__)
FAST_PATHS = {  # exactly these: no query string, nothing percent-encoded
    b"/v1/chat/completions": "chat",
    b"/chat/completions": "chat",
    b"/v1/responses": "responses",
    b"/responses": "responses",
    b"/v1/messages": "messages",
    b"/messages": "messages",
}


class Lane(Protocol):
    """What the fast lane needs of the app it serves for (proxy.app.ProxyApp): the app imports the
    lane, so the lane names the app's parts rather than the app."""

    registry: Registry
    client: UpstreamClient
    writer: TrajectoryWriter
    fast_lane: bool
    fast_calls: int

    def admit(
        self, protocol: str, headers: list[tuple[bytes, bytes]], raw: bytes
    ) -> Call | tuple[int, bytes]: ...

    def finish(self, call: Call, out: Outcome | None) -> None: ...


class Admitted(NamedTuple):
    """What the fast lane worked out for a request it leaves to ProxyApp._api."""

    call: Any  # the Call, or the (status, body) to answer with
    begun: bool = False  # begin_call ran: a turn is reserved, unless it refused
    refusal: Refusal | None = None


def serve(app: Lane, conn: HttpConnection, req: Request) -> bool:
    """Take `req` into the fast lane (True), or leave it to the ASGI app with req.ctx set."""
    protocol = FAST_PATHS.get(req.url)
    if protocol is None or req.method != "POST" or req.version != "1.1" or not app.fast_lane:
        return False
    call = app.admit(protocol, req.headers, req.body)
    if isinstance(call, tuple) or call.route.is_mock or call.obj.get("stream"):
        req.ctx = Admitted(call)
        return False
    refusal = app.registry.begin_call(call.state)
    if refusal is not None:
        req.ctx = Admitted(call, True, refusal)
        return False
    call.sent = prepare_body(protocol, call.obj, call.raw, call.route)
    fc = FastCall(app, conn, req, call)
    block = upstream_header_block(call.route, protocol, call.passed)
    try:
        fc.up = app.client.start(call.route.endpoints[protocol], block, call.sent, fc)
    except Exception:  # the turn is reserved: the ASGI way counts the call whatever befalls it
        log.exception("the fast lane could not send a call to %s", call.route.requested)
        fc.up = None
    if fc.up is None:
        req.ctx = Admitted(call, True)
        return False
    conn.cycle = conn.task = fc
    app.fast_calls += 1
    return True


class FastCall:
    """One call in the fast lane: the upstream's sink, and the connection's cycle and task."""

    __slots__ = ("app", "conn", "req", "call", "up", "close", "started", "finished", "_future")

    def __init__(self, app: Lane, conn: HttpConnection, req: Request, call: Call) -> None:
        self.app, self.conn, self.req, self.call = app, conn, req, call
        self.up: UpstreamConn | None = None
        self.close = not req.keep_alive
        self.started = self.finished = False
        self._future: asyncio.Future[None] | None = None

    # the upstream's answer (proxy.upstream_conn.Sink)
    def on_done(self, up: UpstreamConn) -> None:
        try:
            out = self._relay(up)
        except Exception:
            log.exception("the proxy failed a call to %s", self.call.route.requested)
            self.app.client.discard(up)
            self._fail_response()
            out = None
        self._end(out)

    def on_error(self, up: UpstreamConn, exc: BaseException, resend: bool) -> None:
        self.app.client.discard(up)
        if resend:  # the pooled connection was dead: the ASGI app sends it again on another
            self.finished = True  # and counts it: a server that stops now must not count it too
            if self._future is not None and not self._future.done():
                self._future.set_result(None)
            self.req.ctx = Admitted(self.call, True)
            self.conn.start_cycle(self.req)
            return
        where = "read failed" if up.headers_done else "unreachable"
        out = Outcome(502, error_class="infra_failure", error=f"upstream {where}: {exc}")
        body = out.raw = jsonio.dumps(error_body(self.call.protocol, 502, out.error or ""))
        self._write(502, [JSON_CT, (b"content-length", b"%d" % len(body))], body)
        self._end(out)

    def _relay(self, up: UpstreamConn) -> Outcome:
        chunks, status = up.chunks, up.status
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        headers = response_headers(up.headers)
        ctype = header_value(up.headers, b"content-type") or b""
        self.app.client.release(up)
        if status >= 400:
            data = redact_error_body(data, self.app.writer.secrets())
        headers.append((b"content-length", b"%d" % len(data)))
        self._write(status, headers, data)
        if status < 400 and ctype.startswith(b"text/event-stream"):
            # a stream the client did not ask for: passed on whole, counted as a stream
            tap = StreamTap(self.call.protocol)
            tap.feed(data)
            tap.close()
            out = Outcome(status, usage=tap.usage(), raw=tap.raw(), stream=True, headers_sent=True)
            if tap.error:
                out.error_class, out.error = "api_error", f"stream error event: {tap.error}"
            return out
        return body_outcome(self.call.protocol, status, data)

    def _write(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.started = True
        self.conn.write(response_head(status, headers, False, self.close) + body)

    def _fail_response(self) -> None:
        if not self.started:
            self.started = True
            self.conn.write(error_response(500, "Internal Server Error"))
        self.close = True

    def _end(self, out: Outcome | None, served: bool = True) -> None:
        self.finished = True
        try:
            self.app.finish(self.call, out)
        except Exception:
            log.exception("could not count a call to %s", self.call.route.requested)
        conn = self.conn
        if served:
            conn.cycle_done(self)
        if conn.lost:  # connection_lost left the connection counted until now
            conn.forget()
        if self._future is not None and not self._future.done():
            self._future.set_result(None)

    # what the server asks of a cycle, and of its task
    def wake(self) -> None:
        pass

    def done(self) -> bool:
        return self.finished

    def future(self) -> asyncio.Future[None]:
        """Done when the call is (for a server that stops and waits for its calls)."""
        if self._future is None:
            self._future = self.conn.loop.create_future()
            if self.finished:
                self._future.set_result(None)
        return self._future

    def cancel(self) -> bool:
        """Stop waiting for the upstream: counted as the proxy's failure, as a cancelled task is."""
        if self.finished:
            return False
        up = self.up
        if up is not None:
            up.sink = None
            self.app.client.discard(up)
        self.conn.close()
        self._end(None, served=False)
        return True
