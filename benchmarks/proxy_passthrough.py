"""The ceiling for proxy_bench.py: a bare pass-through on the proxy's own server and client.

It forwards each body to the fake provider and relays the answer, and does nothing else:
no JSON, no routing, no accounting, no log. What it reaches against `direct` is the most
any proxy built from these parts can reach on this machine; the real proxy is compared
with it. Like the proxy, it serves a plain call by callbacks alone when a pooled
connection is idle (the fast lane: HttpServer's app.fast hook, UpstreamClient.start), and
streams and everything else as an ASGI cycle.
Run by proxy_bench.py: proxy_passthrough.py UPSTREAM_URL PORT
"""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.http11 import HttpServer  # noqa: E402
from proxy.http11_cycle import response_head  # noqa: E402
from proxy.upstream import UpstreamClient, encode_headers, header_value  # noqa: E402


class Relay:
    """One plain call in the fast lane: the upstream's sink, and the connection's cycle."""

    def __init__(self, conn: Any, req: Any, client: UpstreamClient) -> None:
        self.conn, self.req, self.client = conn, req, client
        self.close = not req.keep_alive
        self.started = self.finished = False

    def on_done(self, up: Any) -> None:
        data = b"".join(up.chunks)
        ctype = header_value(up.headers, b"content-type") or b"application/json"
        head = [(b"content-type", ctype), (b"content-length", b"%d" % len(data))]
        self.client.release(up)
        self.started = self.finished = True
        self.conn.write(response_head(up.status, head, False, self.close) + data)
        self.conn.cycle_done(self)

    def on_error(self, up: Any, exc: BaseException, resend: bool) -> None:
        self.client.discard(up)
        self.finished = True
        self.conn.close()

    def wake(self) -> None:
        pass

    def done(self) -> bool:
        return self.finished

    def cancel(self) -> bool:
        return False


async def serve(upstream: str, port: int) -> None:
    client = UpstreamClient()
    block = encode_headers(
        [(b"content-type", b"application/json"), (b"authorization", b"Bearer sk-bench-upstream")]
    )

    class App:
        def fast(self, conn: Any, req: Any) -> bool:
            if req.body.find(b'"stream":true') >= 0 or req.body.find(b'"stream": true') >= 0:
                return False
            relay = Relay(conn, req, client)
            if client.start(upstream + req.url.decode(), block, req.body, relay) is None:
                return False
            conn.cycle = conn.task = relay
            return True

        async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
            await asgi(scope, receive, send)

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = (await receive())["body"]
        resp = await client.post(upstream + scope["path"], block, body)
        ctype = resp.header(b"content-type") or b"application/json"
        if ctype.startswith(b"text/event-stream"):
            await send(
                {
                    "type": "http.response.start",
                    "status": resp.status,
                    "headers": [(b"content-type", ctype)],
                }
            )
            async for data, last in resp.batches():
                await send({"type": "http.response.body", "body": data, "more_body": not last})
            return
        data = await resp.read()
        await send(
            {
                "type": "http.response.start",
                "status": resp.status,
                "headers": [(b"content-type", ctype), (b"content-length", b"%d" % len(data))],
            }
        )
        await send({"type": "http.response.body", "body": data})

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(2048)
    sock.setblocking(False)
    await HttpServer(App()).start(sock)
    await asyncio.Event().wait()


if __name__ == "__main__":
    import uvloop

    uvloop.run(serve(sys.argv[1], int(sys.argv[2])))
