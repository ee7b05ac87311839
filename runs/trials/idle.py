"""The idle watchdog: an agent that goes silent is stopped, as BenchFlow's --agent-idle-timeout does.

Activity is any output of the agent (its JSON event lines: messages, tool calls, thoughts) and
any model call of its, started or finished, that the proxy sees. While something is pending (a
tool call the agent started and has not reported finished, or a model call in flight) the
limit is three times as long: a long build or test run is work, not silence.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

PENDING_FACTOR = 3  # BenchFlow: pending tool calls extend the limit up to 3x
CHECK_EVERY_S = 1.0


class IdleWatch:
    """Tracks one agent run's last activity; `expired()` says when the watchdog must stop it.

    `output_at` is a callable giving the monotonic time of the agent's last output (or None),
    `open_tools` the number of its tool calls started and not yet finished, and `proxy` the
    attempt's model calls as (started or finished so far, in flight now), or None when its calls
    do not go through the proxy (a Claude login).
    """

    def __init__(
        self,
        limit_s: float,
        output_at: Callable[[], float | None],
        open_tools: Callable[[], int],
        proxy: Callable[[], tuple[int, int]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit_s = limit_s
        self._output_at, self._open_tools, self._proxy, self._clock = (
            output_at,
            open_tools,
            proxy,
            clock,
        )
        self.last = clock()
        self._calls: int | None = None
        self.pending = False
        self.silent_s = 0.0  # at the last check: what the error reports, not the time the stop took

    def expired(self) -> float | None:
        """The limit passed (seconds), or None while the agent is active enough."""
        now = self._clock()
        in_flight = 0
        if self._proxy is not None:
            calls, in_flight = self._proxy()
            if calls != self._calls:
                self._calls, self.last = calls, now
        output = self._output_at()
        if output is not None and output > self.last:
            self.last = output
        self.pending = in_flight > 0 or self._open_tools() > 0
        limit = self.limit_s * (PENDING_FACTOR if self.pending else 1)
        self.silent_s = now - self.last
        return limit if self.silent_s >= limit else None


def idle_error(limit_s: float, silent_s: float, tool_calls: int) -> str:
    """BenchFlow's wording, which the error table's idle_timeout marker matches."""
    return (
        f"Agent idle for {limit_s:g}s with no new tool call, message, or thought "
        f"(last activity {silent_s:.0f}s ago, {tool_calls} tool calls so far)"
    )


def idle_stop_info(watch: IdleWatch, limit_s: float, tool_calls: int) -> dict[str, Any]:
    """result.json's `idle_timeout_info`: which limit applied and how long the agent was silent."""
    return {
        "idle_timeout_sec": watch.limit_s,
        "limit_sec": limit_s,
        "pending": watch.pending,
        "silent_sec": round(watch.silent_s, 1),
        "n_tool_calls": tool_calls,
    }
