"""Proxy trajectories (trajectory/llm_trajectory.jsonl) for tests and benchmarks of the event stream."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TRAJECTORY = "trajectory/llm_trajectory.jsonl"


def at(seconds: int) -> str:
    return f"2026-12-01T10:{seconds // 60:02d}:{seconds % 60:02d}+00:00"


def call_line(
    n: int, messages: list[dict[str, Any]], reply: list[dict[str, Any]]
) -> dict[str, Any]:
    """A proxy line in the Messages format: call n sent `messages`, the model answered `reply`."""
    return {
        "started_at": at(10 * n),
        "duration_s": 2.0,
        "model": "claude-x",
        "protocol": "messages",
        "status": 200,
        "usage": {"input_tokens": 100 + n, "output_tokens": 7},
        "request": {"system": "be terse", "messages": messages},
        "response": {"content": reply},
    }


def trajectory(folder: Path, calls: int) -> Path:
    """A conversation of `calls` calls: each but the last runs bash; each request holds all."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix <the> bug"}]
    lines = []
    for n in range(calls):
        last = n == calls - 1
        reply: list[dict[str, Any]] = [{"type": "thinking", "thinking": f"plan {n}"}]
        if last:
            reply.append({"type": "text", "text": "done"})
        else:
            reply.append({"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"c": n}})
        lines.append(call_line(n, list(messages), reply))
        messages.append({"role": "assistant", "content": reply})
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"out {n}"}
        messages.append({"role": "user", "content": [result]})
    path = folder / TRAJECTORY
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path
