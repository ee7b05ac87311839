"""pass@k and mean reward ± standard error, over a job's trials or over per-task rewards (pure).

Over a job, controls are left out and each trial counts once, by its best attempt.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from runs.results.load import Job, Trial, mean_of


def _by_task(job: Job) -> dict[str, list[Trial]]:
    tasks: dict[str, list[Trial]] = {}
    for trial in job.best_trials:
        if trial.control is None:
            tasks.setdefault(trial.task, []).append(trial)
    return tasks


def pass_at_k_estimate(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with n samples, c of them successes: 1 - C(n-c,k)/C(n,k)."""
    if k > n:
        raise ValueError("pass@k needs n >= k")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_k_tasks(samples: Iterable[Sequence[float]], k: int) -> float | None:
    """Mean pass@k over tasks with at least k scored samples (success: reward == 1); None if none."""
    values = [
        pass_at_k_estimate(len(s), sum(r == 1.0 for r in s), k) for s in samples if len(s) >= k
    ]
    return mean_of(values)


def pass_at_k(job: Job, k: int) -> float | None:
    """pass@k over the job's best-attempt trials, grouped by task (controls left out)."""
    return pass_at_k_table(job, [k])[k]


def pass_at_k_table(job: Job, ks: Iterable[int]) -> dict[int, float | None]:
    samples = [[t.reward for t in ts if t.reward is not None] for ts in _by_task(job).values()]
    return {k: pass_at_k_tasks(samples, k) for k in ks}


def mean_stderr(values: Sequence[float]) -> dict[str, Any]:
    """{"n", "mean", "stderr"}: the standard error uses the sample deviation (n-1)."""
    n = len(values)
    mean = mean_of(values)
    stderr = None
    if n >= 2 and mean is not None:
        variance = sum((v - mean) ** 2 for v in values) / (n - 1)
        stderr = math.sqrt(variance / n)
    return {"n": n, "mean": mean, "stderr": stderr}


def reward_stats(job: Job) -> dict[str, dict[str, Any]]:
    """Mean reward ± standard error over scored trials, and over all trials (errors as 0)."""
    trials = [t for ts in _by_task(job).values() for t in ts]
    scored = [t.reward for t in trials if t.reward is not None]
    with_errors = [t.reward if t.reward is not None else 0.0 for t in trials]
    return {"scored": mean_stderr(scored), "with_errors": mean_stderr(with_errors)}
