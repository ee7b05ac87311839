"""An attempt's result, typed: what result.json holds, in BenchFlow's field names.

The attempt fills a `TrialResult` as it goes (sandbox, agent, verifier) and `to_json()` is the
document written to result.json. Keys BenchFlow always writes are always present (null when
unknown); the ones it writes only when something happened (`steps`, `idle_timeout_info`,
`agent_oom_killed`, ...) appear only then. Readers of job folders, which may come from BenchFlow
itself, keep reading the document as a mapping (runs/results/attempts.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# agent_result's keys that appear once a model's calls were counted
_COUNTED_KEYS = ("n_calls", "busy_seconds")


@dataclass
class AgentUsage:
    """result.json's `agent_result`: tokens, cost and where the figures come from."""

    n_input_tokens: int | None = None
    n_output_tokens: int | None = None
    n_cache_read_tokens: int | None = None
    n_cache_creation_tokens: int | None = None
    total_tokens: int | None = None
    cost_usd: float | None = None
    usage_source: str = "unavailable"  # proxy | agent_session_log | ... | unavailable | none
    price_source: str | None = None
    n_calls: int | None = None  # model calls counted (absent until some were)
    busy_seconds: float | None = None  # time with a model call in flight (proxy)

    @classmethod
    def none_used(cls) -> AgentUsage:
        """A control agent (oracle, nop, a script without a model): no tokens at all."""
        return cls(0, 0, 0, 0, 0, None, "none", None)

    def add_counted(self, usage: Any) -> None:
        """Add what the proxy counted (proxy.registry.AttemptUsage): the steps of a multi-step trial
        add up, and so does a cancelled attempt's record."""
        self.n_input_tokens = (self.n_input_tokens or 0) + usage.input_tokens
        self.n_output_tokens = (self.n_output_tokens or 0) + usage.output_tokens
        self.n_cache_read_tokens = (self.n_cache_read_tokens or 0) + usage.cache_read_tokens
        self.n_cache_creation_tokens = (
            self.n_cache_creation_tokens or 0
        ) + usage.cache_creation_tokens
        self.total_tokens = (self.total_tokens or 0) + usage.total_tokens
        self.usage_source = usage.usage_source
        self.price_source = usage.price_source
        self.n_calls = (self.n_calls or 0) + usage.turns
        if usage.cost_usd is not None:
            self.cost_usd = round((self.cost_usd or 0.0) + usage.cost_usd, 8)
        self.busy_seconds = round((self.busy_seconds or 0.0) + usage.busy_seconds, 3)

    def add_native(
        self,
        *,
        input_tokens: int,
        output_tokens: int,
        cache_read: int,
        cache_write: int,
        source: str,
        calls: int | None,
    ) -> None:
        """A login's calls bypass the proxy: the agent's own log of them (no price)."""
        self.n_input_tokens = (self.n_input_tokens or 0) + input_tokens
        self.n_output_tokens = (self.n_output_tokens or 0) + output_tokens
        self.n_cache_read_tokens = (self.n_cache_read_tokens or 0) + cache_read
        self.n_cache_creation_tokens = (self.n_cache_creation_tokens or 0) + cache_write
        self.total_tokens = (self.total_tokens or 0) + input_tokens + output_tokens
        self.cost_usd = None
        self.usage_source = source
        self.price_source = None
        if calls is not None:
            self.n_calls = (self.n_calls or 0) + calls

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in _COUNTED_KEYS:
            if data[key] is None:
                del data[key]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> AgentUsage:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


