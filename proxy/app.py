"""The proxy's raw ASGI app: auth by per-attempt key, budget check, forward or mock, log."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from proxy import fastlane, jsonio, mock
from proxy.call import Call
from proxy.exchange import Exchange
from proxy.fastlane import Admitted
from proxy.forward import JSON_CT, PASS_REQUEST, Outcome, forward, prepare_body
from proxy.mock_script import load_script
from proxy.mock_wire import error_body
from proxy.providers import ProviderError
from proxy.registry import Registry, error_class_for
from proxy.trajectory import TrajectoryWriter, redact
from proxy.upstream import UpstreamClient

Scope = dict[str, Any]
API_PATHS = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/responses": "responses",
    "/responses": "responses",
    "/v1/messages": "messages",
    "/messages": "messages",
}
MODELS_PATHS = ("/v1/models", "/models")
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"


async def _respond(
    send: Any, status: int, body: bytes, ctype: tuple[bytes, bytes] = JSON_CT
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [ctype, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Any) -> bytes:
    msg = await receive()
    body: bytes = msg.get("body", b"")
    if not msg.get("more_body"):
        return body
    parts = [body]
    while msg.get("more_body"):
        msg = await receive()
        parts.append(msg.get("body", b""))
    return b"".join(parts)


def parse_headers(
    raw: list[tuple[bytes, bytes]],
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


class ProxyApp:
    """ASGI callable. One instance per ProxyServer; state lives in the registry."""

    def __init__(
        self, registry: Registry, client: UpstreamClient, writer: TrajectoryWriter
    ) -> None:
        self.registry = registry
        self.client = client
        self.writer = writer
        self.fast_lane = True  # off: every call is an ASGI cycle (tests compare the two)
        self.fast_calls = 0  # calls the fast lane served

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            method, path = scope["method"], scope["path"]
            protocol = API_PATHS.get(path)
            if protocol is not None and method == "POST":
                await self._api(protocol, scope, receive, send)
            elif path == COUNT_TOKENS_PATH and method == "POST":
                await self._count_tokens(scope, receive, send)
            elif path in MODELS_PATHS and method == "GET":
                await self._models(scope, send)
            elif path == "/" and method in ("GET", "HEAD"):
                await _respond(
                    send, 200, b"BenchFlow model proxy\n", (b"content-type", b"text/plain")
                )
            else:  # in the client's own error format, so its SDK can say what went wrong
                fmt = "messages" if parse_headers(scope["headers"])[1] else "chat"
                await _respond(
                    send,
                    404,
                    jsonio.dumps(
                        error_body(fmt, 404, f"no route for {method} {path}", code="not_found")
                    ),
                )
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
        data = [
            {
                "id": m,
                "object": "model",
                "created": 0,
                "owned_by": "benchflow",
                "type": "model",
                "display_name": m,
                "created_at": "1970-01-01T00:00:00Z",
            }
            for m in ids
        ]
        await _respond(
            send,
            200,
            jsonio.dumps(
                {
                    "object": "list",
                    "data": data,
                    "has_more": False,
                    "first_id": ids[0],
                    "last_id": ids[-1],
                }
            ),
        )

    async def _count_tokens(self, scope: Scope, receive: Any, send: Any) -> None:
        """Anthropic's token counting: not a model call, so neither a turn nor refused."""
        key, _, passed = parse_headers(scope["headers"])
        state = self.registry.lookup(key) if key else None
        raw = await _read_body(receive)
        if state is None:
            await _respond(send, 401, jsonio.dumps(_auth_error("messages")))
            return
        try:
            obj = jsonio.loads(raw)
            route, _ = self.registry.route_for(state, str(obj.get("model") or ""))
        except (ValueError, AttributeError, ProviderError) as exc:
            await _respond(send, 400, jsonio.dumps(error_body("messages", 400, str(exc))))
            return
        if route.is_mock or not route.serves("messages"):
            await _respond(send, 200, jsonio.dumps({"input_tokens": len(raw) // 4}))
            return
        url = route.endpoints["messages"] + "/count_tokens"
        out = await forward(
            self.client,
            route,
            "messages",
            url,
            prepare_body("messages", obj, raw, route),
            passed,
            send,
            receive,
            self.writer.secrets,
        )
        if not out.headers_sent:
            await _respond(
                send, out.status, jsonio.dumps(error_body("messages", out.status, out.error or ""))
            )

    def admit(
        self, protocol: str, headers: list[tuple[bytes, bytes]], raw: bytes
    ) -> Call | tuple[int, bytes]:
        """Authorise, parse and route a call: a Call, or the error to answer with."""
        key, _, passed = parse_headers(headers)
        state = self.registry.lookup(key) if key else None
        if state is None:
            return 401, jsonio.dumps(_auth_error(protocol))
        try:
            obj, strict = jsonio.parse(raw)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
        except ValueError:
            return 400, jsonio.dumps(
                error_body(protocol, 400, "the request body is not a JSON object")
            )
        requested = str(obj.get("model") or "")
        try:
            route, price = self.registry.route_for(state, requested)
        except ProviderError as exc:
            return 400, jsonio.dumps(
                error_body(protocol, 400, f"model_not_served: {exc}", code="model_not_served")
            )
        if not route.serves(protocol):
            served = ", ".join(sorted(route.protocols)) or "nothing"
            return 400, jsonio.dumps(
                error_body(
                    protocol,
                    400,
                    f"protocol_not_served: {route.requested} serves {served}, not {protocol}",
                    code="protocol_not_served",
                )
            )
        call = Call(protocol, state, route, price, obj, raw, requested, passed)
        call.strict = strict
        return call

    def fast(self, conn: Any, req: Any) -> bool:
        """Serve a plain forwarded call by callbacks alone (proxy/fastlane.py); False, with
        what was worked out in req.ctx, for everything else: _api serves it."""
        return fastlane.serve(self, conn, req)

    async def _api(self, protocol: str, scope: Scope, receive: Any, send: Any) -> None:
        raw = await _read_body(receive)
        pre: Admitted | None = scope.get("proxy.admitted")
        call = pre.call if pre is not None else self.admit(protocol, scope["headers"], raw)
        if not isinstance(call, Call):
            await _respond(send, *call)
            return
        if pre is not None and pre.begun:
            refusal = pre.refusal
        else:
            refusal = self.registry.begin_call(call.state)
        if refusal is not None:
            body = jsonio.dumps(
                error_body(protocol, 400, refusal.message, code="trial_budget_spent")
            )
            await _respond(send, 400, body)
            self._log(call, Outcome(400, raw=body, error="trial_budget_spent"), None, refused=True)
            return
        out: Outcome | None = None
        try:
            if call.route.is_mock:
                out = await self._mock(call, send)
            else:
                out = await self._forward(call, scope, receive, send)
        finally:
            self.finish(call, out)

    def finish(self, call: Call, out: Outcome | None) -> None:
        """Count a forwarded call's outcome (None: the proxy failed it) and log it."""
        if out is None:
            out = Outcome(500, error_class="proxy_error", error="the proxy failed this call")
        elif out.error:  # a provider's words, on their way to result.json and the console
            out.error = redact(out.error.encode(), self.writer.secrets()).decode("utf-8", "replace")
        cost = self.registry.end_call(
            call.state,
            out.usage,
            call.price,
            time.perf_counter() - call.t0,
            out.status,
            out.error_class,
            out.error,
        )
        self._log(call, out, cost)

    async def _forward(self, call: Call, scope: Scope, receive: Any, send: Any) -> Outcome:
        if call.sent is call.raw:  # else the fast lane prepared it (and changed call.obj)
            call.sent = prepare_body(call.protocol, call.obj, call.raw, call.route)
        url = call.route.endpoints[call.protocol]
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        out = await forward(
            self.client,
            call.route,
            call.protocol,
            url,
            call.sent,
            call.passed,
            send,
            receive,
            self.writer.secrets,
        )
        if not out.headers_sent:
            out.raw = jsonio.dumps(error_body(call.protocol, out.status, out.error or ""))
            await _respond(send, out.status, out.raw)
        return out

    async def _mock(self, call: Call, send: Any) -> Outcome:
        kind, _, arg = call.route.model.partition(":")
        if kind == "script" and call.state.route is None and call.state.script_file != arg:
            # a key without a model of its own (bench proxy): the script the request names, from
            # its first reply (again from the first when a request names another script)
            try:
                call.state.spec.script_replies = load_script(arg)
            except Exception as exc:  # noqa: BLE001 - a missing or malformed file: the client's to fix
                body = jsonio.dumps(error_body(call.protocol, 400, f"mock/script: {exc}"))
                await _respond(send, 400, body)
                return Outcome(
                    400,
                    raw=body,
                    error_class="provider_rejected",
                    error=f"mock/script: {exc}",
                    headers_sent=True,
                )
            call.state.script_file, call.state.script_index = arg, 0
        stream = bool(call.obj.get("stream"))
        rendered, usage = mock.respond(
            call.protocol, call.obj, len(call.raw), call.state, kind, stream
        )
        status = rendered.status
        out = Outcome(
            status,
            usage=usage,
            raw=b"".join(rendered.frames),
            stream=stream and status < 300,
            headers_sent=True,
        )
        if status >= 300:
            out.error_class = error_class_for(status)
            out.error = f"HTTP {status}: mock provider error"
        if not out.stream:
            await _respond(send, status, out.raw, (b"content-type", rendered.content_type))
            return out
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", rendered.content_type),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        for frame in rendered.frames:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return out

    def _log(self, call: Call, out: Outcome, cost: float | None, refused: bool = False) -> None:
        path: Path | None = call.state.log_path
        if path is not None:
            self.writer.submit(
                path, Exchange(call, out, cost, time.perf_counter() - call.t0, refused)
            )


def _auth_error(protocol: str) -> dict[str, Any]:
    return error_body(
        protocol, 401, "invalid proxy key: use the key this trial was given", code="invalid_api_key"
    )
