"""llm_trajectory.jsonl: one redacted JSON line per exchange, appended in batches.

The exchange itself only queues a record (a dict holding the raw response bytes); the
batch parses stream events, serialises, redacts secrets and appends, many lines per write.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from proxy import jsonio
from proxy.sse import SSESplitter

log = logging.getLogger(__name__)
REDACTED = b"[REDACTED]"
# Key-looking strings: OpenAI/Anthropic/OpenRouter keys, our proxy keys, bearer tokens, AWS ids.
KEY_PATTERN = re.compile(
    rb"(?:(?<=\\[nrt])|(?<![A-Za-z0-9_\-]))(?:sk-[A-Za-z0-9_\-]{16,}|bf-[A-Za-z0-9_\-]{24,}|AKIA[0-9A-Z]{16}"
    rb"|gh[pousr]_[A-Za-z0-9]{20,}|xai-[A-Za-z0-9]{20,})"
    rb"|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{16,}=*"
)
# Cheap substring checks first: the regex is run only on lines that may hold a key.
KEY_HINTS = (b"sk-", b"bf-", b"AKIA", b"gh", b"xai-", b"earer", b"EARER")


def redact(line: bytes, secrets: Iterable[bytes]) -> bytes:
    """Known secret values first, then anything shaped like a key."""
    for secret in secrets:
        if secret in line:
            line = line.replace(secret, REDACTED)
    if any(hint in line for hint in KEY_HINTS):
        line = KEY_PATTERN.sub(REDACTED, line)
    return line


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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


def finish_record(rec: dict[str, Any]) -> dict[str, Any]:
    """Turn the loop's cheap record into the logged one (parse bodies, format times)."""
    raw = rec.pop("response_raw", None)
    if raw is not None:
        if rec.get("stream") and rec.get("status", 0) < 300:
            events = stream_events(raw)
            rec["response"] = None
            rec["response_events"] = events
            rec["response_text"] = stream_text(events)
        else:
            try:
                rec["response"] = jsonio.loads(raw) if raw else None
            except ValueError:
                rec["response"] = raw.decode("utf-8", "replace")
    req = rec.get("request")
    if isinstance(req, bytes | bytearray):
        try:
            rec["request"] = jsonio.loads(req)
        except ValueError:
            rec["request"] = bytes(req).decode("utf-8", "replace")
    for name in ("started_at", "ended_at"):
        if isinstance(rec.get(name), float):
            rec[name] = _iso(rec[name])
    return rec


class TrajectoryWriter:
    """Collects records on the proxy's loop and appends them in batches.

    The batch is written on the loop itself a moment after its first record: a writer
    thread would fight the loop for the GIL on every exchange and add milliseconds of
    latency. `flush` may be called from any thread (a lock guards the pending list).
    """

    def __init__(self, secrets: Callable[[], Iterable[str]] = lambda: (),
                 delay: float = 0.05) -> None:
        self._secrets = secrets
        self.delay = delay
        self._pending: list[tuple[Path, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._timer: asyncio.TimerHandle | None = None

    def submit(self, path: Path, record: dict[str, Any]) -> None:
        """Queue one exchange (called on the event loop; cheap)."""
        with self._lock:
            self._pending.append((path, record))
        if self._timer is None:
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

    def _write(self, batch: list[tuple[Path, dict[str, Any]]]) -> None:
        secrets = sorted({s.encode() for s in self._secrets() if len(s) >= 8}, key=len,
                         reverse=True)
        lines: dict[Path, list[bytes]] = defaultdict(list)
        for path, record in batch:
            try:
                line = jsonio.dumps(finish_record(record))
                lines[path].append(redact(line, secrets) + b"\n")
            except Exception:
                log.exception("could not serialise a trajectory record for %s", path)
        for path, chunk in lines.items():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "ab") as fh:
                    fh.write(b"".join(chunk))
            except OSError:
                log.exception("could not append to %s", path)
