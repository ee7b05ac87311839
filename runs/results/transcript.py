"""An attempt's model calls (trajectory/llm_trajectory.jsonl) as a readable transcript, a page at
a time: the messages each call added, the model's reply, its tool calls, tokens and time.

A sparse line index (the offset of every STRIDE-th line, one pass over the file, kept while the
file is unchanged) lets any page of a trial with thousands of calls open without parsing the calls
before it. The three wire formats the proxy speaks (Chat Completions, Responses, Messages),
streamed or not, are read here.

The files are the agent's to write, so everything is bounded: the index (8 bytes a STRIDE lines;
the cache of indexes by its bytes), a line read (LINE_MAX), and what one page shows (PAGE_BYTES
of HTML, shared by its messages and tool calls).
"""

from __future__ import annotations

import json
import os
import re
from array import array
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, BinaryIO

from runs.bytecache import ByteBoundedCache
from runs.results.html_size import fit, html_bytes

PAGE = 20  # calls a page
TEXT_MAX = 20_000  # characters of one message shown; the raw line is a link away
PAGE_BYTES = 1_000_000  # of HTML, the messages and tool calls of one page in all
LINE_MAX = 4 << 20  # bytes of one line read and parsed; a longer line is shown as too long
STRIDE = 100  # lines between the offsets the index keeps (pages of 20 and 50 start within one)
INDEX_CACHE_BYTES = 16 << 20
_NEWLINE = re.compile(b"\n")


@dataclass(frozen=True)
class LineIndex:
    """How many lines a file has, and where every STRIDE-th one starts."""

    total: int
    marks: array  # type: ignore[type-arg]  # array("q"): marks[i] is line i*STRIDE's offset

    @property
    def nbytes(self) -> int:
        return self.marks.itemsize * len(self.marks) + 64


_indexes: ByteBoundedCache[LineIndex] = ByteBoundedCache(INDEX_CACHE_BYTES, lambda i: i.nbytes)


def line_index(fh: BinaryIO) -> LineIndex:
    """The open file's line index (cached per file, size and mtime), read up to the size it had
    when asked. A last line with no newline counts; an empty file has no lines."""
    info = os.fstat(fh.fileno())
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    found = _indexes.get(key)
    if found is not None:
        return found
    size = info.st_size
    marks = array("q", [0] if size else [])
    newlines, position, last = 0, 0, b""
    fh.seek(0)
    while position < size and (chunk := fh.read(min(1 << 20, size - position))):
        # the g-th newline of the file starts line g: keep it when g is a multiple of STRIDE
        skip = STRIDE - 1 - newlines % STRIDE
        for match in islice(_NEWLINE.finditer(chunk), skip, None, STRIDE):
            if position + match.end() < size:
                marks.append(position + match.end())
        newlines += chunk.count(b"\n")
        position += len(chunk)
        last = chunk[-1:]
    total = newlines + 1 - (last == b"\n") if position else 0
    index = LineIndex(total, marks)
    _indexes.put(key, index)
    return index


def _skip_lines(fh: BinaryIO, count: int) -> None:
    """Move past `count` lines without keeping them (a line may be any length)."""
    while count > 0:
        block = fh.readline(1 << 16)
        if not block:
            return
        if block.endswith(b"\n"):
            count -= 1


