"""An attempt's model calls (trajectory/llm_trajectory.jsonl) as a readable transcript, a page at
a time: the messages each call added, the model's reply, its tool calls, tokens and time.

A line offset table (one pass over the file, kept while the file is unchanged) lets any page of
a trial with thousands of calls open without parsing the calls before it. The three wire formats
the proxy speaks (Chat Completions, Responses, Messages), streamed or not, are read here.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PAGE = 20  # calls a page
TEXT_MAX = 20_000  # characters of one message shown; the raw line is a link away

_offsets: OrderedDict[tuple[str, int, int], list[int]] = OrderedDict()
_lock = threading.Lock()


def line_offsets(path: Path) -> list[int]:
    """The byte offset of each line's start (cached per path, size and mtime)."""
    info = os.stat(path)
    key = (os.fspath(path), info.st_size, info.st_mtime_ns)
    with _lock:
        if key in _offsets:
            _offsets.move_to_end(key)
            return _offsets[key]
    offsets = [0] if info.st_size else []
    position = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            start = 0
            while (i := chunk.find(b"\n", start)) != -1:
                if position + i + 1 < info.st_size:
                    offsets.append(position + i + 1)
                start = i + 1
            position += len(chunk)
    with _lock:
        _offsets[key] = offsets
        while len(_offsets) > 64:
            _offsets.popitem(last=False)
    return offsets


@dataclass
class Message:
    role: str  # system, user, assistant, tool
    text: str = ""
    tool_calls: list[dict[str, str]] = field(default_factory=list)  # name, arguments, id
    tool_call_id: str = ""
    cut: bool = False


@dataclass
class Call:
    number: int  # 1-based, the line's number
    model: str = ""
    protocol: str = ""
    started_at: str = ""
    duration_s: float | None = None
    status: int | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    cost_usd: float | None = None
    error: str = ""
    refused: bool = False
    new_messages: list[Message] = field(default_factory=list)  # added since the previous call
    reply: list[Message] = field(default_factory=list)
    unreadable: str = ""


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text(v) for v in value if v is not None)
    if isinstance(value, dict):
        for key in ("text", "content", "output", "input_text", "output_text"):
            if key in value:
                return _text(value[key])
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else str(value)


def _cut(message: Message) -> Message:
    if len(message.text) > TEXT_MAX:
        message.text, message.cut = message.text[:TEXT_MAX], True
    return message


def _blocks(role: str, content: Any) -> list[Message]:
    """Anthropic content blocks (text, tool_use, tool_result) or plain text, as messages."""
    if not isinstance(content, list):
        return [Message(role, _text(content))]
    out: list[Message] = []
    texts: list[str] = []
    calls: list[dict[str, str]] = []
    for block in content:
        if not isinstance(block, dict):
            texts.append(_text(block))
            continue
        kind = block.get("type")
        if kind == "tool_use":
            calls.append(
                {
                    "name": str(block.get("name", "")),
                    "arguments": json.dumps(block.get("input"), ensure_ascii=False),
                    "id": str(block.get("id", "")),
                }
            )
        elif kind == "tool_result":
            out.append(
                Message("tool", _text(block.get("content")), [], str(block.get("tool_use_id", "")))
            )
        elif kind in ("thinking", "redacted_thinking"):
            continue
        else:
            texts.append(_text(block))
    if texts or calls:
        out.insert(0, Message(role, "\n".join(t for t in texts if t), calls))
    return out


def _chat_message(m: dict[str, Any]) -> list[Message]:
    role = str(m.get("role") or m.get("type") or "?")
    if m.get("type") == "function_call":  # Responses input item
        return [
            Message(
                "assistant",
                "",
                [
                    {
                        "name": str(m.get("name", "")),
                        "arguments": str(m.get("arguments", "")),
                        "id": str(m.get("call_id", "")),
                    }
                ],
            )
        ]
    if m.get("type") == "function_call_output":
        return [Message("tool", _text(m.get("output")), [], str(m.get("call_id", "")))]
    if isinstance(m.get("content"), list) and any(
        isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result") for b in m["content"]
    ):
        return _blocks(role, m["content"])
    calls = [
        {
            "name": str((c.get("function") or {}).get("name", "")),
            "arguments": str((c.get("function") or {}).get("arguments", "")),
            "id": str(c.get("id", "")),
        }
        for c in m.get("tool_calls") or ()
        if isinstance(c, dict)
    ]
    return [Message(role, _text(m.get("content")), calls, str(m.get("tool_call_id") or ""))]


