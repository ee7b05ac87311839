"""Forward one call upstream: bytes pass through unchanged while usage is parsed on the side."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy import jsonio
from proxy.providers import Route
from proxy.registry import error_class_for
from proxy.trajectory import REDACTED
from proxy.upstream import UpstreamClient, UpstreamError, encode_headers
from proxy.usage import StreamTap, Usage, error_text, usage_from_body

Send = Any
Receive = Any

# Request headers worth passing on (API versions and betas); auth is never passed on.
PASS_REQUEST = frozenset(
    {
        b"anthropic-version",
        b"anthropic-beta",
        b"openai-beta",
        b"openai-organization",
        b"http-referer",
        b"x-title",
    }
)
# Response headers the proxy must not copy: hop-by-hop, framing, and ours to set.
DROP_RESPONSE = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"content-length",
        b"content-encoding",
        b"server",
        b"date",
        b"set-cookie",
        b"alt-svc",
    }
)
JSON_CT = (b"content-type", b"application/json")


@dataclass(slots=True)
class Outcome:
    """What came back: status, usage, error class and the raw body for the log."""

    status: int
    usage: Usage | None = None
    error_class: str | None = None
    error: str | None = None
    raw: bytes = b""
    stream: bool = False
    client_disconnected: bool = False
    parsed: Any = None  # the JSON body when it parsed: the log may splice the raw bytes in
    headers_sent: bool = field(default=False, repr=False)


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
            obj["stream_options"] = {
                **(opts if isinstance(opts, dict) else {}),
                "include_usage": True,
            }
            dirty = True
    return jsonio.dumps(obj) if dirty else raw


_BLOCKS: dict[tuple[str, str, str, tuple[tuple[bytes, bytes], ...]], bytes] = {}


def upstream_header_block(route: Route, protocol: str, passed: list[tuple[bytes, bytes]]) -> bytes:
    """upstream_headers() encoded, kept per key, protocol and passed headers: an agent sends
    the same few headers on every call, so the block is built once."""
    key = (route.api_key, route.auth.get(protocol, ""), protocol, tuple(passed))
    block = _BLOCKS.get(key)
    if block is None:
        block = encode_headers(upstream_headers(route, protocol, passed))
        if len(_BLOCKS) >= 1024:
            _BLOCKS.clear()
        _BLOCKS[key] = block
    return block


def upstream_headers(
    route: Route, protocol: str, passed: list[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes]]:
    key = route.api_key.encode()
    if route.auth.get(protocol) == "x-api-key":
        auth = (b"x-api-key", key)
    else:
        auth = (b"authorization", b"Bearer " + key)
    headers = [JSON_CT, auth, (b"accept-encoding", b"identity"), *passed]
    if protocol == "messages" and not any(k == b"anthropic-version" for k, _ in passed):
        headers.append((b"anthropic-version", b"2023-06-01"))
    return headers


async def _watch_disconnect(receive: Receive, flag: list[bool]) -> None:
    # The server also answers "http.disconnect" once the response is complete; the relay
    # reads the flag only before its sends, so only a real disconnect counts.
    msg = await receive()
    if msg["type"] == "http.disconnect":
        flag.append(True)


async def forward(
    client: UpstreamClient,
    route: Route,
    protocol: str,
    url: str,
    body: bytes,
    passed: list[tuple[bytes, bytes]],
    send: Send,
    receive: Receive,
    secrets: Callable[[], list[bytes]] = list,
) -> Outcome:
    """POST upstream and relay the answer; a client gone mid-stream does not stop the read,
    so the call is still counted in full (the provider bills it in full).

    An error body is the one answer not passed on byte for byte: a provider may quote the
    key it was sent, and that key must not reach the sandbox, so `secrets()` are redacted
    from it first.
    """
    try:
        resp = await client.post(url, upstream_header_block(route, protocol, passed), body)
    except UpstreamError as exc:
        return Outcome(502, error_class="infra_failure", error=f"upstream unreachable: {exc}")
    status = resp.status
    headers = response_headers(resp.headers)
    ctype = resp.header(b"content-type") or b""
    if status < 400 and ctype.startswith(b"text/event-stream"):
        return await _relay_stream(resp, protocol, status, headers, send, receive)
    try:
        data = await resp.read()
    except UpstreamError as exc:
        return Outcome(502, error_class="infra_failure", error=f"upstream read failed: {exc}")
    if status >= 400:
        data = redact_error_body(data, secrets())
    headers.append((b"content-length", str(len(data)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
    return body_outcome(protocol, status, data)


def response_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers the client gets (framing and hop-by-hop ones are ours)."""
    return [(k, v) for k, v in headers if k.lower() not in DROP_RESPONSE]


def redact_error_body(data: bytes, secrets: list[bytes]) -> bytes:
    """An error body with the secrets it quotes replaced: a provider may quote the key it got."""
    for secret in secrets:
        if data.find(secret) >= 0:
            data = data.replace(secret, REDACTED)
    return data


def body_outcome(protocol: str, status: int, data: bytes) -> Outcome:
    """What a whole (non-streamed) answer, already sent to the client, says: usage or error."""
    out = Outcome(status, raw=data, headers_sent=True)
    parsed: Any = None
    if data[:1] == b"{":
        try:
            parsed, strict = jsonio.parse(data)
            if strict:  # else the log re-serialises it rather than splice it in
                out.parsed = parsed
        except ValueError:
            parsed = None
    if status < 300:
        out.usage = usage_from_body(protocol, parsed)
    else:
        out.error_class = error_class_for(status)
        out.error = f"HTTP {status}: {error_text(parsed) or data[:300].decode('utf-8', 'replace')}"
    return out


async def _relay_stream(
    resp: Any,
    protocol: str,
    status: int,
    headers: list[tuple[bytes, bytes]],
    send: Send,
    receive: Receive,
) -> Outcome:
    gone: list[bool] = []
    watcher = asyncio.ensure_future(_watch_disconnect(receive, gone))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    tap = StreamTap(protocol)
    out = Outcome(status, stream=True, headers_sent=True)
    last = False
    batches = resp.batches()
    try:
        async for data, last in batches:
            if gone:
                out.client_disconnected = True
            else:
                await send({"type": "http.response.body", "body": data, "more_body": not last})
            tap.feed(data)
    except UpstreamError as exc:
        out.error_class = "api_error"
        out.error = f"upstream stream broke: {exc}"
    finally:
        await batches.aclose()  # releases (or closes) the upstream connection at once
    if not last:
        out.client_disconnected = bool(gone)
        if out.error is None:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        # else: no final chunk. The response stays incomplete, so the server closes the
        # connection and the client sees a broken stream, not a clean end with a tool
        # call cut short.
    if not watcher.done():
        watcher.cancel()
    tap.close()
    out.raw = tap.raw()
    out.usage = tap.usage()
    if tap.error and out.error is None:
        out.error_class, out.error = "api_error", f"stream error event: {tap.error}"
    return out
