"""One model call as a line of llm_trajectory.jsonl, made when the writer's batch is written."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy import jsonio
from proxy.trajectory import bodies, iso

if TYPE_CHECKING:
    from proxy.call import Call
    from proxy.forward import Outcome

_PREFIXES: dict[tuple[str, str, str, str, str], bytes] = {}
_TRUE_FALSE = (b"false", b"true")


class Exchange:
    """One call for llm_trajectory.jsonl, kept as it is until its batch is written.

    The line's keys, in order: attempt_id, protocol, provider, model, requested_model
    (serialised once per attempt and model asked for), stream, started_at, ended_at,
    duration_s, status, usage, cost_usd, price_source, error_class, error, refused,
    client_disconnected, response_sse (a stream), request, response (as record_line
    splices them in)."""

    __slots__ = (
        "key",
        "started_at",
        "duration",
        "cost",
        "price_source",
        "refused",
        "sent",
        "request_json",
        "stream",
        "status",
        "usage",
        "raw",
        "response_json",
        "error_class",
        "error",
        "client_disconnected",
    )

    def __init__(
        self, call: Call, out: Outcome, cost: float | None, duration: float, refused: bool
    ):
        # What the line needs, and not the call or its outcome: they hold the parsed request and
        # answer, and keeping those trees alive until the batch is written costs the garbage
        # collector more than this copy does.
        route = call.route
        self.key = (
            call.state.spec.attempt_id,
            call.protocol,
            route.provider,
            route.model,
            call.requested,
        )
        self.started_at, self.duration, self.cost, self.refused = (
            call.started_at,
            duration,
            cost,
            refused,
        )
        self.price_source = call.price.source if cost is not None and call.price else None
        self.sent = call.sent  # the body as sent upstream: spliced in when strict JSON
        self.request_json = call.strict or call.sent is not call.raw
        self.stream, self.status, self.usage, self.raw = out.stream, out.status, out.usage, out.raw
        self.response_json = out.parsed is not None
        self.error_class, self.error = out.error_class, out.error
        self.client_disconnected = out.client_disconnected

    def line(self) -> bytes:
        dumps = jsonio.dumps
        key = self.key
        prefix = _PREFIXES.get(key)
        if prefix is None:
            names = ("attempt_id", "protocol", "provider", "model", "requested_model")
            prefix = dumps(dict(zip(names, key, strict=True)))[:-1]
            if len(_PREFIXES) >= 1024:
                _PREFIXES.clear()
            _PREFIXES[key] = prefix
        u = self.usage
        usage = (
            b"null"
            if u is None
            else (
                b'{"input_tokens":%d,"output_tokens":%d,"cache_read_tokens":%d,'
                b'"cache_creation_tokens":%d,"total_tokens":%d}'
                % (
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_read_tokens,
                    u.cache_creation_tokens,
                    u.total_tokens,
                )
            )
        )
        sse, request, response = bodies(
            self.stream, self.status, self.sent, self.request_json, self.raw, self.response_json
        )
        return (
            b'%s,"stream":%s,"started_at":"%s","ended_at":"%s","duration_s":%s,"status":%d,'
            b'"usage":%s,"cost_usd":%s,"price_source":%s,"error_class":%s,"error":%s,'
            b'"refused":%s,"client_disconnected":%s%s,"request":%s,"response":%s}'
            % (
                prefix,
                _TRUE_FALSE[self.stream],
                iso(self.started_at).encode(),
                iso(self.started_at + self.duration).encode(),
                dumps(round(self.duration, 6)),
                self.status,
                usage,
                dumps(self.cost),
                dumps(self.price_source),
                dumps(self.error_class),
                dumps(self.error),
                _TRUE_FALSE[self.refused],
                _TRUE_FALSE[self.client_disconnected],
                b"" if sse is None else b',"response_sse":' + dumps(sse),
                request,
                response,
            )
        )
