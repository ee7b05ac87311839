"""Token usage from provider responses, normalised as BenchFlow counts it (reference 6.2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy import jsonio
from proxy.sse import Frame, parse_frame

PROTOCOLS = ("chat", "responses", "messages")


@dataclass(slots=True)
class Usage:
    """One call's tokens; input includes cached tokens, cache counts are subsets of input."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    total_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_creation_tokens": self.cache_creation_tokens,
            "total_tokens": self.total_tokens,
        }


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def usage_from_openai(u: dict[str, Any]) -> Usage:
    """Chat Completions or Responses usage: cached tokens are already inside the prompt count."""
    if "prompt_tokens" in u or "completion_tokens" in u:
        inp, out = _int(u.get("prompt_tokens")), _int(u.get("completion_tokens"))
        details = u.get("prompt_tokens_details") or {}
    else:
        inp, out = _int(u.get("input_tokens")), _int(u.get("output_tokens"))
        details = u.get("input_tokens_details") or {}
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    if not cached:
        cached = _int(u.get("prompt_cache_hit_tokens"))  # DeepSeek's own field, also a subset
    total = _int(u.get("total_tokens")) or inp + out
    return Usage(inp, out, cached, 0, total)


def usage_from_anthropic(u: dict[str, Any]) -> Usage:
    """Messages usage: cache reads and writes are reported beside input_tokens, so add them."""
    read = _int(u.get("cache_read_input_tokens"))
    created = _int(u.get("cache_creation_input_tokens"))
    inp = _int(u.get("input_tokens")) + read + created
    out = _int(u.get("output_tokens"))
    return Usage(inp, out, read, created, inp + out)


def usage_from_body(protocol: str, body: Any) -> Usage | None:
    """Usage of a whole (non-streamed) response body, parsed JSON; None when it has none."""
    if not isinstance(body, dict):
        return None
    u = body.get("usage")
    if not isinstance(u, dict):
        return None
    return usage_from_anthropic(u) if protocol == "messages" else usage_from_openai(u)


def error_text(body: Any) -> str | None:
    """The message of an error body in OpenAI's or Anthropic's format."""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            return str(err.get("message") or err.get("type") or err)
        if isinstance(err, str):
            return err
    return None


_RESPONSES_DONE = frozenset({"response.completed", "response.incomplete", "response.failed"})


# Frames worth parsing for usage or errors, by protocol; the rest are skipped unparsed.
_MARKERS = {
    "chat": (b'"usage"', b'"error"'),
    "messages": (b"message_start", b"message_delta", b"error"),
    "responses": (b"response.completed", b"response.incomplete", b"response.failed", b"error"),
}


class StreamTap:
    """Collects an SSE response as it passes; at the end finds its usage and any error.

    Usage is needed only once the call ends, so the stream is split once, at close(),
    and only frames that can carry usage or an error are parsed.
    """

    __slots__ = ("protocol", "_chunks", "_usage", "_anthropic", "error")

    _chunks: list[bytes]

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self._chunks: list[bytes] = []
        self._usage: dict[str, Any] | None = None
        self._anthropic: dict[str, Any] = {}
        self.error: str | None = None

    def feed(self, chunk: bytes) -> None:
        self._chunks.append(chunk)

    def raw(self) -> bytes:
        if len(self._chunks) != 1:
            self._chunks = [b"".join(self._chunks)]
        return self._chunks[0]

    def close(self) -> None:
        raw = self.raw()
        if raw.find(b"\r") >= 0:  # find, not `in`: see trajectory._embeddable
            raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        markers = _MARKERS[self.protocol]
        for part in raw.split(b"\n\n"):
            if any(part.find(m) >= 0 for m in markers):
                frame = parse_frame(part.strip(b"\n"))
                if frame is not None:
                    self._frame(frame)

    def _frame(self, frame: Frame) -> None:
        data = frame.data
        if data == b"[DONE]" or not data or data[:1] != b"{":
            return
        try:
            obj = jsonio.loads(data)
        except ValueError:
            return
        if isinstance(obj, dict):
            self._object(obj)

    def _object(self, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if kind == "error" or (self.protocol == "chat" and obj.get("error")):
            self.error = error_text(obj) or str(obj.get("message") or "stream error event")
            return
        if self.protocol == "chat":
            u = obj.get("usage")
            if isinstance(u, dict):
                self._usage = u
        elif self.protocol == "messages":
            if kind == "message_start":
                u = (obj.get("message") or {}).get("usage")
            elif kind == "message_delta":
                u = obj.get("usage")
            else:
                return
            if isinstance(u, dict):
                # message_delta carries cumulative counts; a field it repeats replaces the start's.
                self._anthropic.update({k: v for k, v in u.items() if v is not None})
        elif kind in _RESPONSES_DONE:
            resp = obj.get("response") or {}
            u = resp.get("usage")
            if isinstance(u, dict):
                self._usage = u
            if kind == "response.failed":
                self.error = error_text(resp) or "response.failed"

    def usage(self) -> Usage | None:
        if self.protocol == "messages":
            return usage_from_anthropic(self._anthropic) if self._anthropic else None
        return usage_from_openai(self._usage) if self._usage else None
