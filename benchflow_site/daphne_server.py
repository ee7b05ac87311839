"""daphne, with two things a shared dashboard needs that daphne lacks.

- Backpressure. daphne writes every body message into Twisted's transport at once, so a client
  that reads a 150 MB file slowly made the server hold all of it. Here a streamed response
  registers a push producer on its request: when the transport's buffer fills, Twisted pauses it,
  and the app's next `send` waits until the client has taken what was sent.
- Websocket handshakes refused with a status of the app's choosing (ASGI's websocket denial
  response, `websocket.http.response.*`): daphne could only answer 403, or 500 when the app
  raised, so an unknown websocket path is now a 404.
"""

from __future__ import annotations

import asyncio
import http
from typing import Any

from autobahn.twisted.websocket import ConnectionDeny
from daphne.http_protocol import WebRequest
from daphne.server import Server
from daphne.ws_protocol import WebSocketProtocol

DENIAL = "websocket.http.response"


class _Flow:
    """Twisted's IPushProducer for one response: paused while the transport's buffer is full."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.ready.set()

    def pauseProducing(self) -> None:  # noqa: N802 - Twisted's interface
        self.ready.clear()

    def resumeProducing(self) -> None:  # noqa: N802
        self.ready.set()

    def stopProducing(self) -> None:  # noqa: N802 - the connection is gone: nothing waits
        self.ready.set()


class DenyingWebSocketProtocol(WebSocketProtocol):
    """daphne's websocket protocol, which also takes a denial response before the handshake."""

    denial_status = 403

    def handle_reply(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind in (f"{DENIAL}.start", f"{DENIAL}.body") and self.state == self.STATE_CONNECTING:
            if kind == f"{DENIAL}.start":
                self.denial_status = int(message.get("status", 403))
            elif not message.get("more_body"):
                phrase = http.HTTPStatus(self.denial_status).phrase
                self.handshake_deferred.errback(ConnectionDeny(self.denial_status, phrase))
            return
        super().handle_reply(message)


class BenchServer(Server):
    """daphne's Server with backpressure on response bodies and websocket denial responses."""

    @property
    def ws_factory(self) -> Any:
        return self._ws_factory

    @ws_factory.setter
    def ws_factory(self, factory: Any) -> None:
        factory.protocol = DenyingWebSocketProtocol  # daphne's run() makes the factory
        self._ws_factory = factory

    def create_application(self, protocol: Any, scope: dict[str, Any]) -> Any:
        if scope.get("type") == "websocket":
            scope["extensions"] = {**(scope.get("extensions") or {}), DENIAL: {}}
        return super().create_application(protocol, scope)

    async def handle_reply(self, protocol: Any, message: dict[str, Any]) -> None:
        if not isinstance(protocol, WebRequest) or message.get("type") != "http.response.body":
            await super().handle_reply(protocol, message)
            return
        flow: _Flow | None = getattr(protocol, "_bench_flow", None)
        more = bool(message.get("more_body"))
        if more and flow is None and not protocol.finished and protocol.channel is not None:
            flow = protocol._bench_flow = _Flow()
            protocol.registerProducer(flow, True)
        if not more and flow is not None and protocol.channel is not None:
            protocol.unregisterProducer()
        await super().handle_reply(protocol, message)
        if more and flow is not None and not self._gone(protocol):
            await flow.ready.wait()

    def _gone(self, protocol: Any) -> bool:
        info = self.connections.get(protocol)
        return bool(protocol.finished) or info is None or "disconnected" in info
