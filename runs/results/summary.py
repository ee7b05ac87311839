"""summary.json, from the trials' best-attempt results (pure).

Field names follow BenchFlow's summary.json; the console lines are rendered in `runs/results/summary_render.py`.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runs import errors
from runs.jobfolder import finite
from runs.results.attempts import outcome_of, reward_of
from runs.results.stats import mean_stderr, pass_at_k_tasks

PHASES = ("environment_setup", "agent_setup", "agent_execution", "verifier", "total")
USAGE_KEYS = (
    ("total_input_tokens", "n_input_tokens"),
    ("total_output_tokens", "n_output_tokens"),
    ("total_cache_read_tokens", "n_cache_read_tokens"),
    ("total_cache_creation_tokens", "n_cache_creation_tokens"),
    ("total_tokens", "total_tokens"),
)
MAX_FAILURE_LINES = 5


def number(value: Any) -> float | None:
    """A finite number as it was written (an int stays one), else None."""
    return value if finite(value) is not None else None


def _usage(result: Mapping[str, Any], key: str) -> float | None:
    agent_result = result.get("agent_result")
    return number(agent_result.get(key)) if isinstance(agent_result, Mapping) else None


def trial_name(result: Mapping[str, Any]) -> str:
    return str(result.get("trial_name") or result.get("task_name") or "?")


def short(text: str, limit: int) -> str:
    """Whitespace collapsed; cut to `limit` characters ending in … when longer."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _stopped_by(result: Mapping[str, Any]) -> str | None:
    block = result.get("trial_budget")
    if isinstance(block, Mapping) and block.get("stopped_by"):
        return str(block["stopped_by"])
    return "tokens" if errors.error_category(result) == "trial_budget" else None


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _median_max(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"median": None, "max": None}
    median = statistics.median(values)
    return {"median": int(median) if median == int(median) else median, "max": max(values)}


