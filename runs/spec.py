"""RunSpec: one `bench run` validated, with secrets split off from what gets recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runs import secrets
from runs.trials.idle import DEFAULT_IDLE_TIMEOUT_S

# Settings that must match for a plain rerun to resume a job (else a new job starts).
RESUME_KEYS = ("agent", "model", "tasks_dir")


@dataclass
class RunSpec:
    tasks_dir: Path
    agent: str = "claude"
    model: str | None = None
    concurrency: int = 4
    warm_pool: int = 1
    trials: int = 1
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    jobs_dir: Path = Path("jobs")
    job: str | None = None
    fresh: bool = False
    agent_env: dict[str, str] = field(default_factory=dict)
    retry_attempts: int = 2
    agent_idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT_S  # None: no idle watchdog
    save_outputs: bool = False
    quiet: bool = False
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    max_sandbox_seconds: float | None = None
    max_rollouts: int | None = None
    token_budget: int | None = None
    turn_budget: int | None = None

    def budget_caps(self) -> dict[str, Any]:
        return {
            "max_cost_usd": self.max_cost_usd,
            "max_sandbox_seconds": self.max_sandbox_seconds,
            "max_tokens": self.max_tokens,
            "max_rollouts": self.max_rollouts,
        }

    def has_job_cap(self) -> bool:
        return any(v is not None for v in self.budget_caps().values())

    def recorded(self) -> dict[str, Any]:
        """The settings as evaluation.json keeps them: secret --agent-env values never recorded."""
        return {
            "tasks_dir": str(self.tasks_dir),
            "agent": self.agent,
            "model": self.model,
            "concurrency": self.concurrency,
            "warm_pool": self.warm_pool,
            "trials": self.trials,
            "include": list(self.include),
            "exclude": list(self.exclude),
            "agent_env": secrets.public_env(self.agent_env),
            "agent_env_keys": sorted(self.agent_env),
            "agent_env_secret_keys": secrets.secret_keys(self.agent_env),
            "retry_attempts": self.retry_attempts,
            "agent_idle_timeout_sec": self.agent_idle_timeout,
            "save_outputs": self.save_outputs,
            "budget": self.budget_caps(),
            "token_budget": self.token_budget,
            "turn_budget": self.turn_budget,
            "environment": "docker",
        }

    @classmethod
    def from_recorded(cls, data: dict[str, Any], **overrides: Any) -> RunSpec:
        budget = data.get("budget") or {}
        spec = cls(
            tasks_dir=Path(data["tasks_dir"]),
            agent=data["agent"],
            model=data.get("model"),
            concurrency=data.get("concurrency", 4),
            warm_pool=data.get("warm_pool", 1),
            trials=data.get("trials", 1),
            include=list(data.get("include") or []),
            exclude=list(data.get("exclude") or []),
            agent_env=dict(data.get("agent_env") or {}),
            retry_attempts=data.get("retry_attempts", 2),
            agent_idle_timeout=data.get("agent_idle_timeout_sec", DEFAULT_IDLE_TIMEOUT_S),
            save_outputs=bool(data.get("save_outputs")),
            max_cost_usd=budget.get("max_cost_usd"),
            max_tokens=budget.get("max_tokens"),
            max_sandbox_seconds=budget.get("max_sandbox_seconds"),
            max_rollouts=budget.get("max_rollouts"),
            token_budget=data.get("token_budget"),
            turn_budget=data.get("turn_budget"),
        )
        for key, value in overrides.items():
            if value is not None:
                setattr(spec, key, value)
        return spec
