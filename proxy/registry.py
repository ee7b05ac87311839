"""Per-attempt proxy keys, their routes, usage counters and per-trial budgets.

Thread safety: every read or change of an attempt's counters happens under one
`threading.Lock`, so `register`, `unregister` and `usage` may be called from any thread
while the proxy's event loop serves calls. The proxy calls `begin_call`/`end_call` on its
loop; `on_budget_spent` runs there too, outside the lock: keep it quick (set an event, or
`loop.call_soon_threadsafe` into the runner's own loop).
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from proxy.mock_script import load_script
from proxy.prices import Price, cost_usd, price_for
from proxy.providers import Route, is_claude_name, resolve_model
from proxy.usage import Usage

log = logging.getLogger(__name__)
KEY_PREFIX = "bf-"


@dataclass
class Attempt:
    """What the runner registers for one attempt (one trial try)."""

    attempt_id: str
    model: str | None  # "anthropic/claude-sonnet-4-5", "mock/oracle"; None = route by request
    log_path: str | os.PathLike[str] | None = None  # .../trajectory/llm_trajectory.jsonl
    token_budget: int | None = None
    turn_budget: int | None = None
    solution_text: str | None = None  # mock/oracle: the task's solution script
    script_replies: list[dict[str, Any]] | None = None  # mock/script: replies, in order
    on_budget_spent: Callable[[str], object] | None = None  # called once, with attempt_id
    # for a key without a model (a judge's): where a request's bare model name ("gpt-4o") goes
    provider: str | None = None
    # values its agent was given: redacted from the log
    secrets: list[str] = field(default_factory=list)


@dataclass
class AttemptUsage:
    """A snapshot of what an attempt used, for result.json's agent_result and trial_budget."""

    attempt_id: str
    model: str | None
    calls: int = 0  # forwarded calls that have finished
    turns: int = 0  # calls forwarded (a turn is reserved when a call starts)
    refused_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None
    price_source: str | None = None
    usage_source: str = "provider_response"
    unmetered_calls: int = 0  # successful calls whose response carried no usage
    token_budget: int | None = None
    turn_budget: int | None = None
    stopped_by: str | None = None  # "tokens" | "turns"
    stopped_at: dict[str, int] | None = None  # {"tokens", "turns"} when the first call was refused
    in_flight: int = 0
    busy_seconds: float = 0.0  # wall time with at least one call in flight
    request_seconds: float = 0.0  # sum of call durations
    errors: dict[str, int] = field(default_factory=dict)  # class -> count
    last_error: str | None = None


class Refusal(NamedTuple):
    measure: str  # "tokens" | "turns"
    message: str


class AttemptState:
    """Live counters of one registered attempt (mutated under the registry lock)."""

    def __init__(self, spec: Attempt, key: str, route: Route | None, price: Price | None):
        self.spec = spec
        self.key = key
        self.route = route
        self.price = price
        self.log_path = Path(spec.log_path) if spec.log_path else None
        self.script_index = 0
        self.script_file: str | None = None  # for a key without a model: the script it replays
        self.u = AttemptUsage(
            spec.attempt_id,
            spec.model,
            token_budget=spec.token_budget,
            turn_budget=spec.turn_budget,
            price_source=price.source if price else None,
            cost_usd=0.0 if price else None,
        )
        self._busy_since = 0.0
        self.notified = False


def budget_message(measure: str, budget: int, tokens: int, turns: int) -> str:
    unit = "token" if measure == "tokens" else "turn"
    return (
        f"trial_budget_spent: the {unit} budget of {budget:,} is spent "
        f"({tokens:,} tokens, {turns:,} turns used)"
    )


def check_budget(u: AttemptUsage) -> Refusal | None:
    """The budget rule: a measure already spent refuses the next call (tokens checked first)."""
    if u.token_budget is not None and u.total_tokens >= u.token_budget:
        return Refusal("tokens", budget_message("tokens", u.token_budget, u.total_tokens, u.turns))
    if u.turn_budget is not None and u.turns >= u.turn_budget:
        return Refusal("turns", budget_message("turns", u.turn_budget, u.total_tokens, u.turns))
    return None


