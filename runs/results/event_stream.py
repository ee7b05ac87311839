"""A trial's event stream, as BenchFlow's trial page shows it: prompts, messages, thoughts and tool
calls (each with its result, status and duration), in order, with `+m:ss` offsets and numbers that
stay the same on every visit (`#e42`).

It is one stream from two sources when the attempt has both. The agent's own session log (Claude
Code's, with its subagents' events nested under the Task/Agent call that spawned them; Codex's
main thread; OpenCode's store, kept as one line per message with its parts, a subagent's session
nested under the task call that started it), kept for every attempt of an agent that writes one,
gives the steps: prompts, messages, thoughts, tool calls and their results. The proxy's
trajectory/llm_trajectory.jsonl gives each model call's model, tokens, duration and status: a call
the log shows takes them (and `#c<line>`, its trajectory line), and a call the log lacks (a failed
or refused call, a side call such as OpenCode's session title, a Codex sub-agent's thread) comes as
its own event, its reply nested, where the proxy's order puts it; nothing comes twice. Calls are
matched by id, not by time or by count (see _merge). An agent without a session log (or an attempt
from before logs were always kept, or an OpenCode store kept before its parts were) has the
trajectory alone, read as the stream itself.

A page is read from a cursor (line, byte offset, events numbered so far, calls still waiting for a
result, and merged, the trajectory's line and offset), never from the start of a file: a trial of 2,000 calls paints its first page after
reading its first lines, and the next page goes on where the last stopped. Everything is bounded as
on the rest of the trial page: a line read (LINE_MAX), the lines a page looks ahead for results,
and the bytes of HTML a page carries (an item past its share keeps its head and a link to the raw
line: collapsed, not truncated, in every ordinary case).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from runs.results import files
from runs.results.transcript import (
    LINE_MAX,
    TextBudget,
    _sse_data,
    _text,
    reply_messages,
    request_messages,
)

PER_PAGE = 60  # top-level events a page
PAGE_BYTES = 1_000_000  # of HTML, one page's texts in all (a page fetched on its own)
FIRST_PAGE_BYTES = 250_000  # the first page's, within the trial page's 2 MB
ITEM_MAX = 200_000  # characters of one text shown before the raw line is the way to the rest
LOOKAHEAD_LINES = 400  # lines read past a page for the results of its tool calls
SUB_EVENTS = 300  # of one subagent, nested under its Task call
PENDING_MAX = 40  # calls without a result carried to the next page
SEARCH_LINES = 4_000  # lines one search request reads
SEARCH_HITS = 50
CALL_FIELDS = (
    *("started_at", "duration_s", "model", "status", "usage", "error", "refused"),
    *("response", "response_sse"),
)
CALL_LOOKAHEAD = 40  # trajectory lines read past a page's own model calls, to find them
TRAJECTORY = "trajectory/llm_trajectory.jsonl"
SESSIONS = "agent/sessions/"

KINDS = ("prompt", "message", "thought", "tool", "result", "call", "system", "error")
FOCUS = ("prompt", "message", "tool", "result", "error")  # what Focus mode shows

TOOL_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("plan", ("todo", "plan")),
    ("task", ("task", "agent", "subagent", "spawn", "delegate")),
    ("edit", ("edit", "write", "patch", "str_replace", "create", "notebookedit", "multiedit")),
    ("read", ("read", "view", "cat", "open")),
    ("search", ("grep", "glob", "find", "search", "list", "ls", "rg")),
    ("web", ("web", "fetch", "http", "browse", "url")),
    ("shell", ("bash", "shell", "exec", "command", "run", "terminal")),
)


def tool_kind(name: str) -> str:
    """The hue of a tool call: shell, edit, read, search, web, task, plan or other."""
    low = name.lower()
    for kind, words in TOOL_KINDS:
        if any(w in low for w in words):
            return kind
    return "other"


@dataclass
class Event:
    n: int  # stable: the n-th top-level event of the stream
    kind: str  # one of KINDS
    title: str = ""
    text: str = ""
    output: str = ""  # a tool call's result
    status: str = ""  # a tool call's: ok, error, pending
    tool: str = ""  # its kind (hue)
    at: float | None = None  # seconds since the epoch
    offset: str = ""  # +m:ss from the stream's first time
    duration_s: float | None = None
    meta: str = ""  # a model call's model and tokens
    line: int = 0  # the source's line (1-based), for the raw-file link
    cut: bool = False
    tool_id: str = ""
    agent_id: str = ""  # a Task call's subagent (Claude Code)
    sidechain: bool = False
    children: list[Event] = field(default_factory=list)
    call: int = -1  # a model call's 0-based line in the trajectory (`#c<line>`), else -1
    keys: frozenset[str] = (
        frozenset()
    )  # a session log's model call: its ids, to find it in the proxy's

    @property
    def anchor(self) -> str:
        return f"e{self.n}"

    @property
    def call_anchor(self) -> str:
        return f"c{self.call}" if self.call >= 0 else ""

    @property
    def search_text(self) -> str:
        return f"{self.title}\n{self.text}\n{self.output}".casefold()


@dataclass
class Cursor:
    line: int = 0
    offset: int = 0
    n: int = 0
    prev: int = 0  # trajectory: messages the previous call sent
    t0: float | None = None
    pending: dict[str, int] = field(default_factory=dict)  # tool id -> its event's number
    message: str = ""  # Claude Code: the message whose entries are being read
    calls: int = 0  # model calls numbered so far (a session log's stand-in for trajectory lines)
    tline: int = 0  # merged: the trajectory's lines taken so far
    toffset: int = 0  # and the byte offset after them
    call_ids: list[str] = field(default_factory=list)  # Codex: tool calls since the last call

    def query(self) -> str:
        from urllib.parse import urlencode

        open_ids = ",".join(f"{k}:{v}" for k, v in list(self.pending.items())[-PENDING_MAX:])
        params = {"line": self.line, "at": self.offset, "e": self.n, "prev": self.prev}
        params["c"] = self.calls
        params["tl"], params["ta"] = self.tline, self.toffset
        return urlencode({**params, "t0": "" if self.t0 is None else self.t0, "open": open_ids})

    @classmethod
    def parse(cls, get: Any) -> Cursor:
        def num(key: str) -> int:
            try:
                return max(0, int(get.get(key) or 0))
            except ValueError:
                return 0

        try:
            t0 = float(get.get("t0")) if get.get("t0") else None
        except ValueError:
            t0 = None
        pending: dict[str, int] = {}
        for pair in str(get.get("open") or "").split(",")[:PENDING_MAX]:
            key, _, value = pair.rpartition(":")
            if key and value.isdigit():
                pending[key[:200]] = int(value)
        return cls(
            num("line"),
            num("at"),
            num("e"),
            num("prev"),
            t0,
            pending,
            calls=num("c"),
            tline=num("tl"),
            toffset=num("ta"),
        )


@dataclass
class Source:
    kind: str  # trajectory, claude, codex, opencode
    rel: str  # the file, relative to the attempt folder
    proxy: str = ""  # a session log's: the proxy's trajectory merged into it, when there is one


@dataclass
class StreamPage:
    source: Source | None
    events: list[Event]
    cursor: Cursor  # where the next page starts
    done: bool  # the file has no more lines
    hits: list[Event] = field(default_factory=list)  # a search's


def _time(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value / 1000 if value > 1e11 else float(value)
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def offset_label(seconds: float) -> str:
    seconds = max(0, int(seconds))
    minutes, sec = divmod(seconds, 60)
    return f"+{minutes}:{sec:02d}"


# ---- reading lines from a cursor ---------------------------------------------------------------


def _read_lines(fh: BinaryIO, offset: int, line: int) -> Iterator[tuple[int, int, Any]]:
    """(line number, offset after it, parsed JSON or None) from `offset` on; a line longer than
    LINE_MAX is skipped whole and yields None."""
    fh.seek(offset)
    while True:
        raw = fh.readline(LINE_MAX + 1)
        if not raw:
            return
        if len(raw) > LINE_MAX and not raw.endswith(b"\n"):
            while (more := fh.readline(1 << 16)) and not more.endswith(b"\n"):
                pass
            raw = b""
        line += 1
        try:
            value = json.loads(raw) if raw.strip() else None
        except (ValueError, RecursionError):
            value = None
        yield line, fh.tell(), value


# ---- what a line says, by source ----------------------------------------------------------------


@dataclass
class Item:
    """One thing a line says, before numbering: an event, or a tool result (`result_for`)."""

    kind: str
    title: str = ""
    text: str = ""
    at: float | None = None
    duration_s: float | None = None
    tool_id: str = ""
    result_for: str = ""
    is_error: bool = False
    meta: str = ""
    agent_id: str = ""
    sidechain: bool = False
    model_call: bool = False  # the marker of one model call (failed or not)
    keys: frozenset[str] = frozenset()  # its ids (a reply's id, its tool calls'), to match it


def _thoughts(response: Any, sse: Any) -> list[str]:
    """The model's reasoning in a reply, in the formats that carry it."""
    out: list[str] = []
    if isinstance(sse, str) and sse:
        parts: dict[int, list[str]] = {}
        for frame in sse.replace("\r\n", "\n").split("\n\n"):
            data = "".join(ln[5:].lstrip() for ln in frame.split("\n") if ln.startswith("data:"))
            try:
                ev = json.loads(data) if data and data != "[DONE]" else None
            except ValueError:
                continue
            if not isinstance(ev, dict):
                continue
            delta = _dict(ev.get("delta"))
            if delta.get("type") == "thinking_delta":
                parts.setdefault(int(ev.get("index") or 0), []).append(str(delta.get("thinking")))
            elif ev.get("type") == "response.completed":
                return _thoughts(ev.get("response"), None)
            for choice in ev.get("choices") or ():
                d = (choice or {}).get("delta") or {}
                if d.get("reasoning_content") or d.get("reasoning"):
                    parts.setdefault(-1, []).append(
                        str(d.get("reasoning_content") or d.get("reasoning"))
                    )
        return ["".join(p) for _, p in sorted(parts.items()) if "".join(p).strip()]
    if not isinstance(response, dict):
        return out
    for block in response.get("content") or ():
        if isinstance(block, dict) and block.get("type") == "thinking":
            out.append(str(block.get("thinking") or ""))
    for item in response.get("output") or ():
        if isinstance(item, dict) and item.get("type") == "reasoning":
            out.append(_text(item.get("summary") or item.get("content") or ""))
    for choice in response.get("choices") or ():
        message = (choice or {}).get("message") or {}
        if message.get("reasoning_content") or message.get("reasoning"):
            out.append(str(message.get("reasoning_content") or message.get("reasoning")))
    return [t for t in out if t.strip()]


