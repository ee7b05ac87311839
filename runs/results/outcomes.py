"""The outcomes grid and the Pareto view over one job or several, as compact data (pure).

A grid is rows of tasks and one column per job; a cell holds the task's trials in that job. Each
trial is one character of its cell's string (`code`), so a 100,000-trial job is ~100 KB of JSON
that static/viewer/grid.js draws on a canvas, not 100,000 DOM nodes:

    a..k  scored, reward rounded to tenths (a = 0, k = 1)     A..K  the same, retried
    l..v  scored though errored (agent timeout, say)          L..V  the same, retried
    x     unscored (errored, verifier errored, interrupted)   X     the same, retried
    R running · W waiting · N not run · C cancelled

What a character cannot say (a reward between tenths, an unscored trial's cause, a trial whose
name is not `task` / `task#N` by its place) is in the column's sparse `extra`, keyed by the
trial's place in the column (its cell's row, then its place in the cell).

pass@1 per column: each task's passed/scored trials, averaged over the tasks with a scored trial,
with a 95% bootstrap interval resampling tasks. The Pareto view: per job, the mean per trial of
cost, tokens, sandbox-seconds and wall time against the mean reward, each with a 95% bootstrap
interval over trials, and the frontier (no other job costs less and scores more).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runs.results.compare import pair_key, paired_bootstrap_ci

LEVELS = "abcdefghijk"
RETRIED = LEVELS.upper()
ERRORED_SCORED = "lmnopqrstuv"
ERRORED_SCORED_RETRIED = ERRORED_SCORED.upper()
UNSCORED, UNSCORED_RETRIED = "x", "X"
STATE_CODES = {"running": "R", "waiting": "W", "not_run": "N"}
CANCELLED = "C"
ERRORED_OUTCOMES = ("errored", "verifier_errored", "interrupted")
COST_MEASURES = ("cost_usd", "total_tokens", "sandbox_s", "duration_s")
MEASURE_NAMES = {
    "cost_usd": "cost (USD)",
    "total_tokens": "tokens",
    "sandbox_s": "sandbox-seconds",
    "duration_s": "wall time (s)",
}


@dataclass(frozen=True)
class TrialRow:
    """What the grid needs of a trial (the index's Trial row, or a loaded job's)."""

    name: str
    task: str
    trial_index: int
    state: str
    outcome: str
    reward: float | None
    n_attempts: int = 1
    cause: str = ""  # why errored or unscored, with whose problem
    cost_usd: float | None = None
    total_tokens: int | None = None
    sandbox_s: float | None = None  # its attempts' sandbox time (result.json timing.total)
    duration_s: float | None = None


def code(t: TrialRow) -> str:
    """The trial's one character in the grid."""
    retried = t.n_attempts > 1
    if t.outcome == "cancelled":
        return CANCELLED
    if t.state in STATE_CODES:
        return STATE_CODES[t.state]
    if t.reward is None:
        return UNSCORED_RETRIED if retried else UNSCORED
    level = min(10, max(0, round(10 * t.reward)))
    errored = t.outcome in ERRORED_OUTCOMES or bool(t.cause)
    alphabet = (
        (ERRORED_SCORED_RETRIED if retried else ERRORED_SCORED)
        if errored
        else (RETRIED if retried else LEVELS)
    )
    return alphabet[level]


def passed(t: TrialRow) -> bool:
    return t.outcome == "passed" or (t.reward is not None and t.reward >= 1.0)


@dataclass
class Column:
    """One job's column: its label, its link, its cells (one string per row) and pass@1."""

    key: str
    label: str
    href: str  # the trial's link is href + its name + suffix
    suffix: str = "/"
    cells: list[str] = field(default_factory=list)
    extra: dict[str, list[Any]] = field(default_factory=dict)  # place -> [name, reward, cause]
    pass1: float | None = None
    ci: tuple[float, float] | None = None
    n_tasks: int = 0
    n_trials: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "href": self.href,
            "suffix": self.suffix,
            "cells": self.cells,
            "extra": self.extra,
            "pass1": self.pass1,
            "ci": list(self.ci) if self.ci else None,
            "n_tasks": self.n_tasks,
            "n_trials": self.n_trials,
        }


BOOTSTRAP_MAX = 2000  # values a bootstrap resamples; beyond, the normal interval (they agree there)