class Registry:
    """Keys -> attempts. One attempt's key only ever touches that attempt's counters."""

    def __init__(self, env: Mapping[str, str] = os.environ) -> None:
        self.env = env
        self._lock = threading.Lock()
        self._by_key: dict[str, AttemptState] = {}
        self._by_id: dict[str, AttemptState] = {}
        self._routes: dict[str, tuple[Route, Price | None]] = {}
        self._secrets: dict[
            str, int
        ] = {}  # registered attempts' secret values -> attempts holding it
        # Set by ProxyServer: waits until queued trajectory lines are on disk.
        self.flush_logs: Callable[[float], None] = lambda timeout: None

    def register(self, attempt: Attempt, key: str | None = None) -> str:
        """A new unguessable key for `attempt` (or `key`, for `bench proxy --key`);
        raises ProviderError for an unroutable model."""
        route = resolve_model(attempt.model, self.env) if attempt.model else None
        price = price_for(attempt.model, self.env) if attempt.model else None
        if route is not None and route.is_mock and route.model.startswith("script:"):
            if attempt.script_replies is None:
                attempt.script_replies = load_script(route.model.split(":", 1)[1])
        key = key or KEY_PREFIX + secrets.token_urlsafe(32)
        state = AttemptState(attempt, key, route, price)
        with self._lock:
            if attempt.attempt_id in self._by_id or key in self._by_key:
                raise ValueError(f"attempt {attempt.attempt_id!r} or its key is already registered")
            self._by_key[key] = state
            self._by_id[attempt.attempt_id] = state
            for value in attempt.secrets:
                self._secrets[value] = self._secrets.get(value, 0) + 1
        return key

    def secrets(self) -> list[str]:
        """The secret values registered attempts were given, to redact from every log line."""
        with self._lock:
            return list(self._secrets)

    def unregister(self, key: str) -> AttemptUsage | None:
        """Forget a key (its calls get 401 from now on); flushes its log; returns its usage."""
        with self._lock:
            state = self._by_key.pop(key, None)
            if state is not None:
                self._by_id.pop(state.spec.attempt_id, None)
        if state is None:
            return None
        self.flush_logs(5.0)
        with self._lock:  # after the flush: the attempt's last lines are redacted too
            for value in state.spec.secrets:
                if self._secrets.get(value, 0) <= 1:
                    self._secrets.pop(value, None)
                else:
                    self._secrets[value] -= 1
        return self._snapshot(state)

    def unregister_attempt(self, attempt_id: str) -> AttemptUsage | None:
        """unregister() by the attempt's id."""
        state = self._by_id.get(attempt_id)
        return self.unregister(state.key) if state is not None else None

    def usage(self, key_or_id: str) -> AttemptUsage:
        state = self._by_key.get(key_or_id) or self._by_id.get(key_or_id)
        if state is None:
            raise KeyError(f"no registered attempt or key {key_or_id[:12]!r}")
        return self._snapshot(state)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._by_key)

    def _snapshot(self, state: AttemptState) -> AttemptUsage:
        with self._lock:
            u = state.u
            snap = AttemptUsage(
                **{
                    **u.__dict__,
                    "errors": dict(u.errors),
                    "stopped_at": dict(u.stopped_at) if u.stopped_at else None,
                }
            )
            if u.in_flight:
                snap.busy_seconds += time.monotonic() - state._busy_since
        return snap

    # -- the proxy's side (event loop thread) -------------------------------------------

    def lookup(self, key: str) -> AttemptState | None:
        return self._by_key.get(key)

    def route_for(self, state: AttemptState, model: str) -> tuple[Route, Price | None]:
        """The attempt's route, or for a key without one, the route of the requested model."""
        if state.route is not None:
            return state.route, state.price
        if state.spec.provider and "/" not in model and not is_claude_name(model):
            model = f"{state.spec.provider}/{model}"
        hit = self._routes.get(model)
        if hit is None:
            hit = (resolve_model(model, self.env), price_for(model, self.env))
            self._routes[model] = hit
        return hit

    def begin_call(self, state: AttemptState) -> Refusal | None:
        """Check the budget and reserve a turn atomically; a Refusal means do not forward."""
        notify = False
        with self._lock:
            u = state.u
            refusal = check_budget(u)
            if refusal is not None:
                u.refused_calls += 1
                if u.stopped_by is None:
                    u.stopped_by = refusal.measure
                    u.stopped_at = {"tokens": u.total_tokens, "turns": u.turns}
                notify = not state.notified
                state.notified = True
            else:
                u.turns += 1
                if u.in_flight == 0:
                    state._busy_since = time.monotonic()
                u.in_flight += 1
        callback = state.spec.on_budget_spent
        if notify and callback is not None:
            try:
                callback(state.spec.attempt_id)
            except Exception:
                log.exception("on_budget_spent callback failed for %s", state.spec.attempt_id)
        return refusal

    def end_call(
        self,
        state: AttemptState,
        usage: Usage | None,
        price: Price | None,
        duration_s: float,
        status: int,
        error_class: str | None,
        error_text: str | None,
    ) -> float | None:
        """Add a finished call's usage, cost and error; returns the call's cost in USD."""
        cost = cost_usd(usage, price) if usage is not None else None
        with self._lock:
            u = state.u
            u.in_flight -= 1
            if u.in_flight == 0:
                u.busy_seconds += time.monotonic() - state._busy_since
            u.calls += 1
            u.request_seconds += duration_s
            if usage is not None:
                u.input_tokens += usage.input_tokens
                u.output_tokens += usage.output_tokens
                u.cache_read_tokens += usage.cache_read_tokens
                u.cache_creation_tokens += usage.cache_creation_tokens
                u.total_tokens += usage.total_tokens
            elif status < 300:
                u.unmetered_calls += 1
            if cost is not None and price is not None:
                u.cost_usd = (u.cost_usd or 0.0) + cost
                u.price_source = price.source
            if error_class is not None:
                u.errors[error_class] = u.errors.get(error_class, 0) + 1
                u.last_error = error_text
        return cost


def error_class_for(status: int) -> str | None:
    """How the runner classifies an upstream status (BenchFlow's error categories)."""
    if status == 429:
        return "provider_rate_limit"
    if status in (401, 403):
        return "provider_auth"
    if status >= 500:
        return "api_error"
    if status >= 400:
        return "provider_rejected"
    return None
