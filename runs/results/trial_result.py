"""An attempt's result, typed: what result.json holds, in BenchFlow's field names.

The attempt fills a `TrialResult` as it goes (sandbox, agent, verifier) and `to_json()` is the
document written to result.json. Keys BenchFlow always writes are always present (null when
unknown); the ones it writes only when something happened (`steps`, `idle_timeout_info`,
`agent_oom_killed`, ...) appear only then. An attempt folder's result.json is read back into one by
runs/results/attempt_folder.py (a Harbor trial's by runs/results/harbor/read.py); the document itself
stays beside it for the keys only some writers add (BenchFlow's own, the error table's `*_info`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from runs.jobfolder import finite

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
    def from_json(cls, data: Any) -> AgentUsage:
        return cls(**_known(cls, data))


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
    def from_json(cls, data: Any) -> AttemptTiming:
        return cls(**_known(cls, data))


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
    "agent_version",
    "steps",
    "verifier_usage",
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
    agent_version: str | None = None  # as the agent reported it (a Harbor trial's agent_info)
    steps: list[StepRecord] | None = None
    # what the verifier's own model calls used (a judge through the proxy, runs/trials/judge.py),
    # counted apart from the agent's as BenchFlow counts a reviewer's: in no job cap
    verifier_usage: AgentUsage | None = None
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
        """The numeric, finite `rewards.reward`, else None (bools and NaN are no reward)."""
        return finite(self.rewards.get("reward")) if isinstance(self.rewards, dict) else None

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
                data[key] = (
                    [s.to_json() for s in value]
                    if key == "steps"
                    else value.to_json()
                    if isinstance(value, AgentUsage)
                    else value
                )
        data["timing"] = self.timing.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], folder: str = "") -> TrialResult:
        """A result.json document: the one `to_json` wrote (events handed between processes,
        redaction), or one read from an attempt folder named `folder`, which may come from another
        writer: what it lacks is filled from the folder's name, keys it adds are left out here."""
        values = _known(cls, data)
        task = str(values.get("task_name") or folder.rsplit("__", 1)[0])
        values["task_name"] = task
        values.setdefault("rollout_name", folder)
        values["trial_name"] = str(values.get("trial_name") or task)
        index = values.get("trial_index")
        values["trial_index"] = index if type(index) is int else 0
        number = values.get("attempt")
        values["attempt"] = number if type(number) is int else 1
        for key in ("agent", "agent_name", "started_at"):
            values.setdefault(key, "")
        values.setdefault("model", None)
        values["agent_result"] = AgentUsage.from_json(data.get("agent_result"))
        values["timing"] = AttemptTiming.from_json(data.get("timing"))
        budget = data.get("trial_budget")
        values["trial_budget"] = (
            TrialBudgetRecord(**_known(TrialBudgetRecord, budget))
            if isinstance(budget, dict) and {"budget", "source", "used"} <= budget.keys()
            else None
        )
        steps = data.get("steps")
        values["steps"] = (
            [
                StepRecord(**_known(StepRecord, s))
                for s in steps
                if isinstance(s, dict) and "name" in s
            ]
            if isinstance(steps, list)
            else None
        )
        judged = data.get("verifier_usage")
        if isinstance(judged, dict):
            values["verifier_usage"] = AgentUsage.from_json(judged)
        return cls(**values)


_FIELDS: dict[type, frozenset[str]] = {}


def _known(cls: type, data: Any) -> dict[str, Any]:
    """The keys of `data` that are fields of the dataclass `cls` (none when it is no mapping)."""
    if not isinstance(data, dict):
        return {}
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return {k: v for k, v in data.items() if k in names}
