"""Reading a job folder into trials and the job's counts (no Django, no database): `load_job`.

Its attempts, and which is a trial's best, are read in `runs/results/attempts.py`, its own documents
(ours or a Harbor job's) in `runs/results/job_documents.py`; rendering lives in
`runs/results/render.py`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from runs import errors
from runs.results.attempts import (
    Attempt,
    Outcome,
    newest_scored_else_newest,
    no_gc,
    oldest_first,
    read_attempts,
    reward_of,
)
from runs.results.job_documents import read_job

AttemptsMode = Literal["best", "all"]
CONTROL_AGENTS = {"oracle": "oracle", "nop": "empty"}


def execution_of(result: Mapping[str, Any] | None) -> str:
    """completed | errored | timed_out | integration_failed (BenchFlow's trial `execution`)."""
    if result is None:
        return "errored"
    category = errors.error_category(result)
    if category is None or category == "trial_budget":
        return "completed"
    if category == "agent_integration":
        return "integration_failed"
    return "timed_out" if category in ("timeout", "idle_timeout") else "errored"


def assessment_of(result: Mapping[str, Any] | None) -> str:
    """scored | error (the verifier failed) | unscored."""
    if reward_of(result) is not None:
        return "scored"
    return "error" if result and result.get("verifier_error") else "unscored"


@dataclass(slots=True)
class Trial:
    """A trial (all attempts of one task repeat); its fields come from the chosen attempt."""

    task: str
    trial_name: str
    trial_index: int
    agent: str | None
    model: str | None
    reward: float | None
    outcome: Outcome
    execution: str
    assessment: str
    control: str | None
    error: str | None
    error_category: str | None
    verifier_error: str | None
    verifier_error_category: str | None
    cost_usd: float | None
    total_tokens: int | None
    attempts: list[Attempt] = field(default_factory=list)
    chosen: Attempt | None = None

    @property
    def result(self) -> dict[str, Any] | None:
        return self.chosen.result if self.chosen else None

    @property
    def retried(self) -> bool:
        return len(self.attempts) > 1

    def cause(self, job_dir: str | None = None) -> errors.Cause | None:
        if self.chosen is not None and self.chosen.corrupt:
            return errors.cause_of({"error": self.error, "error_category": "corrupt_result"})
        if self.outcome == "cancelled":  # no result.json: its cause is the job cap's
            return errors.cause_of(
                {"error": self.error, "error_category": self.error_category}, job=job_dir
            )
        return errors.cause_of(self.result, job=job_dir)


def _control(agent: str | None, task: str) -> str | None:
    if agent in CONTROL_AGENTS:
        return CONTROL_AGENTS[agent]
    if task.endswith("__o"):
        return "oracle"
    return "empty" if task.endswith("__e") else None


def _trial(chosen: Attempt, attempts: list[Attempt], settings: Mapping[str, Any]) -> Trial:
    result = chosen.result
    agent = chosen.get("agent") or settings.get("agent")
    model = chosen.get("model") or settings.get("model")
    tokens = chosen.usage("total_tokens")
    cancelled = chosen.budget_cancelled  # no result.json: timing.json says a job cap cancelled it
    return Trial(
        task=chosen.task,
        trial_name=chosen.trial_name,
        trial_index=chosen.trial_index,
        agent=agent,
        model=model,
        reward=chosen.reward,
        outcome=chosen.outcome,
        execution="cancelled" if cancelled else execution_of(result),
        assessment="scored" if chosen.reward is not None else assessment_of(result),
        control=_control(agent, chosen.task),
        error=chosen.error,
        error_category=errors.error_category(result)
        if result
        else "budget_cancelled"
        if cancelled
        else "corrupt_result"
        if chosen.corrupt
        else "interrupted",
        verifier_error=chosen.get("verifier_error"),
        verifier_error_category=errors.verifier_category(result) if result else None,
        cost_usd=chosen.usage("cost_usd"),
        total_tokens=int(tokens) if tokens is not None else None,
        attempts=attempts,
        chosen=chosen,
    )


def mean_of(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


@dataclass(slots=True)
class NotRun:
    """A trial a job cap kept from running: cancelled while it ran, or never started. No failure."""

    trial_name: str
    why: Literal["cancelled", "not started"]
    attempts: list[Attempt] = field(default_factory=list)


@dataclass
class Job:
    """A loaded job folder. `trials` has one Trial per trial ("best") or per attempt ("all");
    trials a job cap kept from running are in `not_run`, not in `trials`."""

    path: str
    settings: dict[str, Any]
    attempts: list[Attempt]
    best_trials: list[Trial]
    mode: AttemptsMode = "best"
    trials: list[Trial] = field(default_factory=list)
    not_run: list[NotRun] = field(default_factory=list)

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.path))

    @property
    def interrupted(self) -> list[Attempt]:
        return [a for a in self.attempts if a.result is None and not a.budget_cancelled]

    def counted(self, include_controls: bool = False) -> list[Trial]:
        """The trials (or attempts) the counts are over: a job cap's cancelled attempts are none."""
        return [
            t
            for t in self.trials
            if (include_controls or t.control is None) and t.outcome != "cancelled"
        ]

    def denominators(self, include_controls: bool = False) -> dict[str, Any]:
        """BenchFlow's counts: scored trials have a reward; errors never count as 0."""
        trials = self.counted(include_controls)
        scored = [t for t in trials if t.assessment == "scored"]
        clean = [t for t in scored if t.execution == "completed"]
        return {
            "attempted": len(trials),
            "scored": len(scored),
            "assessment_errors": sum(t.assessment == "error" for t in trials),
            "unscored": sum(t.assessment == "unscored" for t in trials),
            "execution_errors": sum(t.execution != "completed" for t in trials),
            "passed": sum(t.outcome == "passed" for t in trials),
            "mean_reward": mean_of([t.reward for t in scored if t.reward is not None]),
            "clean_scored": len(clean),
            "clean_passed": sum(t.outcome == "passed" for t in clean),
            "controls_excluded": 0
            if include_controls
            else sum(t.control is not None and t.outcome != "cancelled" for t in self.trials),
            "budget_cancelled": sum(n.why == "cancelled" for n in self.not_run),
            "budget_not_started": sum(n.why == "not started" for n in self.not_run),
        }

    @property
    def pass_rate_scored(self) -> float | None:
        d = self.denominators()
        return _ratio(d["passed"], d["scored"])

    @property
    def pass_rate_attempted(self) -> float | None:
        d = self.denominators()
        return _ratio(d["passed"], d["attempted"])


