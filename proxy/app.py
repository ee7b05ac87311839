"""The proxy's raw ASGI app: auth by per-attempt key, budget check, forward or mock, log."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from proxy import jsonio, mock
from proxy.forward import JSON_CT, PASS_REQUEST, Outcome, forward
from proxy.mock_wire import error_body
from proxy.prices import Price
from proxy.providers import ProviderError, Route
from proxy.registry import AttemptState, Registry, error_class_for
from proxy.trajectory import TrajectoryWriter
from proxy.upstream import UpstreamClient

Scope = dict[str, Any]
API_PATHS = {
    "/v1/chat/completions": "chat", "/chat/completions": "chat",
    "/v1/responses": "responses", "/responses": "responses",
    "/v1/messages": "messages", "/messages": "messages",
}
MODELS_PATHS = ("/v1/models", "/models")


async def _respond(send: Any, status: int, body: bytes,
                   ctype: tuple[bytes, bytes] = JSON_CT) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [ctype, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Any) -> bytes:
    msg = await receive()
    body = msg.get("body", b"")
    if not msg.get("more_body"):
        return body
    parts = [body]
    while msg.get("more_body"):
        msg = await receive()
        parts.append(msg.get("body", b""))
    return b"".join(parts)


def parse_headers(raw: list[tuple[bytes, bytes]]
                  ) -> tuple[str | None, bool, list[tuple[bytes, bytes]]]:
    """(proxy key, looks like an Anthropic client, headers to pass upstream)."""
    key: str | None = None
    anthropic = False
    passed: list[tuple[bytes, bytes]] = []
    for name, value in raw:
        if name == b"authorization":
            if value[:7].lower() == b"bearer ":
                key = key or value[7:].strip().decode("latin-1")
        elif name == b"x-api-key":
            key = value.strip().decode("latin-1")
            anthropic = True
        elif name in PASS_REQUEST:
            passed.append((name, value))
            anthropic = anthropic or name == b"anthropic-version"
    return key, anthropic, passed


def prepare_body(protocol: str, obj: dict[str, Any], raw: bytes, route: Route) -> bytes:
    """The body to send upstream; re-serialised only when something must change."""
    dirty = False
    if route.model and obj.get("model") != route.model:
        obj["model"] = route.model
        dirty = True
    if protocol == "chat" and obj.get("stream"):
        opts = obj.get("stream_options")
        if not (isinstance(opts, dict) and opts.get("include_usage")):
            # Without this a Chat stream reports no usage. The tradeoff: the client now also
            # gets the final usage chunk (choices: []) it did not ask for. Clients of the
            # OpenAI format accept it, and stripping it would mean rewriting the stream.
            obj["stream_options"] = {**(opts if isinstance(opts, dict) else {}),
                                     "include_usage": True}
            dirty = True
    return jsonio.dumps(obj) if dirty else raw


class ProxyApp:
    """ASGI callable. One instance per ProxyServer; state lives in the registry."""

    def __init__(self, registry: Registry, client: UpstreamClient,
                 writer: TrajectoryWriter) -> None:
        self.registry = registry
        self.client = client
        self.writer = writer

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            method, path = scope["method"], scope["path"]
            protocol = API_PATHS.get(path)
            if protocol is not None and method == "POST":
                await self._api(protocol, scope, receive, send)
            elif path in MODELS_PATHS and method == "GET":
                await self._models(scope, send)
            elif path == "/" and method in ("GET", "HEAD"):
                await _respond(send, 200, b"BenchFlow model proxy\n",
                               (b"content-type", b"text/plain"))
            else:
                await _respond(send, 404, jsonio.dumps(error_body(
                    "chat", 404, f"no route for {method} {path}", code="not_found")))
        elif kind == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    async def _models(self, scope: Scope, send: Any) -> None:
        key, anthropic, _ = parse_headers(scope["headers"])
        state = self.registry.lookup(key) if key else None
        fmt = "messages" if anthropic else "chat"
        if state is None:
            await _respond(send, 401, jsonio.dumps(_auth_error(fmt)))
            return
        ids = [state.route.model] if state.route else ["mock/oracle", "mock/echo"]
        # One shape both SDKs accept: OpenAI's fields and Anthropic's side by side.
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "benchflow",
                 "type": "model", "display_name": m, "created_at": "1970-01-01T00:00:00Z"}
                for m in ids]
        await _respond(send, 200, jsonio.dumps({"object": "list", "data": data,
                                                "has_more": False, "first_id": ids[0],
                                                "last_id": ids[-1]}))

    async def _api(self, protocol: str, scope: Scope, receive: Any, send: Any) -> None:
        key, _, passed = parse_headers(scope["headers"])
        state = self.registry.lookup(key) if key else None
        raw = await _read_body(receive)
        if state is None:
            await _respond(send, 401, jsonio.dumps(_auth_error(protocol)))
            return
        try:
            obj = jsonio.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
        except ValueError:
            await _respond(send, 400, jsonio.dumps(error_body(
                protocol, 400, "the request body is not a JSON object")))
            return
        requested = str(obj.get("model") or "")
        try:
            route, price = self.registry.route_for(state, requested)
        except ProviderError as exc:
            await _respond(send, 400, jsonio.dumps(error_body(
                protocol, 400, f"model_not_served: {exc}", code="model_not_served")))
            return
        if not route.serves(protocol):
            served = ", ".join(sorted(route.protocols)) or "nothing"
            await _respond(send, 400, jsonio.dumps(error_body(
                protocol, 400, f"protocol_not_served: {route.requested} serves {served}, "
                f"not {protocol}", code="protocol_not_served")))
            return
        started_at = time.time()
        t0 = time.perf_counter()
        refusal = self.registry.begin_call(state)
        if refusal is not None:
            body = jsonio.dumps(error_body(protocol, 400, refusal.message,
                                           code="trial_budget_spent"))
            await _respond(send, 400, body)
            self._log(state, protocol, route, requested, obj, started_at, t0,
                      Outcome(400, raw=body, error="trial_budget_spent"), None, None,
                      refused=True)
            return
        out: Outcome | None = None
        try:
            stream = bool(obj.get("stream"))
            if route.is_mock:
                out = await self._mock(protocol, obj, raw, state, route, stream, send)
            else:
                body = prepare_body(protocol, obj, raw, route)
                url = route.endpoints[protocol]
                if scope.get("query_string"):
                    url += "?" + scope["query_string"].decode("latin-1")
                out = await forward(self.client, route, protocol, url, body, passed, send,
                                    receive)
                if not out.headers_sent:
                    msg = jsonio.dumps(error_body(protocol, out.status, out.error or ""))
                    await _respond(send, out.status, msg)
                    out.raw = msg
        finally:
            if out is None:
                out = Outcome(500, error_class="proxy_error", error="the proxy failed this call")
            cost = self.registry.end_call(state, out.usage, price, time.perf_counter() - t0,
                                          out.status, out.error_class, out.error)
            self._log(state, protocol, route, requested, obj, started_at, t0, out, cost, price)

    async def _mock(self, protocol: str, obj: dict[str, Any], raw: bytes, state: AttemptState,
                    route: Route, stream: bool, send: Any) -> Outcome:
        kind = route.model.split(":", 1)[0]
        rendered, usage = mock.respond(protocol, obj, len(raw), state, kind, stream)
        status = rendered.status
        out = Outcome(status, usage=usage, raw=b"".join(rendered.frames),
                      stream=stream and status < 300, headers_sent=True)
        if status >= 300:
            out.error_class = error_class_for(status)
            out.error = f"HTTP {status}: mock provider error"
        if not out.stream:
            await _respond(send, status, out.raw, (b"content-type", rendered.content_type))
            return out
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", rendered.content_type),
                                (b"cache-control", b"no-cache")]})
        for frame in rendered.frames:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return out

    def _log(self, state: AttemptState, protocol: str, route: Route, requested: str,
             request: dict[str, Any], started_at: float, t0: float, out: Outcome,
             cost: float | None, price: Price | None, refused: bool = False) -> None:
        path: Path | None = state.log_path
        if path is None:
            return
        duration = time.perf_counter() - t0
        self.writer.submit(path, {
            "attempt_id": state.spec.attempt_id,
            "protocol": protocol,
            "provider": route.provider,
            "model": route.model,
            "requested_model": requested,
            "stream": out.stream,
            "started_at": started_at,
            "ended_at": started_at + duration,
            "duration_s": round(duration, 6),
            "status": out.status,
            "usage": out.usage.as_dict() if out.usage else None,
            "cost_usd": cost,
            "price_source": price.source if cost is not None and price else None,
            "error_class": out.error_class,
            "error": out.error,
            "refused": refused,
            "client_disconnected": out.client_disconnected,
            "request": request,
            "response_raw": out.raw,
        })


def _auth_error(protocol: str) -> dict[str, Any]:
    return error_body(protocol, 401, "invalid proxy key: use the key this trial was given",
                      code="invalid_api_key")