def mean_interval(values: list[float]) -> tuple[float, float] | None:
    """The 95% interval of the mean: a seeded bootstrap (runs/results/compare.py) up to
    BOOTSTRAP_MAX values, the normal approximation beyond (100,000 tasks stay quick)."""
    n = len(values)
    if n <= BOOTSTRAP_MAX:
        return paired_bootstrap_ci(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = 1.96 * sd / math.sqrt(n)
    return mean - half, mean + half


def pass_at_1(trials: Iterable[TrialRow]) -> tuple[float | None, tuple[float, float] | None, int]:
    """Mean over tasks of passed/scored trials, its 95% interval (tasks resampled) and the tasks."""
    by_task: dict[str, list[bool]] = {}
    for t in trials:
        if t.reward is not None and t.state == "done":
            by_task.setdefault(t.task, []).append(passed(t))
    rates = [sum(v) / len(v) for v in by_task.values()]
    if not rates:
        return None, None, 0
    return sum(rates) / len(rates), mean_interval(rates), len(rates)


def column(
    key: str, label: str, href: str, trials: Sequence[TrialRow], tasks: list[str], suffix: str = "/"
) -> Column:
    """A job's column over the grid's rows (`tasks`, each task in it once)."""
    by_task: dict[str, list[TrialRow]] = {}
    for t in trials:
        by_task.setdefault(t.task, []).append(t)
    col = Column(key, label, href, suffix, n_trials=len(trials))
    place = 0
    for task in tasks:
        row = sorted(by_task.get(task, []), key=lambda t: t.trial_index)
        col.cells.append("".join(code(t) for t in row))
        for k, t in enumerate(row):
            name = t.name if t.name != pair_key(task, k) else None
            reward = (
                t.reward if t.reward is not None and round(10 * t.reward) != 10 * t.reward else None
            )
            cause = t.cause or None
            if name or reward is not None or cause:
                col.extra[str(place)] = [name, reward, cause or None]
            place += 1
    col.pass1, col.ci, col.n_tasks = pass_at_1(trials)
    return col


def task_rows(jobs: Iterable[Sequence[TrialRow]]) -> list[str]:
    """The grid's rows: every task, in the order the jobs' plans first name it."""
    seen: dict[str, None] = {}
    for trials in jobs:
        for t in trials:
            seen.setdefault(t.task, None)
    return list(seen)


ROW_FILTERS = {
    "all": "every task",
    "differ": "tasks whose pass rate differs between columns",
    "unsolved": "tasks no trial passed",
    "errored": "tasks with an unscored or errored trial",
}


def keep_row(cells: Sequence[str], show: str) -> bool:
    """Whether a row passes the grid's filter (`ROW_FILTERS`), from its cells' codes."""
    if show == "unsolved":
        return not any(c in (LEVELS[10], RETRIED[10]) for cell in cells for c in cell)
    if show == "errored":
        bad = set(ERRORED_SCORED + ERRORED_SCORED_RETRIED + UNSCORED + UNSCORED_RETRIED)
        return any(c in bad for cell in cells for c in cell)
    if show == "differ":
        rates = {_pass_rate(cell) for cell in cells if _pass_rate(cell) is not None}
        return len(rates) > 1
    return True


def _pass_rate(cell: str) -> float | None:
    scored = [c for c in cell if c.lower() in LEVELS or c.lower() in ERRORED_SCORED]
    if not scored:
        return None
    return sum(c.lower() in (LEVELS[10], ERRORED_SCORED[10]) for c in scored) / len(scored)


def grid(columns: list[Column], tasks: list[str], show: str = "all") -> dict[str, Any]:
    """The `benchflow.outcomes` document the canvas draws: rows, columns, and the filter applied
    (a filtered-out row keeps its place numbers: the columns' `extra` stays valid; `starts`, each
    kept row's first place, is there only when rows were left out, else it is the running sum of
    the cells' lengths)."""
    keep = [i for i in range(len(tasks)) if keep_row([c.cells[i] for c in columns], show)]
    offsets = []
    for c in columns:
        at, starts = 0, []
        for cell in c.cells:
            starts.append(at)
            at += len(cell)
        offsets.append(starts)
    return {
        "kind": "benchflow.outcomes",
        "schema_version": 1,
        "tasks": [tasks[i] for i in keep],
        "columns": [
            {
                **c.as_json(),
                "cells": [c.cells[i] for i in keep],
                **({"starts": [o[i] for i in keep]} if len(keep) < len(tasks) else {}),
            }
            for c, o in zip(columns, offsets, strict=True)
        ],
        "hidden_rows": len(tasks) - len(keep),
        "show": show,
    }


@dataclass
class ParetoPoint:
    key: str
    label: str
    reward: float | None
    reward_ci: tuple[float, float] | None
    means: dict[str, float | None]  # measure -> mean per trial
    cis: dict[str, tuple[float, float] | None]
    n: int
    frontier: dict[str, bool] = field(default_factory=dict)  # measure -> on the frontier

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "reward": self.reward,
            "reward_ci": self.reward_ci,
            "means": self.means,
            "cis": self.cis,
            "n": self.n,
            "frontier": self.frontier,
        }


def _mean_ci(values: list[float]) -> tuple[float | None, tuple[float, float] | None]:
    if not values:
        return None, None
    return sum(values) / len(values), mean_interval(values)


def pareto_point(key: str, label: str, trials: Sequence[TrialRow]) -> ParetoPoint:
    """A job's point: over its finished trials, the mean reward (unscored as 0, the way a user
    pays for them) and each cost measure's mean over the trials that have it."""
    done = [t for t in trials if t.state == "done" and t.outcome != "cancelled"]
    reward, reward_ci = _mean_ci([t.reward if t.reward is not None else 0.0 for t in done])
    means: dict[str, float | None] = {}
    cis: dict[str, tuple[float, float] | None] = {}
    for measure in COST_MEASURES:
        values = [float(v) for t in done if (v := getattr(t, measure)) is not None]
        means[measure], cis[measure] = _mean_ci(values)
    return ParetoPoint(key, label, reward, reward_ci, means, cis, len(done))


def mark_frontier(points: list[ParetoPoint]) -> None:
    """For each measure: a point is on the frontier when no other point costs no more and scores
    no less, being better in one of the two."""
    for measure in COST_MEASURES:
        have = [p for p in points if p.reward is not None and p.means[measure] is not None]
        for p in points:
            p.frontier[measure] = p in have and not any(
                _dominates(q, p, measure) for q in have if q is not p
            )


def _dominates(q: ParetoPoint, p: ParetoPoint, measure: str) -> bool:
    qc, pc = q.means[measure], p.means[measure]
    assert qc is not None and pc is not None and q.reward is not None and p.reward is not None
    return qc <= pc and q.reward >= p.reward and (qc < pc or q.reward > p.reward)


def pareto(points: list[ParetoPoint]) -> dict[str, Any]:
    mark_frontier(points)
    return {"measures": MEASURE_NAMES, "points": [p.as_json() for p in points]}