def _new_part(request: Any, cursor: Cursor) -> Any:
    """The request with only what it added to the conversation: the items past the `cursor.prev`
    the call before sent (all of them when the conversation did not grow: a new one); only those
    are read, so a call late in a long trial costs what it added, not what it repeats."""
    if not isinstance(request, dict):
        return request
    key = "messages" if isinstance(request.get("messages"), list) else "input"
    items = request.get(key)
    if not isinstance(items, list):
        cursor.prev = 0
        return request
    start = cursor.prev if 0 < cursor.prev <= len(items) else 0
    cursor.prev = len(items)
    if start == 0:
        return request
    return {key: items[start:]}


def trajectory_items(line: Any, cursor: Cursor) -> list[Item]:
    """One proxy call: the messages its request added (prompts, tool results), then its reply
    (thoughts, text, tool calls), and a marker with its model, tokens and time."""
    if not isinstance(line, dict):
        return [Item("error", "unreadable line", "this line is not JSON or is too long")]
    started = _time(line.get("started_at"))
    fresh = request_messages(_new_part(line.get("request"), cursor))
    items: list[Item] = []
    for m in fresh:
        if m.role == "system":
            items.append(Item("system", "system prompt", m.text, started))
        elif m.role == "tool":
            items.append(Item("result", text=m.text, at=started, result_for=m.tool_call_id))
        elif m.role == "user" and m.text:
            items.append(Item("prompt", "user", m.text, started))
    return [*items, call_item(line), *reply_items(line)]


