"""A Claude login's usage: its calls go straight to the provider, so the proxy never sees them.

It comes from Claude Code's own session log in the sandbox, read once the agent stops (the CLI's
final result line is the fallback), and adds to the trial's agent_result.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from runs.agents.base import NativeUsage
from runs.sandboxes.docker import Sandbox

SESSION_USAGE_KEYS = (
    "input_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens",
)


def session_log_usage(lines: Iterable[bytes | str], session_id: str) -> dict[str, int] | None:
    """What one Claude Code session's calls used, from its log lines (its subagents' included):
    {input_tokens, cache_read_input_tokens, cache_creation_input_tokens, output_tokens, calls}, or
    None when no line is of that session.

    The log writes an assistant entry per content block, each with its message's id and usage:
    a message is counted once, with the largest figures any of its entries has.
    """
    seen_session = False
    calls: dict[str, dict[str, int]] = {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("sessionId") != session_id:
            continue
        seen_session = True
        message = entry.get("message")
        if entry.get("type") != "assistant" or not isinstance(message, dict):
            continue
        usage = message.get("usage")
        if not isinstance(usage, dict) or not message.get("id"):
            continue
        counts = calls.setdefault(str(message["id"]), dict.fromkeys(SESSION_USAGE_KEYS, 0))
        for k in SESSION_USAGE_KEYS:
            if isinstance(usage.get(k), int):
                counts[k] = max(counts[k], usage[k])
    if not seen_session:
        return None
    total = {k: sum(c[k] for c in calls.values()) for k in SESSION_USAGE_KEYS}
    total["calls"] = len(calls)
    return total


def read_session_usage(sandbox: Sandbox, config_dir: str, session_id: str) -> dict[str, int] | None:
    """A Claude Code session's usage from its logs in the sandbox, read after the agent stopped:
    $CLAUDE_CONFIG_DIR/projects/<cwd>/<session>.jsonl, its subagents' in <session>/subagents/."""
    with tempfile.TemporaryDirectory(prefix="bench-session-") as tmp:
        try:
            sandbox.copy_dir_to(f"{config_dir}/projects", Path(tmp))
        except Exception:  # noqa: BLE001 - no log is no usage from it: the result line is the fallback
            return None

        def lines() -> Iterator[bytes]:
            for path in sorted(Path(tmp).rglob("*.jsonl")):
                with path.open("rb") as fh:
                    yield from fh

        return session_log_usage(lines(), session_id)


def native_usage_of(usage: dict[str, Any], source: str) -> NativeUsage:
    """Anthropic's usage fields (a session log's sum, or the CLI's final result line) as the trial
    counts them: input tokens include cache reads and writes."""
    cache_read = int(usage.get("cache_read_input_tokens") or 0)
    cache_write = int(usage.get("cache_creation_input_tokens") or 0)
    return NativeUsage(
        input_tokens=int(usage.get("input_tokens") or 0) + cache_read + cache_write,
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        source=source,
        calls=usage["calls"] if "calls" in usage else None,
    )
