"""A trial's own budget (--token-budget / --turn-budget, or the task's [agent]), held by the proxy.

The proxy refuses the call that would pass it (HTTP 400 trial_budget_spent); the runner stops the
agent and the verifier grades what it left. An agent whose calls go around the proxy cannot be
held to one, so such a trial is refused before its agent starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runs.agents.base import BASE_URL_VARS, Agent
from runs.tasks.load import Task


@dataclass
class TrialBudget:
    tokens: int | None
    turns: int | None
    source: dict[str, str | None]

    @property
    def active(self) -> bool:
        return self.tokens is not None or self.turns is not None


def trial_budget_for(task: Task, token_budget: int | None, turn_budget: int | None) -> TrialBudget:
    """A measure the run sets replaces the task's."""
    tokens = token_budget if token_budget is not None else task.agent.token_budget
    turns = turn_budget if turn_budget is not None else task.agent.turn_budget
    return TrialBudget(
        tokens,
        turns,
        {
            "tokens": "run"
            if token_budget is not None
            else ("task" if tokens is not None else None),
            "turns": "run" if turn_budget is not None else ("task" if turns is not None else None),
        },
    )


def budget_bypass(agent: Agent, agent_env: dict[str, str]) -> str | None:
    """Why the agent's model calls would go around the proxy (the same rule as bench run's check)."""
    if agent.login:
        return "a Claude login calls Anthropic directly"
    if bypass := [k for k in agent_env if k in BASE_URL_VARS]:
        return f"--agent-env {bypass[0]} gives the agent an endpoint of its own"
    if not agent.needs_model and not agent.model and agent.name.startswith("script:"):
        return "a script agent without -m may call a model of its own"
    return None


def budget_stop_text(measure: str | None, at: dict[str, int], budget: TrialBudget) -> str:
    """The error of a trial the budget stopped: which measure, its size, and what was used."""
    limit = budget.tokens if measure == "tokens" else budget.turns
    unit = "token" if measure == "tokens" else "turn"
    return (
        f"trial budget reached: the {unit} budget of {limit:,} is spent ({at['tokens']:,} tokens, "
        f"{at['turns']} turn{'' if at['turns'] == 1 else 's'} used when the model proxy refused the next call); the agent was stopped "
        "and the verifier graded what it left"
    )


def stopped_at(usage: Any) -> dict[str, int]:
    """Where the proxy stopped the trial (what was used when it refused), else its totals."""
    return usage.stopped_at or {"tokens": usage.total_tokens, "turns": usage.turns}
