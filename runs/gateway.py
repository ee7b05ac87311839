"""The seam between runs and the model proxy: what a job needs from a model gateway.

`runs` does not import `proxy` (dependencies point benchflow_site -> {viewer, proxy} -> runs);
the CLI hands a job an object with this shape (benchflow_site.gateway.ProxyGateway).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol


class ModelGateway(Protocol):
    port: int  # where it listens on the host's loopback, once started

    def check_model(self, model: str, protocol: str | None, needs_price: bool) -> list[str]:
        """Problems with routing `model` (missing key, unknown prefix, wrong wire API, no price)."""

    async def start(self) -> int:
        """Listen on the host's loopback inside the running loop; returns the port."""

    async def stop(self) -> None: ...

    async def serve(self, sock: Any) -> Callable[[], Awaitable[None]]:
        """Also serve a listening socket made inside a sandbox's network namespace (no relay
        between the agent and the gateway); returns the function that stops serving it."""

    def register(
        self,
        *,
        attempt_id: str,
        model: str | None,
        log_path: Path,
        token_budget: int | None,
        turn_budget: int | None,
        solution_text: str | None,
        on_budget_spent: Callable[[str], object],
        secrets: Sequence[str] = ...,
    ) -> str:
        """A key of the attempt's own; its calls are counted, priced, logged and budgeted. The
        `secrets` values (what the trial's agent was given) are redacted from its log."""

    def register_judge(
        self,
        *,
        verification_id: str,
        key_vars: Sequence[str],
        log_path: Path,
        secrets: Sequence[str] = ...,
    ) -> str:
        """A token of one verification's own (runs/trials/judge.py): its calls route by the
        model each names (a bare name to the provider of the first of `key_vars`, the provider
        keys the verifier asked for), are counted apart from the agent's and logged to
        `log_path`; unregister() ends it."""

    def unregister(self, key: str) -> Any:
        """Forget the key; returns the attempt's usage (tokens, turns, cost, budget stop, errors)."""

    def in_flight(self, attempt_id: str) -> int:
        """Model requests of the attempt in flight now (0 for an unknown attempt)."""

    def usage(self, attempt_id: str) -> Any:
        """What the proxy has counted for a registered attempt so far (tokens, turns, cost), or
        None for an unknown attempt."""

    def activity(self, attempt_id: str) -> tuple[int, int]:
        """(model calls of the attempt started, finished or refused so far, calls in flight now),
        for the idle watchdog; (0, 0) for an unknown attempt."""

    def unregister_attempt(self, attempt_id: str) -> Any:
        """unregister() by the attempt's id (a cancelled attempt's key is lost with its agent); None
        when it has no key."""


CALLS_SETTLE_S = 30.0  # how long a stopped agent's calls still in flight may take to be counted
CANCELLED_CALLS_SETTLE_S = 5.0  # the same for an attempt a job cap cancelled: the job is stopping


async def calls_settled(
    gateway: ModelGateway, attempt_id: str, timeout_s: float = CALLS_SETTLE_S
) -> int:
    """Wait until none of the attempt's model calls is in flight; returns how many still were when
    the wait gave up (0: every call is counted).

    A stopped agent's streams disconnect, but the proxy reads each of its calls to the end to count
    it (the provider bills it in full); unregistering takes the attempt's usage as it stands, so it
    waits for them.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (left := gateway.in_flight(attempt_id)) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    return left


async def take_usage(gateway: ModelGateway, attempt_id: str) -> Any:
    """What a cancelled attempt's agent used, its calls in flight awaited a little; its key is
    unregistered. None when it registered none."""
    await calls_settled(gateway, attempt_id, CANCELLED_CALLS_SETTLE_S)
    return gateway.unregister_attempt(attempt_id)