def request_messages(request: Any) -> list[Message]:
    """The conversation a call sent, in order, whatever its wire format."""
    if not isinstance(request, dict):
        return [Message("user", _text(request))] if request else []
    out: list[Message] = []
    system = request.get("system") or request.get("instructions")
    if system:
        out.append(Message("system", _text(system)))
    items = request.get("messages")
    if items is None:
        items = request.get("input")
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
    for m in items or ():
        if isinstance(m, dict):
            out += _chat_message(m)
    return out


def _sse_data(raw: str) -> list[Any]:
    events = []
    for frame in raw.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(
            line[5:].lstrip() for line in frame.split("\n") if line.startswith("data:")
        )
        if data and data != "[DONE]":
            try:
                events.append(json.loads(data))
            except ValueError:
                continue
    return events


def reply_messages(response: Any, sse: str | None) -> list[Message]:
    """The model's answer: text and tool calls (from a stream, its deltas put together)."""
    if sse:
        return _stream_reply(_sse_data(sse))
    if not isinstance(response, dict):
        return [Message("assistant", _text(response))] if response else []
    if "choices" in response:  # Chat Completions
        out: list[Message] = []
        for choice in response.get("choices") or ():
            if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
                out += _chat_message({"role": "assistant", **choice["message"]})
        return out
    if "content" in response and isinstance(response.get("content"), list):  # Messages
        return _blocks("assistant", response["content"])
    if isinstance(response.get("output"), list):  # Responses
        out = []
        for item in response["output"]:
            if isinstance(item, dict) and item.get("type") == "message":
                out.append(Message("assistant", _text(item.get("content"))))
            elif isinstance(item, dict) and item.get("type") == "function_call":
                out += _chat_message(item)
        return out
    if "error" in response:
        return [Message("error", _text(response["error"]))]
    return [Message("assistant", json.dumps(response, ensure_ascii=False))]


def _stream_reply(events: list[Any]) -> list[Message]:
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    for ev in events:
        if not isinstance(ev, dict):
            continue
        kind = ev.get("type")
        if kind == "response.completed" and isinstance(ev.get("response"), dict):
            return reply_messages(ev["response"], None)
        if kind == "content_block_start":
            block = ev.get("content_block") or {}
            if block.get("type") == "tool_use":
                calls[int(ev.get("index", len(calls)))] = {
                    "name": str(block.get("name", "")),
                    "arguments": "",
                    "id": str(block.get("id", "")),
                }
        elif kind == "content_block_delta":
            delta = ev.get("delta") or {}
            if delta.get("type") == "input_json_delta":
                calls.setdefault(int(ev.get("index", 0)), {"name": "", "arguments": "", "id": ""})[
                    "arguments"
                ] += str(delta.get("partial_json", ""))
            else:
                text.append(str(delta.get("text") or ""))
        elif kind == "response.output_text.delta":
            text.append(str(ev.get("delta") or ""))
        elif "choices" in ev:
            for choice in ev.get("choices") or ():
                delta = (choice or {}).get("delta") or {}
                text.append(str(delta.get("content") or ""))
                for c in delta.get("tool_calls") or ():
                    slot = calls.setdefault(
                        int(c.get("index", 0)) + 1000, {"name": "", "arguments": "", "id": ""}
                    )
                    fn = c.get("function") or {}
                    slot["name"] += str(fn.get("name") or "")
                    slot["arguments"] += str(fn.get("arguments") or "")
                    slot["id"] = slot["id"] or str(c.get("id") or "")
    return [Message("assistant", "".join(text), [calls[k] for k in sorted(calls)])]