def call_item(line: dict[str, Any]) -> Item:
    """A proxy call's marker: its model, tokens, start, duration and status (a failed or refused
    call is an error)."""
    started = _time(line.get("started_at"))
    took = line.get("duration_s") if isinstance(line.get("duration_s"), int | float) else None
    usage = _dict(line.get("usage"))
    tokens = " · ".join(
        f"{usage[k]:,} {label}"
        for k, label in (("input_tokens", "in"), ("output_tokens", "out"))
        if isinstance(usage.get(k), int)
    )
    meta = " · ".join(x for x in (str(line.get("model") or ""), tokens) if x)
    status = line.get("status")
    call = Item("call", "model call", meta=meta, at=started, duration_s=took, model_call=True)
    if line.get("error") or line.get("refused") or (isinstance(status, int) and status >= 400):
        call.kind, call.is_error = "error", True
        call.title = "refused call" if line.get("refused") else f"failed call (HTTP {status})"
        call.text = str(line.get("error") or "")
    return call


def reply_items(line: dict[str, Any]) -> list[Item]:
    """What a proxy call answered: its thoughts, text and tool calls, at its end."""
    started = _time(line.get("started_at"))
    took = line.get("duration_s") if isinstance(line.get("duration_s"), int | float) else None
    ended = started + took if started is not None and took is not None else started
    items: list[Item] = []
    for thought in _thoughts(line.get("response"), line.get("response_sse")):
        items.append(Item("thought", "thinking", thought, ended))
    for m in reply_messages(line.get("response"), line.get("response_sse")):
        if m.text:
            items.append(Item("message" if m.role != "error" else "error", m.role, m.text, ended))
        for c in m.tool_calls:
            items.append(
                Item(
                    "tool", c.get("name", ""), c.get("arguments", ""), ended, None, c.get("id", "")
                )
            )
    return items


def _claude_blocks(content: Any) -> Iterator[dict[str, Any]]:
    if isinstance(content, str):
        yield {"type": "text", "text": content}
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict):
                yield block