def _lines(fh: BinaryIO, first: int, count: int) -> list[bytes | None]:
    """Lines first .. first+count-1 (0-based) of the file; None for one longer than LINE_MAX."""
    index = line_index(fh)
    out: list[bytes | None] = []
    last = min(first + count, index.total)
    if first >= last:
        return out
    fh.seek(index.marks[first // STRIDE])
    _skip_lines(fh, first % STRIDE)
    for _ in range(first, last):
        raw = fh.readline(LINE_MAX + 1)
        if len(raw) > LINE_MAX and not raw.endswith(b"\n"):
            _skip_lines(fh, 1)
            out.append(None)
        else:
            out.append(raw)
    return out


def read_lines(fh: BinaryIO, first: int, count: int) -> list[bytes | None]:
    """Lines first .. first+count-1 (0-based) of the open file, by its line index (a hit's call
    read again for its snippet); None for one longer than LINE_MAX."""
    return _lines(fh, first, count)


class TextBudget:
    """The bytes of HTML a page may still show; each message and tool call takes its share."""

    def __init__(self, page_bytes: int = PAGE_BYTES):
        self.left = page_bytes

    def take(self, text: str, limit: int = TEXT_MAX) -> tuple[str, bool]:
        """At most `limit` characters of `text`, as many as the budget's bytes hold escaped."""
        shown, cut = fit(text[:limit], max(0, self.left))
        self.left -= html_bytes(shown)
        return shown, cut or len(text) > limit

    def short(self, text: str) -> str:
        shown, _ = self.take(text, SHORT)
        return shown


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


SHORT = 200  # characters of a label, a model name, a time, a tool call's name or id
MESSAGE_COST = 300  # bytes of a message's or a tool call's frame on the page


def _shown(messages: list[Message], budget: TextBudget) -> list[Message]:
    """The messages as the page shows them: each text and tool call cut to its share of the page's
    budget; once it is spent, one note says how many more the raw file has."""
    out: list[Message] = []
    for n, message in enumerate(messages):
        if budget.left <= MESSAGE_COST:
            out.append(
                Message("note", f"{len(messages) - n} more not shown: the raw file has them")
            )
            break
        budget.left -= MESSAGE_COST
        message.role = budget.short(message.role)
        message.tool_call_id = budget.short(message.tool_call_id)
        message.text, message.cut = budget.take(message.text)
        calls = []
        for call in message.tool_calls:
            if budget.left <= MESSAGE_COST:
                message.cut = True
                break
            budget.left -= MESSAGE_COST
            arguments, cut = budget.take(call.get("arguments", ""))
            message.cut = message.cut or cut
            calls.append(
                {
                    "name": budget.short(call.get("name", "")),
                    "arguments": arguments,
                    "id": budget.short(call.get("id", "")),
                }
            )
        message.tool_calls = calls
        out.append(message)
    return out


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


def _parsed(raw: bytes | None) -> Any:
    """A line as JSON; None when it is not JSON; TOO_LONG when it was not read."""
    if raw is None:
        return TOO_LONG
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


TOO_LONG = object()
TOO_LONG_TEXT = f"this line is longer than {LINE_MAX >> 20} MB: the raw file has it"


def _number(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _call(number: int, line: Any, previous: int, budget: TextBudget) -> tuple[Call, int]:
    if line is TOO_LONG:
        return Call(number, unreadable=TOO_LONG_TEXT), previous
    if not isinstance(line, dict):
        return Call(number, unreadable="this line is not JSON"), previous
    messages = request_messages(line.get("request"))
    fresh = messages[previous:] if previous <= len(messages) else messages
    raw_usage = line.get("usage")
    usage: dict[str, Any] = (
        {k: v for k, v in raw_usage.items() if isinstance(k, str) and _number(v) is not None}
        if isinstance(raw_usage, dict)
        else {}
    )
    error, _cut = budget.take(str(line.get("error") or ""), 2_000)
    budget.left -= MESSAGE_COST
    call = Call(
        number=number,
        model=budget.short(str(line.get("model") or "")),
        protocol=budget.short(str(line.get("protocol") or "")),
        started_at=budget.short(str(line.get("started_at") or "")),
        duration_s=_number(line.get("duration_s")),
        status=line.get("status") if isinstance(line.get("status"), int) else None,
        usage=usage,
        cost_usd=_number(line.get("cost_usd")),
        error=error,
        refused=bool(line.get("refused")),
        new_messages=_shown(fresh, budget),
        reply=_shown(reply_messages(line.get("response"), line.get("response_sse")), budget),
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


def transcript_page(fh: BinaryIO, page: int = 1, per_page: int = PAGE) -> TranscriptPage:
    """Page `page` (1-based) of the calls in the open trajectory file; each shows what it added to
    the conversation."""
    total = line_index(fh).total
    pages = max(1, -(-total // per_page))
    page = min(max(1, page), pages)
    first = (page - 1) * per_page
    budget = TextBudget()
    previous = 0
    lines = _lines(fh, max(0, first - 1), per_page + (first > 0))
    if first > 0:  # how much of the conversation the call before this page had sent
        prior = _parsed(lines.pop(0))
        if isinstance(prior, dict):
            previous = len(request_messages(prior.get("request")))
    calls: list[Call] = []
    for number, raw in enumerate(lines, start=first + 1):
        call, previous = _call(number, _parsed(raw), previous, budget)
        calls.append(call)
    return TranscriptPage(calls, page, pages, total)


@dataclass
class LogEntry:
    number: int
    label: str  # the line's type and role
    at: str
    messages: list[Message]
    unreadable: str = ""


def _log_entry(number: int, line: Any, budget: TextBudget) -> LogEntry:
    """A session log line (Claude Code, Codex, OpenCode) as a labelled message: the fields these
    logs share (type, role, message/payload, content) are read, anything else is shown as JSON."""
    budget.left -= MESSAGE_COST
    if line is TOO_LONG:
        return LogEntry(number, "?", "", [], unreadable=TOO_LONG_TEXT)
    if not isinstance(line, dict):
        return LogEntry(number, "?", "", [], unreadable="this line is not a JSON object")
    body = line.get("message") or line.get("payload") or line.get("item") or line
    body = body if isinstance(body, dict) else {"content": body}
    kind = str(line.get("type") or body.get("type") or "")
    role = str(body.get("role") or "")
    label = budget.short(" / ".join(x for x in (kind, role) if x) or "entry")
    at = budget.short(str(line.get("timestamp") or line.get("time") or ""))
    if "content" in body or "text" in body:
        messages = _blocks(role or kind, body.get("content", body.get("text")))
    elif body.get("type") in ("function_call", "function_call_output"):
        messages = _chat_message(body)
    else:
        messages = [Message(role or kind, json.dumps(body, ensure_ascii=False))]
    return LogEntry(number, label, at, _shown(messages, budget))


@dataclass
class LogPage:
    entries: list[LogEntry]
    page: int
    pages: int
    total: int


def log_page(fh: BinaryIO, page: int = 1, per_page: int = 50) -> LogPage:
    """Page `page` of an open JSONL session log, each line as a readable entry."""
    total = line_index(fh).total
    pages = max(1, -(-total // per_page))
    page = min(max(1, page), pages)
    first = (page - 1) * per_page
    budget = TextBudget()
    entries = [
        _log_entry(number, _parsed(raw), budget)
        for number, raw in enumerate(_lines(fh, first, per_page), start=first + 1)
    ]
    return LogPage(entries, page, pages, total)
