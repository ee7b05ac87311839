"""ProxyServer: the proxy app served inside the caller's running asyncio loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping

from proxy.app import ProxyApp
from proxy.http11 import HttpServer
from proxy.providers import upstream_key_vars
from proxy.registry import KEY_PREFIX, Attempt, Registry
from proxy.trajectory import TrajectoryWriter
from proxy.upstream import UpstreamClient

log = logging.getLogger(__name__)


class ProxyServer:
    """The model proxy for one `bench run`: start() inside the coordinator's loop."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = env if env is not None else os.environ
        self.registry = Registry(self.env)
        self.writer = TrajectoryWriter(self._secrets)
        self.registry.flush_logs = lambda timeout: None if self.writer.flush(timeout) else None
        self.port = 0
        self.host = ""
        self._server: HttpServer | None = None
        self._sock: socket.socket | None = None
        self._client: UpstreamClient | None = None
        self.app: ProxyApp | None = None

    def _secrets(self) -> list[str]:
        """Exact values to redact: upstream keys, and proxy keys not shaped like ours
        (those, bf-..., are caught by the log's key pattern without a search each)."""
        values = [self.env.get(var, "") for var in upstream_key_vars()]
        return (
            [v for v in values if v]
            + [k for k in self.registry.keys() if not k.startswith(KEY_PREFIX)]
            + self.registry.secrets()
        )

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    async def start(self, host: str = "0.0.0.0", port: int = 0) -> int:
        """Listen and serve as a task of the current loop; returns the bound port."""
        self._client = UpstreamClient()
        app = ProxyApp(self.registry, self._client, self.writer)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.setblocking(False)
        server = HttpServer(app)
        self.app = app
        await server.start(sock)
        self._server, self._sock = server, sock
        self.host, self.port = host, sock.getsockname()[1]
        return self.port

    async def serve_socket(self, sock: socket.socket) -> Callable[[], Awaitable[None]]:
        """Serve a listening socket made inside a sandbox's network namespace as well; the
        returned function stops it."""
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        return await self._server.add_listener(sock)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.close()
        if self._client is not None:
            await self._client.aclose()
        if self._sock is not None:
            self._sock.close()
        self._server = self._sock = self._client = None
        self.writer.close()

    async def flush_logs(self, timeout: float = 5.0) -> None:
        """Wait until every exchange so far is in its llm_trajectory.jsonl."""
        self.writer.flush(timeout)


def run_standalone(
    host: str = "127.0.0.1",
    port: int = 8642,
    keys: list[str] | None = None,
    log_path: str | None = None,
) -> None:
    """`bench proxy`: serve until interrupted; any model is routed by its prefix."""

    async def main() -> None:
        server = ProxyServer()
        await server.start(host, port)
        given = keys or [""]
        for n, wanted in enumerate(given):
            key = server.registry.register(
                Attempt(f"standalone-{n}", None, log_path), key=wanted or None
            )
            print(f"BenchFlow model proxy on {server.url}  key: {key}", flush=True)
        print(
            "Models are routed by prefix (anthropic/, openai/, deepseek/, mock/oracle, ...); "
            "Ctrl-C stops.",
            flush=True,
        )
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    with contextlib.suppress(KeyboardInterrupt):
        try:
            import uvloop
        except ImportError:  # pragma: no cover
            asyncio.run(main())
        else:
            uvloop.run(main())