def claude_items(line: Any, cursor: Cursor) -> list[Item]:
    """One entry of Claude Code's session log (a message's content block, a tool result, ...)."""
    if not isinstance(line, dict) or line.get("type") not in ("user", "assistant", "system"):
        return []
    at = _time(line.get("timestamp"))
    side = line.get("isSidechain") is True
    message = _dict(line.get("message"))
    if line.get("type") == "system":
        text = str(line.get("content") or "")
        return (
            [Item("system", str(line.get("subtype") or "system"), text, at, sidechain=side)]
            if text
            else []
        )
    items: list[Item] = []
    used = _dict(line.get("toolUseResult"))
    for block in _claude_blocks(message.get("content")):
        kind = block.get("type")
        if kind == "text" and str(block.get("text") or "").strip():
            role = "prompt" if line.get("type") == "user" else "message"
            if line.get("isMeta"):
                role = "system"
            items.append(
                Item(
                    role,
                    str(message.get("role") or line["type"]),
                    str(block["text"]),
                    at,
                    sidechain=side,
                )
            )
        elif kind == "thinking":
            items.append(
                Item("thought", "thinking", str(block.get("thinking") or ""), at, sidechain=side)
            )
        elif kind == "tool_use":
            args = json.dumps(block.get("input"), ensure_ascii=False, indent=1)
            items.append(
                Item(
                    "tool",
                    str(block.get("name") or ""),
                    args,
                    at,
                    tool_id=str(block.get("id") or ""),
                    sidechain=side,
                )
            )
        elif kind == "tool_result":
            items.append(
                Item(
                    "result",
                    text=_text(block.get("content")),
                    at=at,
                    result_for=str(block.get("tool_use_id") or ""),
                    is_error=block.get("is_error") is True,
                    agent_id=str(used.get("agentId") or ""),
                    sidechain=side,
                )
            )
    usage: dict[str, Any] = _dict(message.get("usage"))
    # a message without tokens is the CLI's own (an API error it shows), not a model call
    spent = any(isinstance(v, int) and v > 0 for v in usage.values())
    if line.get("type") == "assistant" and spent and items and items[0].kind != "call":
        tokens = (
            f"{usage.get('input_tokens', 0) or 0:,} in · {usage.get('output_tokens', 0) or 0:,} out"
        )
        meta = " · ".join(x for x in (str(message.get("model") or ""), tokens) if x)
        # the log writes an entry per content block of one message: one marker a message
        if message.get("id") and message.get("id") == cursor.message:
            return items
        cursor.message = str(message.get("id") or "")
        keys = frozenset([str(message["id"])] if message.get("id") else [])
        items.insert(0, Item("call", "model call", meta=meta, at=at, sidechain=side, keys=keys))
    return items


def codex_items(line: Any, cursor: Cursor) -> list[Item]:
    """One line of a Codex rollout: a response item (message, reasoning, a tool call or its output)
    or a token count (one a model call)."""
    if not isinstance(line, dict) or not isinstance(line.get("payload"), dict):
        return []
    at = _time(line.get("timestamp"))
    p = line["payload"]
    kind = p.get("type")
    if line.get("type") == "event_msg":
        if kind == "token_count" and isinstance(p.get("info"), dict):
            last = p["info"].get("last_token_usage") or {}
            meta = f"{last.get('input_tokens', 0):,} in · {last.get('output_tokens', 0):,} out"
            tokens = _tokens_key(last.get("input_tokens"), last.get("output_tokens"))
            keys, cursor.call_ids = frozenset([*cursor.call_ids, tokens]), []
            return [Item("call", "model call", meta=meta, at=at, keys=keys)]
        return []
    if line.get("type") != "response_item":
        return []
    if kind == "message":
        role = str(p.get("role") or "")
        text = _text(p.get("content"))
        if not text.strip():
            return []
        return [
            Item({"user": "prompt", "assistant": "message"}.get(role, "system"), role, text, at)
        ]
    if kind == "reasoning":
        text = _text(p.get("summary") or p.get("content") or "")
        return [Item("thought", "reasoning", text, at)] if text.strip() else []
    if kind in ("function_call", "custom_tool_call", "local_shell_call"):
        args = p.get("arguments") or p.get("input") or p.get("action") or ""
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        name = str(p.get("name") or ("shell" if kind == "local_shell_call" else ""))
        if p.get("call_id"):  # the call's id, as the proxy saw it in the reply
            cursor.call_ids.append(str(p["call_id"]))
        return [Item("tool", name, args, at, tool_id=str(p.get("call_id") or ""))]
    if kind in ("function_call_output", "custom_tool_call_output"):
        out = p.get("output")
        text, failed = _text(out), False
        try:
            doc = json.loads(out) if isinstance(out, str) else None
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            text = _text(doc.get("output", text))
            code = (doc.get("metadata") or {}).get("exit_code")
            failed = isinstance(code, int) and code != 0
        return [
            Item(
                "result", text=text, at=at, result_for=str(p.get("call_id") or ""), is_error=failed
            )
        ]
    return []


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _opencode_tokens_keys(tokens: Any) -> list[str]:
    """A message's tokens as the proxy's usage names them: its input with the cached part (which
    OpenCode counts apart) and its output with and without its reasoning."""
    if not isinstance(tokens, dict) or not isinstance(tokens.get("input"), int):
        return []
    cache = _dict(tokens.get("cache"))
    given = tokens["input"] + _count(cache.get("read")) + _count(cache.get("write"))
    made, reasoning = _count(tokens.get("output")), _count(tokens.get("reasoning"))
    return [_tokens_key(given, made), _tokens_key(given, made + reasoning)]


