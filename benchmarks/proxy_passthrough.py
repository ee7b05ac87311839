"""The ceiling for proxy_bench.py: a bare pass-through on the proxy's own server and client.

It forwards each body to the fake provider and relays the answer, and does nothing else:
no JSON, no routing, no accounting, no log. What it reaches against `direct` is the most
any proxy built from these parts can reach on this machine; the real proxy is compared
with it. Run by proxy_bench.py: proxy_passthrough.py UPSTREAM_URL PORT
"""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.http11 import HttpServer  # noqa: E402
from proxy.upstream import UpstreamClient, encode_headers  # noqa: E402


async def serve(upstream: str, port: int) -> None:
    client = UpstreamClient()
    block = encode_headers(
        [(b"content-type", b"application/json"), (b"authorization", b"Bearer sk-bench-upstream")]
    )

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = (await receive())["body"]
        resp = await client.post(upstream + scope["path"], block, body)
        ctype = resp.header(b"content-type") or b"application/json"
        if ctype.startswith(b"text/event-stream"):
            await send({"type": "http.response.start", "status": resp.status,
                        "headers": [(b"content-type", ctype)]})
            async for data, last in resp.batches():
                await send({"type": "http.response.body", "body": data, "more_body": not last})
            return
        data = await resp.read()
        await send({"type": "http.response.start", "status": resp.status,
                    "headers": [(b"content-type", ctype), (b"content-length", b"%d" % len(data))]})
        await send({"type": "http.response.body", "body": data})

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(2048)
    sock.setblocking(False)
    await HttpServer(app).start(sock)
    await asyncio.Event().wait()


if __name__ == "__main__":
    import uvloop

    uvloop.run(serve(sys.argv[1], int(sys.argv[2])))
