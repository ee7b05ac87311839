"""One model call as a line of llm_trajectory.jsonl, made when the writer's batch is written."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy import jsonio
from proxy.trajectory import bodies, iso

if TYPE_CHECKING:
    from proxy.app import Call
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

    __slots__ = ("call", "out", "cost", "duration", "refused")

    def __init__(self, call: Call, out: Outcome, cost: float | None, duration: float, refused: bool):
        self.call, self.out, self.cost, self.duration, self.refused = call, out, cost, duration, refused

    def line(self) -> bytes:
        call, out, dumps = self.call, self.out, jsonio.dumps
        route = call.route
        key = (call.state.spec.attempt_id, call.protocol, route.provider, route.model, call.requested)
        prefix = _PREFIXES.get(key)
        if prefix is None:
            names = ("attempt_id", "protocol", "provider", "model", "requested_model")
            prefix = dumps(dict(zip(names, key, strict=True)))[:-1]
            if len(_PREFIXES) >= 1024:
                _PREFIXES.clear()
            _PREFIXES[key] = prefix
        u = out.usage
        usage = b"null" if u is None else (
            b'{"input_tokens":%d,"output_tokens":%d,"cache_read_tokens":%d,'
            b'"cache_creation_tokens":%d,"total_tokens":%d}'
            % (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_creation_tokens,
               u.total_tokens)
        )
        cost = self.cost
        source = call.price.source if cost is not None and call.price else None
        sse, request, response = bodies(
            out.stream, out.status, call.sent,
            call.strict or call.sent is not call.raw,  # the body as sent upstream: spliced in?
            out.raw, out.parsed is not None,
        )
        return b'%s,"stream":%s,"started_at":"%s","ended_at":"%s","duration_s":%s,"status":%d,' \
            b'"usage":%s,"cost_usd":%s,"price_source":%s,"error_class":%s,"error":%s,' \
            b'"refused":%s,"client_disconnected":%s%s,"request":%s,"response":%s}' % (
                prefix,
                _TRUE_FALSE[out.stream],
                iso(call.started_at).encode(),
                iso(call.started_at + self.duration).encode(),
                dumps(round(self.duration, 6)),
                out.status,
                usage,
                dumps(cost),
                dumps(source),
                dumps(out.error_class),
                dumps(out.error),
                _TRUE_FALSE[self.refused],
                _TRUE_FALSE[out.client_disconnected],
                b"" if sse is None else b',"response_sse":' + dumps(sse),
                request,
                response,
            )