def _opencode_part(part: dict[str, Any], at: float | None, side: bool, role: str) -> list[Item]:
    """One part of an OpenCode message: its text, reasoning, or a tool call with its result."""
    kind = part.get("type")
    times = _dict(part.get("time"))
    start = _time(times.get("start")) or at
    if kind == "text" and str(part.get("text") or "").strip():
        shown = "prompt" if role == "user" else "message"
        shown = "system" if part.get("synthetic") is True else shown
        return [Item(shown, role, str(part["text"]), start, sidechain=side)]
    if kind == "reasoning" and str(part.get("text") or "").strip():
        return [Item("thought", "reasoning", str(part["text"]), start, sidechain=side)]
    if kind != "tool":
        return []
    state = _dict(part.get("state"))
    span = _dict(state.get("time"))
    call_id = str(part.get("callID") or part.get("id") or "")
    args = json.dumps(state.get("input"), ensure_ascii=False, indent=1)
    began = _time(span.get("start")) or start
    tool = Item("tool", str(part.get("tool") or ""), args, began, tool_id=call_id, sidechain=side)
    status = state.get("status")
    if status not in ("completed", "error"):
        return [tool]  # the agent stopped before it ended: it stays pending
    failed = status == "error"
    result = Item(
        "result",
        text=_text(state.get("error") if failed else state.get("output")),
        at=_time(span.get("end")) or began,
        result_for=call_id,
        is_error=failed,
        agent_id=str(_dict(state.get("metadata")).get("sessionId") or ""),  # a task's subagent
        sidechain=side,
    )
    return [tool, result]


def opencode_items(line: Any, cursor: Cursor) -> list[Item]:
    """One message of OpenCode's store as kept (runs/agents/session_logs.py's opencode_messages):
    a user's prompt, or an assistant's message (one model call: its marker, then its parts'
    reasoning, text and tool calls, each tool call's result in the same part). A subagent's
    session (one with a parent, started by a task call) is a sidechain, nested under that call."""
    if not isinstance(line, dict) or not isinstance(line.get("message"), dict):
        return []
    message = line["message"]
    role = str(message.get("role") or "")
    at = _time(_dict(message.get("time")).get("created"))
    side = line.get("parent") is not None
    session = str(line.get("session") or "") if side else ""
    items: list[Item] = []
    for part in line.get("parts") or ():
        if isinstance(part, dict):
            items += _opencode_part(part, at, side, role)
    error = _dict(message.get("error"))
    if error:
        text = str(_dict(error.get("data")).get("message") or error.get("name") or "")
        items.append(Item("error", str(error.get("name") or "error"), text, at, sidechain=side))
    keys = _opencode_tokens_keys(message.get("tokens"))
    tokens = _dict(message.get("tokens"))
    if role == "assistant" and any(k != _tokens_key(0, 0) for k in keys):
        # a message without tokens is not a model call the proxy answered (an error, an abort)
        meta = f"{tokens.get('input', 0) or 0:,} in · {tokens.get('output', 0) or 0:,} out"
        meta = " · ".join(x for x in (str(message.get("modelID") or ""), meta) if x)
        ids = [i.tool_id for i in items if i.kind == "tool" and i.tool_id]
        marker = Item("call", "model call", meta=meta, at=at, sidechain=side)
        marker.keys = frozenset([*ids, *keys])
        items.insert(0, marker)
    for item in items:
        item.agent_id = item.agent_id if item.kind == "result" else session
    return items


READERS = {
    "trajectory": trajectory_items,
    "claude": claude_items,
    "codex": codex_items,
    "opencode": opencode_items,
}


# ---- choosing the source ------------------------------------------------------------------------


def _first_lines(folder: Path, rel: str, count: int = 5) -> list[Any]:
    fh = files.open_file(folder, rel)
    if fh is None:
        return []
    with fh:
        return [v for _, (_, _, v) in zip(range(count), _read_lines(fh, 0, 0), strict=False)]


def find_source(folder: Path, paths: list[str]) -> Source | None:
    """The stream's source among the attempt's files: Claude Code's main session log, Codex's
    main thread or OpenCode's kept store (one kept before its parts were is not read: it holds no
    steps), with the proxy's trajectory merged in when there is one, else the trajectory."""
    proxy = TRAJECTORY if TRAJECTORY in paths else ""
    for rel in sorted(p for p in paths if p.startswith(SESSIONS) and p.endswith(".jsonl")):
        if "/subagents/" in rel:
            continue
        head = _first_lines(folder, rel)
        if any(
            isinstance(v, dict) and "sessionId" in v and v.get("isSidechain") is not True
            for v in head
        ):
            return Source("claude", rel, proxy)
        if any(isinstance(v, dict) and {"session", "message", "parts"} <= v.keys() for v in head):
            return Source("opencode", rel, proxy)  # OpenCode's store, one message a line
        meta = next(
            (v for v in head if isinstance(v, dict) and v.get("type") == "session_meta"), None
        )
        if meta is not None:
            source = (meta.get("payload") or {}).get("source")
            if not (isinstance(source, dict) and "subagent" in source):
                return Source("codex", rel, proxy)
    if TRAJECTORY in paths:
        return Source("trajectory", TRAJECTORY)
    return None


def source_of(folder: Path, kind: str, rel: str) -> Source:
    """The source a later page names (its kind and file), merged as find_source merges it."""
    merged = kind != "trajectory" and files.safe_file(folder, TRAJECTORY) is not None
    return Source(kind, rel, TRAJECTORY if merged else "")


def is_source_path(rel: str) -> bool:
    """A path a stream may be read from (the file must still be one of the attempt's own)."""
    return rel == TRAJECTORY or (rel.startswith(SESSIONS) and rel.endswith(".jsonl"))


# ---- a page ---------------------------------------------------------------------------------------


