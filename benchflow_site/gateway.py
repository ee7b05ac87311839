"""The model proxy as the runs' model gateway (runs.gateway.ModelGateway)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

API_NAMES = {
    "messages": "Anthropic Messages",
    "chat": "OpenAI Chat Completions",
    "responses": "OpenAI Responses",
}


class ProxyGateway:
    """Imports the proxy only when a run calls a model: the oracle's start-up stays light."""

    def __init__(self) -> None:
        self.server: Any = None
        self.port = 0

    def check_model(self, model: str, protocol: str | None, needs_price: bool) -> list[str]:
        from proxy.prices import price_for
        from proxy.providers import ProviderError, resolve_model

        try:
            route = resolve_model(model)
        except ProviderError as exc:
            return [f"-m/--model: {exc}"]
        problems = []
        if route.is_mock and route.model.startswith("script:"):
            from proxy.mock_script import load_script

            try:
                load_script(route.model.split(":", 1)[1])
            except (OSError, ValueError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                problems.append(
                    f"-m {model}: {why}; fix: pass mock/script:FILE with a reply script"
                )
        if protocol and not route.serves(protocol):
            served = ", ".join(API_NAMES[p] for p in sorted(route.protocols))
            problems.append(
                f"-m {model}: the agent speaks the {API_NAMES[protocol]} API, which {route.provider} does not "
                f"serve here; fix: pick an agent speaking {served}, or another model"
            )
        if needs_price and price_for(model) is None:
            problems.append(
                f"--max-cost-usd: {model} has no price in the price table (proxy/prices.json, or your own file "
                "in $BENCHFLOW_PRICES), so it has no dollar cap; fix: cap tokens instead with --max-tokens, "
                "or add its price"
            )
        return problems

    def model_choices(self) -> list[tuple[str, str]]:
        """The models a launch form offers: the price table's whose provider has a key in this
        environment (a bare id under the provider that names it so), the mocks, and each keyed
        provider's prefix for a model typed by hand."""
        from proxy.prices import price_table
        from proxy.providers import PROVIDERS, ProviderError, resolve_model

        offered: list[tuple[str, str]] = [
            ("mock/oracle", "mock: replays the task's solution, no key, no cost"),
            ("mock/echo", "mock: echoes, no key, no cost"),
        ]
        homes = {"gpt-": "openai", "deepseek-": "deepseek", "claude-": ""}
        for name, price in price_table().items():
            home = next((p for start, p in homes.items() if name.startswith(start)), None)
            if home is None or "/" in name:
                continue
            model = f"{home}/{name}" if home else name
            try:
                resolve_model(model)
            except ProviderError:
                continue  # its provider's key is not set here
            offered.append((model, f"${price.input:g} / ${price.output:g} per 1M tokens in / out"))
        for prefix, spec in PROVIDERS.items():
            if spec.key_var and os.environ.get(spec.key_var):
                offered.append((f"{prefix}/", f"{spec.key_var} is set: type the model after it"))
        return offered

    async def start(self) -> int:
        from proxy.server import ProxyServer

        self.server = ProxyServer()
        # loopback only: sandboxes reach it by a relay
        self.port = await self.server.start("127.0.0.1", 0)
        return self.port

    async def stop(self) -> None:
        await self.server.stop()

    async def serve(self, sock: Any) -> Callable[[], Awaitable[None]]:
        return await self.server.serve_socket(sock)

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
        secrets: Sequence[str] = (),
    ) -> str:
        from proxy.registry import Attempt

        return self.server.registry.register(
            Attempt(
                attempt_id=attempt_id,
                model=model,
                log_path=log_path,
                token_budget=token_budget,
                turn_budget=turn_budget,
                solution_text=solution_text,
                on_budget_spent=on_budget_spent,
                secrets=list(secrets),
            )
        )

    def register_judge(
        self,
        *,
        verification_id: str,
        key_vars: Sequence[str],
        log_path: Path,
        secrets: Sequence[str] = (),
    ) -> str:
        from proxy.providers import provider_of_key
        from proxy.registry import Attempt

        return self.server.registry.register(
            Attempt(
                attempt_id=verification_id,
                model=None,
                log_path=log_path,
                provider=next((p for v in key_vars if (p := provider_of_key(v))), None),
                secrets=list(secrets),
            )
        )

    def unregister(self, key: str) -> Any:
        return self.server.registry.unregister(key)

    def unregister_attempt(self, attempt_id: str) -> Any:
        return self.server.registry.unregister_attempt(attempt_id)

    def in_flight(self, attempt_id: str) -> int:
        try:
            return self.server.registry.usage(attempt_id).in_flight
        except KeyError:
            return 0

    def usage(self, attempt_id: str) -> Any:
        try:
            return self.server.registry.usage(attempt_id)
        except KeyError:
            return None

    def activity(self, attempt_id: str) -> tuple[int, int]:
        try:
            u = self.server.registry.usage(attempt_id)
        except KeyError:
            return 0, 0
        return u.turns + u.calls + u.refused_calls, u.in_flight
