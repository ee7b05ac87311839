"""llm_trajectory.jsonl: one redacted JSON line per exchange, appended in batches.

A line holds the call's metadata (times, status, usage, cost, error), `request` (the
body as sent upstream) and `response` (a JSON body) or `response_sse` (a stream's text
as received; `stream_events` and `stream_text` turn it into events or the reply text).
The exchange itself only queues a record; the batch serialises, redacts and appends.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from proxy import jsonio
from proxy.sse import SSESplitter

log = logging.getLogger(__name__)
REDACTED = b"[REDACTED]"
# Key-looking strings: OpenAI/Anthropic/OpenRouter keys, our proxy keys, bearer tokens.
KEY_PATTERN = re.compile(
    rb"(?:(?<=\\[nrt])|(?<![A-Za-z0-9_\-]))"
    rb"(?:sk-[A-Za-z0-9_\-]{16,}|bf-[A-Za-z0-9_\-]{24,})"
    rb"|[Bb]earer\s+[A-Za-z0-9._~+/\-]{16,}=*"
)
# A cheap check first: the pattern runs only on lines that may hold a key. One scan for the "-"
# of sk-/bf- (a look-behind) instead of a search for each prefix in turn; "earer" is the Bearer
# shape (benchmarks/redact_bench.py measures both).
_DASH_KEY = re.compile(rb"-(?<=sk-|bf-)")
# a literal pattern: re's scan is faster than bytes.find for it (benchmarks/redact_bench.py)
_EARER = re.compile(rb"earer")
_KEY_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _hinted(data: bytes) -> bool:
    return _DASH_KEY.search(data) is not None or _EARER.search(data) is not None


def redact(line: bytes, secrets: Iterable[bytes]) -> bytes:
    """Known secret values first, then anything shaped like a key."""
    plain: list[bytes] = []
    shaped: list[bytes] = []
    for secret in secrets:
        (shaped if _hinted(secret) else plain).append(secret)
    return _redact(line, plain, shaped)


def _redact(line: bytes, plain: list[bytes], shaped: list[bytes]) -> bytes:
    """`shaped` secrets hold a key's shape (most keys start with sk-), so a line without
    that shape cannot hold them and is not searched for each: every scan reads the line."""
    hinted = _hinted(line)
    for secret in (plain + shaped) if hinted else plain:
        if line.find(secret) >= 0:
            line = line.replace(secret, REDACTED)
    if hinted:
        line = redact_shapes(line)
    return line


def redact_shapes(line: bytes) -> bytes:
    """KEY_PATTERN.sub(REDACTED, line), with the pattern tried only where a match can start.

    The pattern has no literal prefix, so sub() tries it at every byte, a long conversation's
    line costing milliseconds, and a word like "task-" hints nearly every one. A match
    starts at an sk-/bf- or a [Bb]earer, which the fast scans find; matching there, leftmost
    first and never inside the previous match, gives what sub() gives.
    """
    starts = [
        m.start() - 2
        for m in _DASH_KEY.finditer(line)
        # the pattern's left edge, checked here first: in "task-" the "sk-" ends a word
        if m.start() == 2 or line[m.start() - 3] not in _KEY_CHARS or line[m.start() - 4] == 92
    ]
    at = line.find(b"earer")
    while at >= 0:
        if at:
            starts.append(at - 1)
        at = line.find(b"earer", at + 1)
    if not starts:
        return line
    starts.sort()
    parts: list[bytes] = []
    done = 0
    for start in starts:
        if start < done:
            continue
        key = KEY_PATTERN.match(line, start)
        if key is not None:
            parts += (line[done:start], REDACTED)
            done = key.end()
    if not parts:
        return line
    parts.append(line[done:])
    return b"".join(parts)


_second: list[Any] = [None, ""]  # the last second formatted, and its text
_MILLIS = [f".{ms:03d}Z" for ms in range(1000)]


def iso(ts: float) -> str:
    """UTC, milliseconds, e.g. 2026-11-04T18:18:39.123Z."""
    sec = int(ts)
    if _second[0] != sec:
        _second[0], _second[1] = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
    return _second[1] + _MILLIS[int(ts * 1000) % 1000]


def stream_events(raw: bytes) -> list[dict[str, Any]]:
    """An SSE body as a list of {event, data} with data parsed when it is JSON."""
    split = SSESplitter()
    frames = split.feed(raw) + split.close()
    events: list[dict[str, Any]] = []
    for frame in frames:
        try:
            data: Any = jsonio.loads(frame.data) if frame.data[:1] in (b"{", b"[") else None
        except ValueError:
            data = None
        if data is None:
            data = frame.data.decode("utf-8", "replace")
        events.append({"event": frame.event, "data": data} if frame.event else {"data": data})
    return events


def stream_text(events: list[dict[str, Any]]) -> str:
    """The assistant text reassembled from a stream's deltas (all three wire formats)."""
    out: list[str] = []
    for ev in events:
        d = ev["data"]
        if not isinstance(d, dict):
            continue
        kind = d.get("type")
        if kind == "content_block_delta":
            out.append((d.get("delta") or {}).get("text") or "")
        elif kind == "response.output_text.delta":
            out.append(d.get("delta") or "")
        elif "choices" in d:
            for choice in d["choices"] or ():
                out.append(((choice or {}).get("delta") or {}).get("content") or "")
    return "".join(out)


