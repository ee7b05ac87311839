"""The agent's output as it streams: its JSON event lines, read for tool calls and usage."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from runs.agents.base import Agent


class OutputWatcher:
    """Reads the agent's JSON event lines as they stream, counting tool calls (in the exec thread)."""

    def __init__(self, agent: Agent, on_tool: Callable[[str], None]):
        self.agent, self.on_tool = agent, on_tool
        self._buf = b""
        self.last_output: float | None = (
            None  # monotonic time of the last output, for the idle watchdog
        )
        self.open_tools = 0  # tool calls started and not yet reported finished
        self.tool_calls = 0
        self.last_tool: str | None = None
        self.final_usage: dict[str, Any] | None = None
        self.session_id: str | None = None  # Claude Code's: the name of its session log
        # Claude Code's own log of its calls: message id -> (tokens, made by a subagent?)
        self.calls: dict[str, tuple[int, bool]] = {}

    def subagents(self) -> dict[str, int] | None:
        """What subagents used, from the agent's own log (Claude Code marks a subagent's calls)."""
        if not self.calls:
            return None
        sub = [tokens for tokens, is_sub in self.calls.values() if is_sub]
        return {
            "turns": len(sub),
            "tokens": sum(sub),
            "of_turns": len(self.calls),
            "of_tokens": sum(tokens for tokens, _ in self.calls.values()),
        }

    def _note_call(self, event: dict[str, Any]) -> None:
        message = event.get("message") or {}
        usage = message.get("usage") if isinstance(message, dict) else None
        if event.get("type") != "assistant" or not isinstance(usage, dict) or not message.get("id"):
            return
        tokens = sum(
            int(usage.get(k) or 0)
            for k in (
                "input_tokens",
                "cache_read_input_tokens",
                "cache_creation_input_tokens",
                "output_tokens",
            )
        )
        # a message without usage is the CLI's own (an API error it shows), no model call
        if tokens:
            self.calls[message["id"]] = (tokens, event.get("parent_tool_use_id") is not None)

    def feed(self, chunk: bytes) -> None:
        self.last_output = time.monotonic()
        self._buf += chunk
        if len(self._buf) > 4 << 20:  # a line this long is no event of ours: drop it
            self._buf = self._buf[-(1 << 20) :]
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            line = line.strip()
            if not line.startswith(b"{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("type") == "result" and isinstance(event.get("usage"), dict):
                self.final_usage = event["usage"]
            if self.session_id is None and isinstance(event.get("session_id"), str):
                self.session_id = event["session_id"]
            self._note_call(event)
            self.open_tools = max(0, self.open_tools + self.agent.tool_progress(event))
            for title in self.agent.tool_titles(event):
                self.tool_calls += 1
                self.last_tool = title
                self.on_tool(title)
