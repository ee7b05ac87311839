"""The words of an attempt a search finds, read from its folder: each model call's (the messages it
added to the conversation, the model's reply, its tool calls and their arguments, the call's
error), and the attempt's own (its task's instruction, the tail of the agent's output, its
errors). The index keeps only the words (runs/index/search.py); a hit's snippet is read here again
from the same files, so the text is never held twice.

A step is the model call's 0-based line in trajectory/llm_trajectory.jsonl: the trial page's
`#e<step>` anchor. Everything is bounded: a message's text, a call's, the output's tail.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from runs.jobfolder import read_object
from runs.results import transcript

try:
    from orjson import loads as _loads
except ImportError:  # pragma: no cover
    _loads = json.loads  # type: ignore[assignment]

TRAJECTORY = os.path.join("trajectory", "llm_trajectory.jsonl")
PART_MAX = 4_000  # characters of one message, tool call or error indexed
CALL_MAX = 16_000  # characters of one model call in all
OUTPUT_TAIL = 8_000  # bytes of the end of the agent's output
INSTRUCTION_MAX = 8_000
LINE_MAX = 4 << 20  # a longer trajectory line is not read
CALLS_MAX = 2_540  # model calls of one attempt indexed (127 blocks: runs/index/search.py)
SNIPPET = 160  # characters around a hit's first word
NOT_OUTPUT = frozenset({"setup.txt", "collect.txt"})  # agent/ logs that are ours, not the agent's

_WORD = re.compile(r"[^\W_]+")


def words(text: str) -> list[str]:
    """Text as both full-text engines take it: lowercase runs of letters and digits (so `foo.py`
    is `foo` and `py` on SQLite and on PostgreSQL alike)."""
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class Piece:
    """One searchable piece: a model call (step >= 0) or the attempt's own words (step -1), as
    labelled parts (instruction, message, tool call, reply, error, agent output)."""

    step: int
    parts: tuple[tuple[str, str], ...]

    @property
    def text(self) -> str:
        return "\n".join(text for _, text in self.parts)


def _cut(text: str, limit: int = PART_MAX) -> str:
    return text[:limit]


def _is_reply(item: Any) -> bool:
    return isinstance(item, dict) and (
        item.get("role") == "assistant" or item.get("type") in ("function_call", "reasoning")
    )


def _new_request(request: Any) -> tuple[Any, bool]:
    """What a call added to the conversation: the items after the model's last reply in it (the
    tool results, a user's next turn), or the whole request (its system prompt too) when it has
    no reply yet; and whether it is the first. Only those are read: a call resends the
    conversation so far, and reading it whole at each call would be quadratic."""
    if not isinstance(request, dict):
        return request, True
    key = "messages" if request.get("messages") is not None else "input"
    items = request.get(key)
    if not isinstance(items, list):
        return request, True
    last = next((i for i in range(len(items) - 1, -1, -1) if _is_reply(items[i])), None)
    if last is None:
        return request, True
    return {key: items[last + 1 :]}, False


def _call_parts(line: Any) -> list[tuple[str, str]]:
    if not isinstance(line, dict):
        return []
    request, first = _new_request(line.get("request"))
    parts: list[tuple[str, str]] = []
    for m in transcript.request_messages(request):
        parts += _message_parts(m, "instruction" if m.role == "user" and first else m.role)
    for m in transcript.reply_messages(line.get("response"), line.get("response_sse")):
        parts += _message_parts(m, "reply")
    if line.get("error"):
        parts.append(("error", _cut(str(line["error"]))))
    left, kept = CALL_MAX, []
    for label, text in parts:
        if left <= 0:
            break
        kept.append((label, text[:left]))
        left -= len(text)
    return kept


def _message_parts(m: transcript.Message, label: str) -> list[tuple[str, str]]:
    parts = [(label, _cut(m.text))] if m.text.strip() else []
    for call in m.tool_calls:
        parts.append(("tool call", _cut(f"{call.get('name', '')} {call.get('arguments', '')}")))
    return parts


def _parse(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return _loads(raw)
    except ValueError:
        return None


BLOCK = 20  # model calls a piece of the index holds (a hit's call is found when it is shown)


def blocks(folder: str | os.PathLike[str]) -> Iterator[Piece]:
    """The attempt's model calls, BLOCK at a time (step: the block's first call), in order; none
    when it has no trajectory. The index holds each block's words once, however many of its
    calls have them."""
    try:
        fh = open(os.path.join(folder, TRAJECTORY), "rb")
    except OSError:
        return
    with fh:
        parts: list[tuple[str, str]] = []
        first = 0
        for step, raw in enumerate(fh):
            if step >= CALLS_MAX:
                break
            if step % BLOCK == 0:
                if parts:
                    yield Piece(first, tuple(parts))
                parts, first = [], step
            parts += _call_parts(_parse(raw) if len(raw) <= LINE_MAX else None)
        if parts:
            yield Piece(first, tuple(parts))


def has_calls(folder: str | os.PathLike[str]) -> bool:
    try:
        return os.path.getsize(os.path.join(folder, TRAJECTORY)) > 0
    except OSError:
        return False


def calls(folder: str | os.PathLike[str], first: int, count: int) -> list[Piece]:
    """Model calls first .. first+count-1, read again (for a hit's call and snippet)."""
    try:
        fh = open(os.path.join(folder, TRAJECTORY), "rb")
    except OSError:
        return []
    with fh:
        lines = transcript.read_lines(fh, first, count)
    return [Piece(step, tuple(_call_parts(_parse(raw)))) for step, raw in enumerate(lines, first)]


def locate(
    folder: str | os.PathLike[str], first: int, count: int, terms: list[str]
) -> Piece | None:
    """Of calls first .. first+count-1, the first whose line has the most of `terms` (each call
    sends the conversation so far, so that is the call that brought them), read and parsed alone
    with the one before it: a line is only searched as bytes, never parsed, until then."""
    try:
        fh = open(os.path.join(folder, TRAJECTORY), "rb")
    except OSError:
        return None
    wanted = [t.encode() for t in terms]
    with fh:
        lines = transcript.read_lines(fh, first, count)
    best, score = -1, -1
    for i, raw in enumerate(lines):
        if raw is None:
            continue
        low = raw.lower()
        held = sum(1 for t in wanted if t in low)
        if held > score:
            best, score = i, held
        if held == len(wanted):
            break
    if best < 0:
        return None
    found = calls(folder, first + best, 1)
    return found[0] if found else None


@lru_cache(maxsize=512)
def _instruction(task_path: str) -> str:
    for name in ("instruction.md", "task.md"):
        try:
            with open(os.path.join(task_path, name), encoding="utf-8", errors="replace") as fh:
                return fh.read(INSTRUCTION_MAX)
        except OSError:
            continue
    return ""


def _output_tail(folder: str | os.PathLike[str]) -> list[tuple[str, str]]:
    agent = os.path.join(folder, "agent")
    try:
        names = sorted(
            e.name
            for e in os.scandir(agent)
            if e.name.endswith(".txt") and e.name not in NOT_OUTPUT and e.is_file()
        )
    except OSError:
        return []
    out = []
    for name in names[:3]:
        try:
            with open(os.path.join(agent, name), "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, size - OUTPUT_TAIL))
                text = fh.read(OUTPUT_TAIL).decode("utf-8", "replace")
        except OSError:
            continue
        if text.strip():
            out.append(("agent output", text))
    return out


def own_words(
    folder: str | os.PathLike[str], errors: tuple[str, ...] = (), instruction: bool = True
) -> Piece:
    """The attempt's own words: its task's instruction (config.json names the task's folder;
    `instruction` False when its first model call holds it, as an agent's always does), the tail
    of the agent's output, and its errors (the index's row has them)."""
    parts: list[tuple[str, str]] = []
    config = (read_object(os.path.join(folder, "config.json")) or {}) if instruction else {}
    task_path = config.get("task_path")
    if isinstance(task_path, str) and task_path:
        text = _instruction(task_path)
        if text.strip():
            parts.append(("instruction", text))
    parts += _output_tail(folder)
    parts += [("error", _cut(e)) for e in errors if e]
    return Piece(-1, tuple(parts))


def snippet(piece: Piece, terms: list[str]) -> tuple[str, str]:
    """(label, text) around the first of `terms` the piece holds: the part it is in, SNIPPET
    characters of it (the whole word found, with `…` where it was cut)."""
    wanted = [t for t in terms if t]
    for label, text in piece.parts:
        low = text.lower()
        found = [i for i in (_find_word(low, t) for t in wanted) if i >= 0]
        if found:
            at = min(found)
            start = max(0, at - SNIPPET // 3)
            end = min(len(text), start + SNIPPET)
            shown = " ".join(text[start:end].split())
            return label, ("…" if start else "") + shown + ("…" if end < len(text) else "")
    if piece.parts:
        label, text = piece.parts[0]
        return label, " ".join(text[:SNIPPET].split())
    return "", ""


def _find_word(low: str, term: str) -> int:
    """Where `term` starts as a word of `low` (as `words` splits it), else -1."""
    for match in re.finditer(re.escape(term), low):
        i, j = match.start(), match.end()
        before = low[i - 1] if i else " "
        after = low[j] if j < len(low) else " "
        if not _WORD.fullmatch(before) and not _WORD.fullmatch(after):
            return i
    return -1