def _trial_budget_check(results: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    budgeted = [r for r in results if isinstance(r.get("trial_budget"), Mapping)]
    if not budgeted:
        return None
    stops = [(trial_name(r), _stopped_by(r)) for r in budgeted if _stopped_by(r)]
    used = [r["trial_budget"].get("used") or {} for r in budgeted]
    budgets = Counter(
        (b.get("tokens"), b.get("turns"))
        for r in budgeted
        if isinstance(b := r["trial_budget"].get("budget"), Mapping)
    )
    tokens, turns = budgets.most_common(1)[0][0] if budgets else (None, None)
    return {
        "trials": len(budgeted),
        "stopped": len(stops),
        "by_tokens": sum(by == "tokens" for _, by in stops),
        "by_turns": sum(by == "turns" for _, by in stops),
        "tokens_used": _median_max(
            [u["tokens"] for u in used if number(u.get("tokens")) is not None]
        ),
        "turns_used": _median_max([u["turns"] for u in used if number(u.get("turns")) is not None]),
        "budget": {"tokens": tokens, "turns": turns},
        "stopped_trials": [name for name, _ in stops],
    }


def _failure_reason(result: Mapping[str, Any]) -> str:
    if result.get("verifier_error"):
        return short(result["verifier_error"], 300)
    reward = reward_of(result)
    rewards = result.get("rewards") or {}
    metrics = sorted((v, k) for k, v in rewards.items() if k != "reward" and number(v) is not None)
    if metrics:
        return f"reward {reward} — " + ", ".join(f"{k} {v}" for v, k in metrics[:4])
    if result.get("error"):
        return f"reward {reward} — {short(result['error'], 300)}"
    return f"reward {reward}"


def _causes(
    results: Sequence[Mapping[str, Any]], job: str, tasks_dir: str | None
) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for result in results:
        outcome = outcome_of(result)
        if outcome not in ("errored", "verifier_errored"):
            continue
        task = str(result.get("task_name") or "")
        cause = errors.cause_of(result, job=job, task=f"{tasks_dir}/{task}" if tasks_dir else None)
        if cause is None:
            continue
        bucket = "errored" if outcome == "errored" else "unscored"
        group = groups.setdefault(
            (bucket, cause.headline()),
            {
                "bucket": bucket,
                "key": cause.key,
                "label": cause.label,
                "fault": cause.fault,
                "trials": [],
                "steps": [],
            },
        )
        group["trials"].append(trial_name(result))
        if cause.next not in group["steps"]:
            group["steps"].append(cause.next)
    out = []
    for group in groups.values():
        steps = group.pop("steps")
        group["next"] = steps[0] + (" (and likewise for each)" if len(steps) > 1 else "")
        out.append(group)
    return sorted(out, key=lambda g: g["bucket"] != "unscored")


def _order(results: Iterable[Mapping[str, Any]], plan: Sequence[str]) -> list[Mapping[str, Any]]:
    index = {t: i for i, t in enumerate(plan)}
    return sorted(
        results, key=lambda r: (index.get(str(r.get("task_name")), len(index)), trial_name(r))
    )


def build_summary(
    *,
    job_name: str,
    results: Iterable[Mapping[str, Any] | None],
    settings: Mapping[str, Any] | None = None,
    plan_total: int | None = None,
    not_run: Sequence[str] = (),
    budget: Mapping[str, Any] | None = None,
    elapsed_sec: float | None = None,
    n_attempts: int | None = None,
    job_dir: str | None = None,
    plan: Sequence[str] = (),
    cancelled: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """summary.json: `results` are the trials' best attempts; `not_run` the trials kept from running;
    `cancelled` the timing.json records of attempts a job cap cancelled (they have no result.json): no
    trials, but what their agents spent (`agent_result`) is in the usage totals (the Cost line), as the
    cap counts it.

    Invariant: total = passed + failed + errored + verifier_errored; `not_run` is in none of them.
    """
    cfg = dict(settings or {})
    trials = _order([r for r in results if r is not None], plan or cfg.get("plan") or ())
    counts = Counter(outcome_of(r) for r in trials)
    total = len(trials)
    passed, failed = counts["passed"], counts["failed"]
    errored, verifier_errored = (
        counts["errored"] + counts["interrupted"],
        counts["verifier_errored"],
    )
    rewards = [x for r in trials if (x := reward_of(r)) is not None]
    categories = Counter(c for r in trials if (c := errors.error_category(r)))
    vcategories = Counter(c for r in trials if (c := errors.verifier_category(r)))
    excl = passed + failed
    summary: dict[str, Any] = {
        "job_name": job_name,
        # the automatic rubric review's settings, when it ran (its cost is never in this job's)
        **({"reviewer": cfg["reviewer"]} if cfg.get("reviewer") else {}),
        "agent": cfg.get("agent"),
        "model": cfg.get("model"),
        "environment": cfg.get("environment") or "docker",
        "concurrency": cfg.get("concurrency"),
        "agent_idle_timeout_sec": cfg.get("agent_idle_timeout_sec"),
        "total": total,
        "passed": passed,
        "failed": failed,
        "errored": errored,
        "verifier_errored": verifier_errored,
        "pass": passed,
        "fail": failed,
        "error": errored,
        "idle_timeout": categories.get("idle_timeout", 0),
        "error_categories": dict(categories) or None,
        "verifier_error_categories": dict(vcategories) or None,
        "score": f"{passed / total if total else 0.0:.1%}",
        "score_ratio": round(passed / total, 4) if total else 0.0,
        "score_excl_errors": f"{passed / excl if excl else 0.0:.1%}",
        "score_excl_errors_ratio": round(passed / excl, 4) if excl else 0.0,
        "mean_reward": _round(sum(rewards) / len(rewards), 4) if rewards else None,
        "elapsed_sec": _round(elapsed_sec, 1),
        "planned": plan_total if plan_total is not None else total + len(not_run),
    }
    summary.update(_usage_fields(trials, [c for c in cancelled if _spent_any(c)]))
    summary.update(_tool_and_timing_fields(trials))
    if budget is not None:
        block = dict(budget)
        block.setdefault("cancelled", [])
        block.setdefault("not_started", [])
        block.setdefault("retries_stopped", [])
        summary["budget"] = block
    summary["not_run"] = list(dict.fromkeys(not_run))
    stops = [r for r in trials if _stopped_by(r)]
    summary["budget_stops"] = len(stops)
    summary["budget_stop_rate"] = round(len(stops) / total, 4) if total else 0.0
    check = _trial_budget_check(trials)
    summary["run_checks"] = {"trial_budget": check} if check else {}
    attempts = (
        n_attempts
        if n_attempts is not None
        else sum(max(int(number(r.get("attempt")) or 1), 1) for r in trials)
    )
    summary["n_attempts"] = attempts
    summary["retries"] = max(attempts - total, 0)
    job = job_dir if job_dir is not None else "{job}"
    summary["outcome_causes"] = _causes(trials, job, cfg.get("tasks_dir"))
    summary["failures"] = [
        {
            "trial": trial_name(r),
            "reward": reward_of(r),
            "reason": _failure_reason(r),
            "rollout_name": r.get("rollout_name"),
        }
        for r in trials
        if outcome_of(r) == "failed"
    ][:MAX_FAILURE_LINES]
    summary.update(_repeat_fields(trials, cfg))
    return summary


def _spent_any(result: Mapping[str, Any]) -> bool:
    return _usage(result, "total_tokens") is not None or _usage(result, "cost_usd") is not None


def _usage_fields(
    trials: Sequence[Mapping[str, Any]], cancelled: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    spent = [*trials, *cancelled]
    out: dict[str, Any] = {}
    for field, key in USAGE_KEYS:
        values = [v for r in spent if (v := _usage(r, key)) is not None]
        out[field] = int(sum(values)) if values else None
    costs = [v for r in spent if (v := _usage(r, "cost_usd")) is not None]
    trial_costs = [v for r in trials if (v := _usage(r, "cost_usd")) is not None]
    with_tokens = sum(_usage(r, "total_tokens") is not None for r in spent)
    out["total_cost_usd"] = round(sum(costs), 6) if costs else None
    out["avg_cost_per_trial_usd"] = (
        round(sum(trial_costs) / len(trial_costs), 6) if trial_costs else None
    )
    out["telemetry_coverage"] = round(with_tokens / len(spent), 4) if spent else None
    out["usage_coverage"] = {
        "trials": len(spent),
        "with_tokens": with_tokens,
        "with_cost": len(costs),
    }
    if cancelled:
        out["usage_coverage"]["budget_cancelled_attempts"] = len(cancelled)
    return out


def _tool_and_timing_fields(trials: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    calls = [int(v) for r in trials if (v := number(r.get("n_tool_calls"))) is not None]
    out: dict[str, Any] = {
        "total_tool_calls": sum(calls),
        "avg_tool_calls_per_task": round(sum(calls) / len(calls), 1) if calls else None,
        "max_tool_calls_per_task": max(calls, default=None),
    }
    timings = [t for r in trials if isinstance(t := r.get("timing"), Mapping)]
    out["timing_coverage"] = round(len(timings) / len(trials), 4) if trials else None
    for phase in PHASES:
        values = [v for t in timings if (v := number(t.get(phase))) is not None]
        out[f"{phase}_time_sec"] = round(sum(values), 1) if values else None
        out[f"avg_{phase}_time_sec"] = round(sum(values) / len(values), 1) if values else None
        out[f"max_{phase}_time_sec"] = round(max(values), 1) if values else None
    return out


def _repeat_fields(trials: Sequence[Mapping[str, Any]], cfg: Mapping[str, Any]) -> dict[str, Any]:
    by_task: dict[str, list[Mapping[str, Any]]] = {}
    for r in trials:
        by_task.setdefault(str(r.get("task_name")), []).append(r)
    if int(cfg.get("trials") or 1) <= 1 and all(len(v) <= 1 for v in by_task.values()):
        return {}
    samples = [[x for r in rs if (x := reward_of(r)) is not None] for rs in by_task.values()]
    top = max((len(s) for s in samples), default=0)
    scored = mean_stderr([x for s in samples for x in s])
    with_errors = mean_stderr([reward_of(r) or 0.0 for r in trials])
    return {
        "pass_at_k": {str(k): _round(pass_at_k_tasks(samples, k), 4) for k in range(1, top + 1)},
        "mean_reward_stderr": _round(scored["stderr"], 4),
        "mean_reward_with_errors": _round(with_errors["mean"], 4),
        "mean_reward_with_errors_stderr": _round(with_errors["stderr"], 4),
    }
