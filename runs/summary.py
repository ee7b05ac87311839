"""summary.json and the end-of-run console block, from the trials' best-attempt results (pure).

Field names follow BenchFlow's summary.json; the console wording follows its docs line by line.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from runs import errors
from runs.results import mean_stderr, outcome_of, pass_at_k_tasks, reward_of

PHASES = ("environment_setup", "agent_setup", "agent_execution", "verifier", "total")
USAGE_KEYS = (("total_input_tokens", "n_input_tokens"), ("total_output_tokens", "n_output_tokens"),
              ("total_cache_read_tokens", "n_cache_read_tokens"),
              ("total_cache_creation_tokens", "n_cache_creation_tokens"),
              ("total_tokens", "total_tokens"))
MAX_FAILURE_LINES = 5
MAX_CAUSE_TASKS = 5
LINE_LIMIT = 100
_BUDGET_NEXT = ("trial_budget in each trial's result.json has what it used; raise --token-budget "
                "or --turn-budget if the task needs more")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return value


def _usage(result: Mapping[str, Any], key: str) -> float | None:
    agent_result = result.get("agent_result")
    return _num(agent_result.get(key)) if isinstance(agent_result, Mapping) else None


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
        for r in budgeted if isinstance(b := r["trial_budget"].get("budget"), Mapping)
    )
    tokens, turns = budgets.most_common(1)[0][0] if budgets else (None, None)
    return {
        "trials": len(budgeted),
        "stopped": len(stops),
        "by_tokens": sum(by == "tokens" for _, by in stops),
        "by_turns": sum(by == "turns" for _, by in stops),
        "tokens_used": _median_max([u["tokens"] for u in used if _num(u.get("tokens")) is not None]),
        "turns_used": _median_max([u["turns"] for u in used if _num(u.get("turns")) is not None]),
        "budget": {"tokens": tokens, "turns": turns},
        "stopped_trials": [name for name, _ in stops],
    }


def _failure_reason(result: Mapping[str, Any]) -> str:
    if result.get("verifier_error"):
        return short(result["verifier_error"], 300)
    reward = reward_of(result)
    rewards = result.get("rewards") or {}
    metrics = sorted((v, k) for k, v in rewards.items() if k != "reward" and _num(v) is not None)
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
        group = groups.setdefault((bucket, cause.headline()), {
            "bucket": bucket, "key": cause.key, "label": cause.label, "fault": cause.fault,
            "trials": [], "steps": []})
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
    return sorted(results, key=lambda r: (index.get(str(r.get("task_name")), len(index)),
                                          trial_name(r)))


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
) -> dict[str, Any]:
    """summary.json: `results` are the trials' best attempts; `not_run` the trials kept from running.

    Invariant: total = passed + failed + errored + verifier_errored; `not_run` is in none of them.
    """
    cfg = dict(settings or {})
    trials = _order([r for r in results if r is not None], plan or cfg.get("plan") or ())
    counts = Counter(outcome_of(r) for r in trials)
    total = len(trials)
    passed, failed = counts["passed"], counts["failed"]
    errored, verifier_errored = counts["errored"] + counts["interrupted"], counts["verifier_errored"]
    rewards = [x for r in trials if (x := reward_of(r)) is not None]
    categories = Counter(c for r in trials if (c := errors.error_category(r)))
    vcategories = Counter(c for r in trials if (c := errors.verifier_category(r)))
    excl = passed + failed
    summary: dict[str, Any] = {
        "job_name": job_name,
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
    summary.update(_usage_fields(trials))
    summary.update(_tool_and_timing_fields(trials))
    if budget is not None:
        block = dict(budget)
        block.setdefault("cancelled", [])
        block.setdefault("not_started", [])
        summary["budget"] = block
    summary["not_run"] = list(dict.fromkeys(not_run))
    stops = [r for r in trials if _stopped_by(r)]
    summary["budget_stops"] = len(stops)
    summary["budget_stop_rate"] = round(len(stops) / total, 4) if total else 0.0
    check = _trial_budget_check(trials)
    summary["run_checks"] = {"trial_budget": check} if check else {}
    attempts = n_attempts if n_attempts is not None else sum(
        max(int(_num(r.get("attempt")) or 1), 1) for r in trials)
    summary["n_attempts"] = attempts
    summary["retries"] = max(attempts - total, 0)
    job = job_dir if job_dir is not None else "{job}"
    summary["outcome_causes"] = _causes(trials, job, cfg.get("tasks_dir"))
    summary["failures"] = [
        {"trial": trial_name(r), "reward": reward_of(r), "reason": _failure_reason(r),
         "rollout_name": r.get("rollout_name")}
        for r in trials if outcome_of(r) == "failed"][:MAX_FAILURE_LINES]
    summary.update(_repeat_fields(trials, cfg))
    return summary


def _usage_fields(trials: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, key in USAGE_KEYS:
        values = [v for r in trials if (v := _usage(r, key)) is not None]
        out[field] = int(sum(values)) if values else None
    costs = [v for r in trials if (v := _usage(r, "cost_usd")) is not None]
    with_tokens = sum(_usage(r, "total_tokens") is not None for r in trials)
    out["total_cost_usd"] = round(sum(costs), 6) if costs else None
    out["avg_cost_per_trial_usd"] = round(sum(costs) / len(costs), 6) if costs else None
    out["telemetry_coverage"] = round(with_tokens / len(trials), 4) if trials else None
    out["usage_coverage"] = {"trials": len(trials), "with_tokens": with_tokens,
                             "with_cost": len(costs)}
    return out


def _tool_and_timing_fields(trials: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    calls = [int(v) for r in trials if (v := _num(r.get("n_tool_calls"))) is not None]
    out: dict[str, Any] = {
        "total_tool_calls": sum(calls),
        "avg_tool_calls_per_task": round(sum(calls) / len(calls), 1) if calls else None,
        "max_tool_calls_per_task": max(calls, default=None),
    }
    timings = [t for r in trials if isinstance(t := r.get("timing"), Mapping)]
    out["timing_coverage"] = round(len(timings) / len(trials), 4) if trials else None
    for phase in PHASES:
        values = [v for t in timings if (v := _num(t.get(phase))) is not None]
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


# --- console lines ---------------------------------------------------------------------------

_STYLES = {"green": "1;32", "yellow": "1;33", "red": "1;31", "err": "31", "dim": "2",
           "cyan": "36", "warn": "33"}


def _paint(text: str, style: str, color: bool) -> str:
    return f"\x1b[{_STYLES[style]}m{text}\x1b[0m" if color else text


def trial_line(result: Mapping[str, Any]) -> str:
    """`[PASS] task (reward=1.00, tools=35)`, `[FAIL] …`, `[ERR] task (error…)`."""
    name = trial_name(result)
    error = result.get("error") or result.get("verifier_error")
    tail = f" ({short(error, 50)})" if error else ""
    reward = reward_of(result)
    if reward is None:
        return f"[ERR] {name}{tail or ' (no verdict)'}"
    tools = int(_num(result.get("n_tool_calls")) or 0)
    mark = "PASS" if reward == 1.0 else "FAIL"
    return f"[{mark}] {name} (reward={reward:.2f}, tools={tools}){tail}"


def _not_run_reason(summary: Mapping[str, Any]) -> str:
    budget = summary.get("budget")
    return "budget" if isinstance(budget, Mapping) and budget.get("stopped") else "stopped"


def job_complete_line(summary: Mapping[str, Any], plan_total: int, elapsed_s: float) -> str:
    passed, total = summary["passed"], summary["total"]
    score = f"{passed}/{total} ({passed / total if total else 0.0:.1%})"
    if summary.get("not_run") or plan_total > total:
        score += f" run, {passed}/{plan_total} ({passed / plan_total if plan_total else 0.0:.1%}) of the plan"
    mean = summary.get("mean_reward")
    return (f"Job complete: {score}, mean_reward={'n/a' if mean is None else f'{mean:.2f}'}, "
            f"errors={summary['errored']}, idle_timeouts={summary.get('idle_timeout', 0)}, "
            f"time={elapsed_s / 60:.1f}min")


def duration(seconds: float) -> str:
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def cost_text(summary: Mapping[str, Any]) -> str:
    coverage = summary.get("usage_coverage") or {}
    trials = coverage.get("trials", summary.get("total", 0))
    with_tokens, with_cost = coverage.get("with_tokens", 0), coverage.get("with_cost", 0)
    tokens = summary.get("total_tokens") or 0
    token_text = f", {tokens:,} tokens" if with_tokens else ""
    no_usage = trials - with_tokens
    usage_note = f" ({no_usage} of {trials} trials reported no usage)" if no_usage else ""
    if with_cost:
        missing = trials - with_cost
        note = f" ({missing} of {trials} trials reported no cost)" if missing else ""
        return f"${summary.get('total_cost_usd') or 0.0:.2f}{token_text}{note}"
    if with_tokens and not tokens and not no_usage:
        return "none: no model tokens were used"
    if tokens:
        return ("not reported in USD (subscription logins and unpriced models report tokens "
                f"only){token_text}{usage_note}")
    if with_tokens:
        return f"not reported{usage_note}; the others used no model tokens"
    return "not reported"


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:MAX_CAUSE_TASKS])
    extra = len(names) - MAX_CAUSE_TASKS
    return shown + (f" and {extra} more" if extra > 0 else "")


def trial_budget_lines(summary: Mapping[str, Any], color: bool = False) -> list[str]:
    """The Outcomes lines for trials stopped at their per-trial budget."""
    check = (summary.get("run_checks") or {}).get("trial_budget")
    if not check or not check.get("stopped"):
        return []
    parts = [f"{check[f'by_{m}']} by {m}" for m in ("tokens", "turns") if check.get(f"by_{m}")]
    return [
        f"  {check['stopped']} stopped at their trial budget ({', '.join(parts)}; each counts 0 "
        f"unless its tests passed): {_names(check.get('stopped_trials') or [])}",
        f"      {_paint('next:', 'cyan', color)} {_BUDGET_NEXT}",
    ]


def trial_budget_card_line(summary: Mapping[str, Any]) -> str | None:
    """The run card's `Per trial:` line after the run."""
    check = (summary.get("run_checks") or {}).get("trial_budget")
    if not check:
        return None
    budget = check.get("budget") or {}
    sizes = [f"{budget[m]:,} {m[:-1] if budget[m] == 1 else m}" for m in ("tokens", "turns") if budget.get(m) is not None]
    parts = [f"{check[f'by_{m}']} by {m}" for m in ("tokens", "turns") if check.get(f"by_{m}")]
    line = (f"  Per trial: budget {' and '.join(sizes) or 'none'}; {check['stopped']} of "
            f"{check['trials']} trials stopped at it")
    line += f" ({', '.join(parts)})" if parts else ""
    for measure in ("tokens", "turns"):
        used = check.get(f"{measure}_used") or {}
        if used.get("median") is not None:
            line += f"; {measure} used: median {used['median']:,}, most {used['max']:,}"
    return line