def _embeddable(raw: Any) -> bool:
    """Known-valid JSON bytes that can go into the line as they are (no raw line breaks).

    bytes.find, not `in`: on CPython 3.11 `sub in data` first tries `sub` as an integer, and
    raising and clearing that TypeError costs more than the search itself."""
    return (
        isinstance(raw, bytes)
        and raw[:1] in (b"{", b"[")
        and raw.find(b"\n") < 0
        and raw.find(b"\r") < 0
    )


def record_line(rec: dict[str, Any]) -> bytes:
    """A record given as a dict, as one JSON line (without its newline).

    Bodies the proxy already knows to be valid JSON are spliced in as received rather
    than parsed and serialised again: that is most of the cost for 100 KB agent requests.
    Keys ending in _raw are such bodies: request_raw (strict JSON when request_json, else
    re-serialised, or the text of a body that was not JSON), response_raw (a stream, an
    error text, or strict JSON when response_json). The metadata is serialised on its own
    and the two bodies are joined after it, as "request" and "response", its last keys.
    """
    sse, request, response = bodies(
        bool(rec.get("stream")),
        rec.get("status", 0),
        rec.pop("request_raw", None),
        rec.pop("request_json", True),
        rec.pop("response_raw", None),
        rec.pop("response_json", False),
    )
    if sse is not None:
        rec["response_sse"] = sse
    for name in ("started_at", "ended_at"):
        if isinstance(rec.get(name), float):
            rec[name] = iso(rec[name])
    rec.pop("request", None)
    rec.pop("response", None)
    head = jsonio.dumps(rec)
    return b"".join(
        (
            head[:-1],
            b',"request":' if len(head) > 2 else b'"request":',
            request,
            b',"response":',
            response,
            b"}",
        )
    )


def bodies(
    stream: bool, status: int, req_raw: Any, req_json: bool, resp_raw: Any, resp_json: bool
) -> tuple[str | None, bytes, bytes]:
    """(response_sse text or None, request JSON, response JSON) for a line: see record_line."""
    sse = None
    response = b"null"
    if resp_raw is not None:
        if stream and status < 300:
            # The stream as it came, one string; readers split it with stream_events().
            # Parsing every event here would triple the cost of logging a streamed call.
            sse = resp_raw.decode("utf-8", "replace")
        elif resp_json and _embeddable(resp_raw):
            response = resp_raw
        elif resp_raw:
            response = _as_json(resp_raw)
    if req_json and _embeddable(req_raw):
        request = req_raw
    elif req_raw:
        request = _as_json(req_raw)
    else:
        request = b"null"
    return sse, request, response


def _as_json(raw: bytes) -> bytes:
    """A body as JSON that fits on one line: re-serialised if it parses, else as a string."""
    try:
        return jsonio.dumps(jsonio.loads(raw))
    except ValueError:
        return jsonio.dumps(raw.decode("utf-8", "replace"))


class Line(Protocol):
    """A record that serialises itself (the proxy's exchanges: see proxy.app.Exchange)."""

    def line(self) -> bytes: ...


class TrajectoryWriter:
    """Collects records on the proxy's loop and appends them in batches.

    A batch is written on the loop itself a moment after its first record, or once it holds
    `batch` records, so that writing one never holds the loop for long. A writer thread
    would fight the loop for the GIL on every exchange and add milliseconds of latency.
    `flush` may be called from any thread (a lock guards the pending list).
    """

    def __init__(
        self,
        secrets: Callable[[], Iterable[str]] = lambda: (),
        delay: float = 0.05,
        batch: int = 64,
    ) -> None:
        self._secrets = secrets
        self.delay = delay
        self.batch = batch
        self._pending: list[tuple[Path, dict[str, Any] | Line]] = []
        self._lock = threading.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._dirs: set[Path] = set()

    def submit(self, path: Path, record: dict[str, Any] | Line) -> None:
        """Queue one exchange (called on the event loop; cheap): a dict for record_line, or
        an object that makes its own line when the batch is written."""
        with self._lock:
            self._pending.append((path, record))
            full = len(self._pending) >= self.batch
        if full:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def flush(self, timeout: float = 5.0) -> bool:
        """Write everything queued so far; from the loop or from any other thread."""
        with self._lock:
            batch, self._pending = self._pending, []
            if batch:
                self._write(batch)
        return True

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()

    def secrets(self) -> list[bytes]:
        """The exact values to redact (upstream keys and the like), longest first."""
        return sorted({s.encode() for s in self._secrets() if len(s) >= 8}, key=len, reverse=True)

    def _write(self, batch: list[tuple[Path, dict[str, Any] | Line]]) -> None:
        secrets = self.secrets()
        plain = [s for s in secrets if not _hinted(s)]
        shaped = [s for s in secrets if _hinted(s)]
        lines: dict[Path, list[bytes]] = defaultdict(list)
        for path, record in batch:
            try:
                line = record_line(record) if isinstance(record, dict) else record.line()
                lines[path].append(_redact(line, plain, shaped) + b"\n")
            except Exception:
                log.exception("could not serialise a trajectory record for %s", path)
        for path, chunk in lines.items():
            try:
                if path.parent not in self._dirs:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    self._dirs.add(path.parent)
                with open(path, "ab", buffering=0) as fh:
                    fh.write(b"".join(chunk))
            except OSError:
                log.exception("could not append to %s", path)