def _shown(event: Event, budget: TextBudget) -> None:
    event.title = budget.short(event.title)
    event.meta = budget.short(event.meta)
    event.text, cut_a = budget.take(event.text, ITEM_MAX)
    event.output, cut_b = budget.take(event.output, ITEM_MAX)
    event.cut = cut_a or cut_b


def _fold(call: Event, item: Item) -> None:
    call.output = item.text
    call.status = "error" if item.is_error else "ok"
    if item.at is not None and call.at is not None:
        call.duration_s = max(0.0, item.at - call.at)
    call.agent_id = call.agent_id or item.agent_id


def _event(n: int, item: Item, line: int) -> Event:
    event = Event(
        n,
        item.kind,
        item.title,
        item.text,
        at=item.at,
        duration_s=item.duration_s,
        meta=item.meta,
        line=line,
        tool_id=item.tool_id,
        sidechain=item.sidechain,
        keys=item.keys,
    )
    if item.kind == "tool":
        event.tool, event.status = tool_kind(item.title), "pending"
    if item.kind == "result":
        event.title = f"result of {item.result_for}" if item.result_for else "tool result"
        event.status = "error" if item.is_error else "ok"
    return event


def _subagent(folder: Path, source: Source, agent_id: str, parent: Event, t0: float | None) -> None:
    """A Claude Code subagent's own log (<session>/subagents/agent-<id>.jsonl), nested under the
    Task call that spawned it."""
    safe = "".join(ch for ch in agent_id if ch.isalnum() or ch in "-_")[:100]
    rel = f"{source.rel[: -len('.jsonl')]}/subagents/agent-{safe}.jsonl"
    fh = files.open_file(folder, rel)
    if fh is None:
        return
    with fh:
        sub = Source("claude", rel)
        page = _walk(fh, sub, Cursor(t0=t0), SUB_EVENTS, TextBudget(0), folder, nested=True)
    for child in page.events:
        child.sidechain = True
    parent.children.extend(page.events)


def _nests(value: Any, task: Event) -> bool:
    """Whether a line is a subagent's (a sidechain) that would nest under the page's last task call:
    a page full of events still takes it, so a subagent's steps are not split from their call."""
    side = isinstance(value, dict) and (
        value.get("isSidechain") is True or value.get("parent") is not None
    )
    return side and len(task.children) < SUB_EVENTS


def _walk(
    fh: BinaryIO,
    source: Source,
    cursor: Cursor,
    per_page: int,
    budget: TextBudget,
    folder: Path | None,
    nested: bool = False,
) -> StreamPage:
    read = READERS[source.kind]
    events: list[Event] = []
    tools: dict[str, Event] = {}  # this page's calls still waiting for their result
    carried = dict(cursor.pending)  # the pages before's
    task: Event | None = None  # the latest Task call: a sidechain's events go under it
    done = True
    for line, after, value in _read_lines(fh, cursor.offset, cursor.line):
        if len(events) >= per_page and not (task and _nests(value, task)):
            done = False  # the page is full: this line starts the next one
            break
        for item in read(value, cursor):
            if item.at is not None and cursor.t0 is None:
                cursor.t0 = item.at
            if item.kind == "result" and item.result_for:
                if (call := tools.pop(item.result_for, None)) is not None:
                    _fold(call, item)
                elif (number := carried.pop(item.result_for, None)) is not None:
                    cursor.n += 1
                    late = _event(cursor.n, item, line)
                    late.title = f"result of e{number}"
                    events.append(late)
                continue  # else its call's page looked ahead and has it
            if item.sidechain and task is not None and not nested:
                # under the task call that started its subagent (OpenCode names it), else the last
                spawned = (
                    e for e in reversed(events) if e.agent_id and e.agent_id == item.agent_id
                )
                parent = next(spawned, task)
                child = _event(len(parent.children) + 1, item, line)
                parent.children.append(child)
                if child.tool_id:
                    tools[child.tool_id] = child
                continue
            cursor.n += 1
            event = _event(cursor.n, item, line)
            if item.kind == "call" or item.model_call:
                # the trajectory has one call a line; a session log's k-th call stands for the
                # trajectory's k-th line (the nearest item a search hit can name)
                # (merged with the proxy's calls, the one it matches names its own line)
                event.call = line - 1 if source.kind == "trajectory" else cursor.calls
                cursor.calls += 1
            events.append(event)
            if event.kind == "tool" and event.tool_id:
                tools[event.tool_id] = event
                if event.tool == "task":
                    task = event
        cursor.line, cursor.offset = line, after
    # look ahead (bounded) for the results of this page's calls; the next page skips them
    if not done and tools:
        probe = Cursor(**{**cursor.__dict__, "pending": {}})
        ahead = _read_lines(fh, cursor.offset, cursor.line)
        for _, (_line, _after, value) in zip(range(LOOKAHEAD_LINES), ahead, strict=False):
            for item in read(value, probe):
                if item.kind == "result" and (call := tools.pop(item.result_for, None)):
                    _fold(call, item)
            if not tools:
                break
    top = {e.n for e in events}
    still = {k: v.n for k, v in tools.items() if v.n in top and v in events}
    cursor.pending = dict(list({**carried, **still}.items())[-PENDING_MAX:])
    if nested or folder is None:
        return StreamPage(source, events, cursor, done)  # its parent's page finishes it
    if source.kind == "claude":
        for event in events:
            if event.tool == "task" and event.agent_id:
                _subagent(folder, source, event.agent_id, event, cursor.t0)
    if source.proxy:
        events, done = _merge(folder, source, events, cursor, done)
    for event in events:
        _finish(event, cursor.t0, budget)
    return StreamPage(source, events, cursor, done)


