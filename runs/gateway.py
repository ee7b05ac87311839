"""The seam between runs and the model proxy: what a job needs from a model gateway.

`runs` does not import `proxy` (dependencies point benchflow_site -> {viewer, proxy} -> runs);
the CLI hands a job an object with this shape (benchflow_site.gateway.ProxyGateway).
"""

from __future__ import annotations

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