def _read_line(fh: Any, offset: int) -> Any:
    fh.seek(offset)
    raw = fh.readline()
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _call(number: int, line: Any, previous: int) -> tuple[Call, int]:
    if not isinstance(line, dict):
        return Call(number, unreadable="this line is not JSON"), previous
    messages = request_messages(line.get("request"))
    fresh = messages[previous:] if previous <= len(messages) else messages
    raw_usage = line.get("usage")
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    call = Call(
        number=number,
        model=str(line.get("model") or ""),
        protocol=str(line.get("protocol") or ""),
        started_at=str(line.get("started_at") or ""),
        duration_s=line.get("duration_s")
        if isinstance(line.get("duration_s"), int | float)
        else None,
        status=line.get("status") if isinstance(line.get("status"), int) else None,
        usage=usage,
        cost_usd=line.get("cost_usd") if isinstance(line.get("cost_usd"), int | float) else None,
        error=str(line.get("error") or ""),
        refused=bool(line.get("refused")),
        new_messages=[_cut(m) for m in fresh],
        reply=[_cut(m) for m in reply_messages(line.get("response"), line.get("response_sse"))],
    )
    return call, len(messages)


@dataclass
class TranscriptPage:
    calls: list[Call]
    page: int
    pages: int
    total: int

    @property
    def first(self) -> int:
        return self.calls[0].number if self.calls else 0

    @property
    def last(self) -> int:
        return self.calls[-1].number if self.calls else 0


def transcript_page(path: Path, page: int = 1, per_page: int = PAGE) -> TranscriptPage:
    """Page `page` (1-based) of the calls; each shows what it added to the conversation."""
    offsets = line_offsets(path)
    total = len(offsets)
    pages = max(1, -(-total // per_page))
    page = min(max(1, page), pages)
    first = (page - 1) * per_page
    calls: list[Call] = []
    with open(path, "rb") as fh:
        previous = 0
        if first > 0:  # how much of the conversation the call before this page had sent
            prior = _read_line(fh, offsets[first - 1])
            if isinstance(prior, dict):
                previous = len(request_messages(prior.get("request")))
        for number in range(first, min(first + per_page, total)):
            call, previous = _call(number + 1, _read_line(fh, offsets[number]), previous)
            calls.append(call)
    return TranscriptPage(calls, page, pages, total)


@dataclass
class LogEntry:
    number: int
    label: str  # the line's type and role
    at: str
    messages: list[Message]
    unreadable: str = ""


def _log_entry(number: int, line: Any) -> LogEntry:
    """A session log line (Claude Code, Codex, OpenCode) as a labelled message: the fields these
    logs share (type, role, message/payload, content) are read, anything else is shown as JSON."""
    if not isinstance(line, dict):
        return LogEntry(number, "?", "", [], unreadable="this line is not a JSON object")
    body = line.get("message") or line.get("payload") or line.get("item") or line
    body = body if isinstance(body, dict) else {"content": body}
    kind = str(line.get("type") or body.get("type") or "")
    role = str(body.get("role") or "")
    label = " / ".join(x for x in (kind, role) if x) or "entry"
    at = str(line.get("timestamp") or line.get("time") or "")
    if "content" in body or "text" in body:
        messages = _blocks(role or kind, body.get("content", body.get("text")))
    elif body.get("type") in ("function_call", "function_call_output"):
        messages = _chat_message(body)
    else:
        messages = [Message(role or kind, json.dumps(body, ensure_ascii=False))]
    return LogEntry(number, label, at, [_cut(m) for m in messages])


@dataclass
class LogPage:
    entries: list[LogEntry]
    page: int
    pages: int
    total: int


def log_page(path: Path, page: int = 1, per_page: int = 50) -> LogPage:
    """Page `page` of a JSONL session log, each line as a readable entry."""
    offsets = line_offsets(path)
    total = len(offsets)
    pages = max(1, -(-total // per_page))
    page = min(max(1, page), pages)
    first = (page - 1) * per_page
    with open(path, "rb") as fh:
        entries = [
            _log_entry(n + 1, _read_line(fh, offsets[n]))
            for n in range(first, min(first + per_page, total))
        ]
    return LogPage(entries, page, pages, total)