# ---- the proxy's calls merged into a session log ---------------------------------------------------


def _tokens_key(given: Any, made: Any) -> str:
    return f"tokens:{given}/{made}"


def call_keys(line: dict[str, Any]) -> tuple[frozenset[str], frozenset[str]]:
    """A proxy call's ids as a session log names them, and its tool calls' ids: its reply's id
    (Claude Code logs each reply with the id the API gave it), its tool calls' ids and its tokens
    (Codex logs each tool call's id, and each call's input and output tokens as the API gave them)."""
    usage = _dict(line.get("usage"))
    reply: set[str] = {_tokens_key(usage.get("input_tokens"), usage.get("output_tokens"))}
    response, sse = line.get("response"), line.get("response_sse")
    if isinstance(response, dict) and isinstance(response.get("id"), str):
        reply.add(response["id"])
    if isinstance(sse, str) and sse:
        for ev in _sse_data("\n\n".join(sse.split("\n\n", 2)[:2])):  # the opening frames
            inner = _dict(ev).get("message") or _dict(ev).get("response") or ev
            if isinstance(_dict(inner).get("id"), str):
                reply.add(str(inner["id"]))
                break
    tools = {
        str(c["id"]) for m in reply_messages(response, sse) for c in m.tool_calls if c.get("id")
    }
    return frozenset(reply | tools), frozenset(tools)


def _markers(events: list[Event]) -> list[Event]:
    """The model calls a page of a session log shows, a subagent's (nested) included, in order."""
    return [m for e in events for m in (e, *e.children) if m.kind == "call"]


def _merge(
    folder: Path, source: Source, events: list[Event], cursor: Cursor, done: bool
) -> tuple[list[Event], bool]:
    """The page's session-log events with the proxy's calls merged in: each model call the log
    shows takes the proxy's model, tokens, duration and status (and its trajectory line as
    `#c<line>`); a call the log lacks (a failed or refused call, a side call, a thread the log does
    not nest) comes as its own event, its reply nested under it, where the proxy's order puts it.

    A call is matched by what both sides record of it, not by time or by count (clocks differ by
    the log's write delay, and the k-th call of a log is not the proxy's k-th once a call fails, a
    side call is made or subagents run): the reply id Claude Code logs (the API's message id), the
    tool call ids and the input and output tokens Codex and OpenCode log. A call with neither takes the first
    unmatched call without tool calls after the one matched before it. The trajectory is read from
    the cursor's place, at most CALL_LOOKAHEAD lines past the page's own calls, and calls after the
    last one matched wait for the next page: paging changes neither what is shown nor its numbers
    (only, in Codex's log, a call it lacks just past a page's last call goes at the next page's
    start rather than the end of this one)."""
    fh = files.open_file(folder, source.proxy)
    if fh is None:
        return events, done
    markers = _markers(events)
    for marker in markers:
        marker.call = -1  # the proxy's own line, once matched
    waiting: dict[str, Event] = {}
    for marker in reversed(markers):
        waiting.update(dict.fromkeys(marker.keys, marker))
    keyed = {id(m) for m in markers if m.keys}
    matched: dict[int, int] = {}  # a marker's id -> its call's trajectory line (0-based)
    calls: list[tuple[int, int, dict[str, Any], frozenset[str]]] = []
    end = True
    with fh:
        for line, after, value in _read_lines(fh, cursor.toffset, cursor.tline):
            # what a call's marker and reply need; its request (the whole conversation so far)
            # is let go at once, not kept alive for the garbage collector to walk on every parse
            value = {k: value.get(k) for k in CALL_FIELDS} if isinstance(value, dict) else {}
            keys, tools = call_keys(value)
            calls.append((line - 1, after, value, tools))
            for key in keys:
                waiter = waiting.get(key)
                if waiter is not None and id(waiter) not in matched:
                    matched[id(waiter)] = line - 1
                    _attach(waiter, value, line - 1)
                    break
            found = keyed <= matched.keys() and len(calls) >= len(markers)
            if (found and not done) or len(calls) >= len(markers) + CALL_LOOKAHEAD:
                end = fh.tell() >= os.fstat(fh.fileno()).st_size
                break
    taken = set(matched.values())
    last = -1
    for marker in markers:  # keyless: in order, after the call matched before
        if id(marker) in matched:
            last = matched[id(marker)]
            continue
        if marker.keys:
            continue
        for index, _after, value, tools in calls:
            if index > last and index not in taken and not tools and not _failed(value):
                matched[id(marker)] = last = index
                taken.add(index)
                _attach(marker, value, index)
                break
    bound = max(taken, default=-1)
    if done:  # the log has ended: every call read is placed
        bound = calls[-1][0] if calls else bound
    rest = [c for c in calls if c[0] <= bound and c[0] not in taken]
    if bound >= 0:
        after = next(a for index, a, _v, _t in calls if index == bound)
        cursor.tline, cursor.toffset = bound + 1, after
    extra = [_proxy_only(index, value) for index, _a, value, _t in rest]
    merged = _placed(events, extra, trailing=source.kind == "codex")
    return _renumbered(merged, cursor), done and end