def render_final_block(
    summary: Mapping[str, Any], job_dir: str | os.PathLike[str], *, reused: int, elapsed_s: float,
    color: bool,
) -> list[str]:
    """The end-of-run block: Score, failures, Budget, Outcomes, Cost, Time, Artifacts, Summary, View.

    Lines in BenchFlow's wording; `color` adds ANSI styles (a terminal). No leading blank line.
    """
    job = os.fspath(job_dir)
    passed, total = summary["passed"], summary["total"]
    errored, verr = summary["errored"], summary["verifier_errored"]
    not_run = summary.get("not_run") or []
    if total and passed == total and not (errored or verr or not_run):
        style, mark = "green", "✓"
    else:
        style, mark = ("yellow", "•") if passed > 0 else ("red", "✗")
    run = " run" if not_run else ""
    head = _paint(f"{mark} Score: {passed}/{total}{run} ({passed / total if total else 0.0:.1%})",
                  style, color)
    mean = summary.get("mean_reward")
    head += f", mean reward {mean:.2f}" if mean is not None else ""
    detail = f"errors={errored}" + (f" verifier-errors={verr}" if verr else "")
    head += f", {_paint(detail, 'err', color)}" if errored or verr else ", errors=0"
    if not_run:
        planned = summary.get("planned") or total + len(not_run)
        head += (f"; {len(not_run)} of {planned} planned tasks not run ({_not_run_reason(summary)}),"
                 f" so {passed}/{planned} ({passed / planned:.1%}) of the plan")
    lines = [head]
    failures = summary.get("failures") or []
    for failure in failures:
        body = short(f"✗ {failure['trial']}: {failure['reason']}", LINE_LIMIT - 2)
        lines.append(_paint(f"  {body}", "dim", color))
    if summary["failed"] > len(failures):
        lines.append(_paint(f"  … and {summary['failed'] - len(failures)} more", "dim", color))
    if failures and failures[0].get("rollout_name"):
        lines.append(_paint(f"  (details: {job}/{failures[0]['rollout_name']}/verifier)", "dim",
                            color))
    budget = summary.get("budget")
    if isinstance(budget, Mapping) and budget.get("stopped"):
        lines.append(f"{_paint('Budget:', 'warn', color)} {budget.get('reason')}; "
                     f"{len(budget.get('cancelled') or [])} running trial(s) cancelled, "
                     f"{len(budget.get('not_started') or [])} not started (not counted as "
                     "failures; resume the job to run them)")
    lines.extend(_outcome_lines(summary, job, color))
    lines.append(f"{_paint('Cost:', 'dim', color)}      {cost_text(summary)}")
    tail = f" (this run; {reused} task(s) reused from before)" if reused else ""
    lines.append(f"{_paint('Time:', 'dim', color)}      {duration(elapsed_s)}{tail}")
    lines.append(f"{_paint('Artifacts:', 'dim', color)} {job}")
    lines.append(f"{_paint('Summary:', 'dim', color)}   {job}/summary.json")
    lines.append(f"{_paint('View:', 'dim', color)}      bench view {job}")
    return lines


def _outcome_lines(summary: Mapping[str, Any], job: str, color: bool) -> list[str]:
    scored = summary["passed"] + summary["failed"]
    lines = [f"Outcomes: {scored} scored ({summary['passed']} passed, {summary['failed']} failed), "
             f"{summary['verifier_errored']} unscored, {summary['errored']} errored"]
    for group in summary.get("outcome_causes") or []:
        bucket = group["bucket"]
        word = _paint(f"{len(group['trials'])} {bucket}", "warn" if bucket == "unscored" else "err",
                      color)
        headline = f"{group['label']} ({errors.FAULT_WORDS[group['fault']]})"
        lines.append(f"  {word}: {headline}: {_names(group['trials'])}")
        lines.append(f"      {_paint('next:', 'cyan', color)} {group['next'].replace('{job}', job)}")
    limit = summary.get("usage_limit")
    if isinstance(limit, Mapping) and limit.get("not_started"):
        lines.append(f"  {len(limit['not_started'])} not started: the login's usage limit stopped "
                     f"the job; `bench eval resume {job}` runs them on another login or after the "
                     "reset")
    lines.extend(trial_budget_lines(summary, color))
    return lines