@dataclass
class AttemptTiming:
    """result.json's `timing` (seconds by phase); a phase that did not run is left out."""

    environment_setup: float | None = None
    agent_setup: float | None = None
    agent_execution: float | None = None
    verifier: float | None = None
    total: float | None = None

    def add(self, phase: str, seconds: float) -> None:
        setattr(self, phase, (getattr(self, phase) or 0.0) + seconds)

    def to_json(self, digits: int = 3) -> dict[str, float]:
        return {k: round(v, digits) for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> AttemptTiming:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


@dataclass
class TrialBudgetRecord:
    """result.json's `trial_budget`: the per-trial budget, what the trial used, and what stopped it."""

    budget: dict[str, int | None]  # {"tokens": N, "turns": N}
    source: dict[str, str | None]  # where each measure came from: run | task | None
    used: dict[str, int]
    subagents: dict[str, int] | None = None
    stopped_by: str | None = None  # tokens | turns
    stopped_at: dict[str, int] | None = None
    refused_calls: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class StepRecord:
    """One entry of a multi-step trial's `steps`."""

    name: str
    ran: bool = False
    rewards: dict[str, float] | None = None
    reward: float | None = None
    verifier_error: str | None = None
    agent_timed_out: bool = False
    timing: dict[str, float | None] = field(
        default_factory=lambda: {"agent_execution": None, "verifier": None}
    )
    stopped_early: bool = False

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Keys written only when set, in this order after the ones BenchFlow always writes.
_OPTIONAL = (
    "steps",
    "integration_failure_info",
    "idle_timeout_info",
    "usage_incomplete_info",
    "agent_oom_killed",
    "verifier_exit_code",
    "verifier_environment_mode",
)


@dataclass
class TrialResult:
    """One attempt's result.json."""

    task_name: str
    rollout_name: str
    trial_name: str
    trial_index: int
    attempt: int
    agent: str  # as the user named it (-a)
    agent_name: str
    model: str | None
    started_at: str
    sandbox_id: str | None = None
    sandbox_resources: dict[str, Any] | None = None  # the CPUs and memory it got, and asked for
    rewards: dict[str, float] | None = None
    n_tool_calls: int = 0
    n_prompts: int = 0
    last_tool_call: str | None = None
    agent_result: AgentUsage = field(default_factory=AgentUsage)
    error: str | None = None
    error_category: str | None = None
    verifier_error: str | None = None
    verifier_error_category: str | None = None
    agent_timeout_info: dict[str, Any] | None = None
    agent_exit_code: int | None = None
    trial_budget: TrialBudgetRecord | None = None
    finished_at: str | None = None
    timing: AttemptTiming = field(default_factory=AttemptTiming)
    # written only when set
    steps: list[StepRecord] | None = None
    integration_failure_info: dict[str, Any] | None = None
    idle_timeout_info: dict[str, Any] | None = None
    usage_incomplete_info: dict[str, Any] | None = None
    agent_oom_killed: bool | None = None
    verifier_exit_code: int | None = None
    verifier_environment_mode: str | None = None  # Harbor's: "shared" or "separate", once graded

    def fail(self, error: str, category: str) -> None:
        """Record an error unless one is already recorded (the first cause is the one that counts)."""
        if not self.error:
            self.error, self.error_category = error, category

    @property
    def reward(self) -> float | None:
        value = (self.rewards or {}).get("reward")
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "task_name": self.task_name,
            "rollout_name": self.rollout_name,
            "trial_name": self.trial_name,
            "trial_index": self.trial_index,
            "attempt": self.attempt,
            "rewards": self.rewards,
            "agent": self.agent,
            "agent_name": self.agent_name,
            "model": self.model,
            "n_tool_calls": self.n_tool_calls,
            "n_prompts": self.n_prompts,
            "last_tool_call": self.last_tool_call,
            "agent_result": self.agent_result.to_json(),
            "error": self.error,
            "error_category": self.error_category,
            "verifier_error": self.verifier_error,
            "verifier_error_category": self.verifier_error_category,
            "agent_timeout_info": self.agent_timeout_info,
            "agent_exit_code": self.agent_exit_code,
            "trial_budget": None if self.trial_budget is None else self.trial_budget.to_json(),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "sandbox_id": self.sandbox_id,
            "sandbox_resources": self.sandbox_resources,
        }
        for key in _OPTIONAL:
            value = getattr(self, key)
            if value is not None:
                data[key] = [s.to_json() for s in value] if key == "steps" else value
        data["timing"] = self.timing.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrialResult:
        """The result `to_json` wrote (events handed between processes, redaction, tests)."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["agent_result"] = AgentUsage.from_json(data.get("agent_result"))
        values["timing"] = AttemptTiming.from_json(data.get("timing"))
        if data.get("trial_budget") is not None:
            values["trial_budget"] = TrialBudgetRecord(**data["trial_budget"])
        if data.get("steps") is not None:
            values["steps"] = [StepRecord(**s) for s in data["steps"]]
        return cls(**values)