def _plan_order(settings: Mapping[str, Any]) -> dict[str, int]:
    plan = settings.get("plan")
    return {str(t): i for i, t in enumerate(plan)} if isinstance(plan, list) else {}


def load_job(path: str | os.PathLike[str], attempts: AttemptsMode = "best") -> Job:
    """Load a job folder: trials in plan order (then by name), each with its attempts oldest first."""
    if attempts not in ("best", "all"):
        raise ValueError(f"attempts must be 'best' or 'all', not {attempts!r}")
    job_dir = os.fspath(path)
    documents = read_job(job_dir)
    settings = documents.settings
    all_attempts = read_attempts(job_dir)
    groups: dict[str, list[Attempt]] = {}
    for attempt in all_attempts:
        groups.setdefault(attempt.trial_name, []).append(attempt)
    order = _plan_order(settings)
    best: list[Trial] = []
    not_run: list[NotRun] = []
    with no_gc():
        for name, members in groups.items():
            ordered = oldest_first(members)
            chosen = newest_scored_else_newest(ordered)
            if chosen.budget_cancelled:  # every attempt it had, a cap cancelled
                not_run.append(NotRun(name, "cancelled", ordered))
            else:
                best.append(_trial(chosen, ordered, settings))
    best.sort(key=lambda t: (order.get(t.task, len(order)), t.task, t.trial_index, t.trial_name))
    not_run += [
        NotRun(name, "not started")
        for name in _budget_not_started(documents.summary)
        if name not in groups
    ]
    job = Job(job_dir, settings, all_attempts, best, "best", best, not_run)
    return with_mode(job, attempts)


def _budget_not_started(summary: Mapping[str, Any] | None) -> list[str]:
    """Trials a job cap kept from starting, as the job's summary.json lists them (they have no folder)."""
    budget = summary.get("budget") if isinstance(summary, Mapping) else None
    names = budget.get("not_started") if isinstance(budget, dict) else None
    return [str(n) for n in names] if isinstance(names, list) else []


def with_mode(job: Job, attempts: AttemptsMode) -> Job:
    """The same job listing one row per trial ("best") or per attempt ("all")."""
    if attempts == job.mode:
        return job
    if attempts == "best":
        trials = job.best_trials
    else:
        trials = [_trial(a, t.attempts, job.settings) for t in job.best_trials for a in t.attempts]
    return Job(job.path, job.settings, job.attempts, job.best_trials, attempts, trials, job.not_run)
