"""The seam between runs and the model proxy: what a job needs from a model gateway.

`runs` does not import `proxy` (dependencies point benchflow_site -> {viewer, proxy} -> runs);
the CLI hands a job an object with this shape (benchflow_site.gateway.ProxyGateway), which the
attempts wrap in a TrackedGateway so a cancelled attempt still collects what the proxy counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
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
    ) -> str:
        """A key of the attempt's own; its calls are counted, priced, logged and budgeted."""

    def unregister(self, key: str) -> Any:
        """Forget the key; returns the attempt's usage (tokens, turns, cost, budget stop, errors)."""

    def in_flight(self, attempt_id: str) -> int:
        """Model requests of the attempt in flight now (0 for an unknown attempt)."""


CANCELLED_CALLS_SETTLE_S = 5.0  # how long a cap-cancelled attempt waits for its calls in flight to be counted


class TrackedGateway:
    """The model gateway, remembering each attempt's key until it is unregistered, so an attempt a
    job cap cancels in the middle of its agent still collects what the proxy counted."""

    def __init__(self, gateway: ModelGateway):
        self.gateway = gateway
        self.keys: dict[str, str] = {}  # attempt_id -> its registered key

    @property
    def port(self) -> int:
        return self.gateway.port

    @port.setter
    def port(self, value: int) -> None:
        self.gateway.port = value

    def check_model(self, model: str, protocol: str | None, needs_price: bool) -> list[str]:
        return self.gateway.check_model(model, protocol, needs_price)

    async def start(self) -> int:
        return await self.gateway.start()

    async def stop(self) -> None:
        await self.gateway.stop()

    async def serve(self, sock: Any) -> Callable[[], Awaitable[None]]:
        return await self.gateway.serve(sock)

    def register(
        self, *, attempt_id: str, model: str | None, log_path: Path, token_budget: int | None,
        turn_budget: int | None, solution_text: str | None, on_budget_spent: Callable[[str], object],
    ) -> str:
        key = self.gateway.register(
            attempt_id=attempt_id, model=model, log_path=log_path, token_budget=token_budget,
            turn_budget=turn_budget, solution_text=solution_text, on_budget_spent=on_budget_spent,
        )
        self.keys[attempt_id] = key
        return key

    def unregister(self, key: str) -> Any:
        for attempt_id in [a for a, k in self.keys.items() if k == key]:
            del self.keys[attempt_id]
        return self.gateway.unregister(key)

    def in_flight(self, attempt_id: str) -> int:
        return self.gateway.in_flight(attempt_id)

    async def take_usage(self, attempt_id: str) -> Any:
        """What a cancelled attempt's agent used: its calls in flight are awaited a little (the proxy
        reads each to its end to count it), then its key is unregistered. None without a key."""
        if attempt_id not in self.keys:
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CANCELLED_CALLS_SETTLE_S
        while self.gateway.in_flight(attempt_id) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        return self.unregister(self.keys[attempt_id])