def _failed(line: dict[str, Any]) -> bool:
    return call_item(line).is_error


def _attach(marker: Event, line: dict[str, Any], index: int) -> None:
    """A session log's model call with what the proxy saw of it."""
    item = call_item(line)
    marker.meta, marker.duration_s, marker.call = item.meta, item.duration_s, index
    if item.is_error:
        marker.kind, marker.title, marker.text = "error", item.title, item.text


def _proxy_only(index: int, line: dict[str, Any]) -> Event:
    """A call the session log does not show: its marker, its reply nested under it."""
    item = call_item(line)
    if not item.is_error:
        item.title = "model call · not in the session log"
    event = _event(0, item, index + 1)
    event.call = index
    for n, reply in enumerate(reply_items(line), 1):
        child = _event(n, reply, index + 1)
        child.status = "" if child.kind == "tool" else child.status
        event.children.append(child)
    return event


def _placed(events: list[Event], extra: list[Event], trailing: bool) -> list[Event]:
    """`extra` (proxy-only calls) among `events` in the proxy's order: each just before the first
    call the proxy made after it (with none, before the first later event of the log), or, where a
    log writes a call's marker after its reply (`trailing`: Codex's token counts), just after the
    last call made before it."""
    marks = [
        (i, e.call) for i, e in enumerate(events) if e.kind in ("call", "error") and e.call >= 0
    ]
    slots: dict[int, list[Event]] = {}
    for x in sorted(extra, key=lambda e: e.call):
        if trailing:
            before = [i for i, call in marks if call < x.call]
            at = before[-1] + 1 if before else 0
        else:
            at = next((i for i, call in marks if call > x.call), -1)
            if at < 0:
                last = max((i for i, call in marks if call < x.call), default=-1)
                later = (i for i, e in enumerate(events) if i > last and _after(e, x))
                at = next(later, len(events))
        slots.setdefault(at, []).append(x)
    out: list[Event] = []
    for i, event in enumerate(events):
        out += slots.get(i, [])
        out.append(event)
    return out + slots.get(len(events), [])


def _after(event: Event, call: Event) -> bool:
    return event.at is not None and call.at is not None and event.at > call.at


def _renumbered(events: list[Event], cursor: Cursor) -> list[Event]:
    """The page's events numbered on from the page before's; its open tool calls renamed."""
    first = cursor.n - sum(1 for e in events if e.n > 0)  # the proxy-only ones had none
    renamed = {}
    for k, event in enumerate(events, first + 1):
        if event.n > 0:
            renamed[event.n] = k
        event.n = k
    cursor.n = first + len(events)
    cursor.pending = {
        tool: renamed.get(n, n) if n > first else n for tool, n in cursor.pending.items()
    }
    return events


def _finish(event: Event, t0: float | None, budget: TextBudget) -> None:
    if event.at is not None and t0 is not None:
        event.offset = offset_label(event.at - t0)
    _shown(event, budget)
    for child in event.children:
        _finish(child, t0, budget)


def stream_page(
    folder: Path,
    source: Source | None,
    cursor: Cursor,
    per_page: int = PER_PAGE,
    page_bytes: int = PAGE_BYTES,
) -> StreamPage:
    """The events of the stream from `cursor` on: `per_page` of them, or fewer at its end."""
    if source is None:
        return StreamPage(None, [], cursor, True)
    fh = files.open_file(folder, source.rel)
    if fh is None:
        return StreamPage(source, [], cursor, True)
    with fh:
        return _walk(fh, source, cursor, per_page, TextBudget(page_bytes), folder)


def search(folder: Path, source: Source | None, query: str, cursor: Cursor) -> StreamPage:
    """The events matching `query` (any case) from `cursor` on, reading at most SEARCH_LINES lines;
    its cursor says where the next search request goes on."""
    needle = query.casefold().strip()
    if source is None or not needle:
        return StreamPage(source, [], cursor, True)
    fh = files.open_file(folder, source.rel)
    if fh is None:
        return StreamPage(source, [], cursor, True)
    hits: list[Event] = []
    start = cursor.line
    with fh:
        while True:
            page = _walk(fh, source, cursor, PER_PAGE, TextBudget(PAGE_BYTES * 4), folder)
            for event in page.events:
                if needle in event.search_text or any(
                    needle in c.search_text for c in event.children
                ):
                    hits.append(event)
            cursor = page.cursor
            if page.done or len(hits) >= SEARCH_HITS or cursor.line - start >= SEARCH_LINES:
                break
    budget = TextBudget(PAGE_BYTES)
    for hit in hits:
        hit.text, _ = budget.take(hit.text, 300)
        hit.output, hit.children = "", []
    return StreamPage(source, [], cursor, page.done, hits[:SEARCH_HITS])
