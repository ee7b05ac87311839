"""Console lines from results and summary.json: each trial's, Job complete, the end-of-run block (pure).

The wording follows BenchFlow's docs line by line; `color` adds ANSI styles (a terminal).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from runs import errors
from runs.results.attempts import reward_of
from runs.results.summary import number, short, trial_name

MAX_CAUSE_TASKS = 5
LINE_LIMIT = 100
_BUDGET_NEXT = (
    "trial_budget in each trial's result.json has what it used; raise --token-budget "
    "or --turn-budget if the task needs more"
)

_STYLES = {
    "green": "1;32",
    "yellow": "1;33",
    "red": "1;31",
    "err": "31",
    "dim": "2",
    "cyan": "36",
    "warn": "33",
}


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
    tools = int(number(result.get("n_tool_calls")) or 0)
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
    return (
        f"Job complete: {score}, mean_reward={'n/a' if mean is None else f'{mean:.2f}'}, "
        f"errors={summary['errored']}, idle_timeouts={summary.get('idle_timeout', 0)}, "
        f"time={elapsed_s / 60:.1f}min"
    )


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
        return (
            "not reported in USD (subscription logins and unpriced models report tokens "
            f"only){token_text}{usage_note}"
        )
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
    sizes = [
        f"{budget[m]:,} {m[:-1] if budget[m] == 1 else m}"
        for m in ("tokens", "turns")
        if budget.get(m) is not None
    ]
    parts = [f"{check[f'by_{m}']} by {m}" for m in ("tokens", "turns") if check.get(f"by_{m}")]
    line = (
        f"  Per trial: budget {' and '.join(sizes) or 'none'}; {check['stopped']} of "
        f"{check['trials']} trials stopped at it"
    )
    line += f" ({', '.join(parts)})" if parts else ""
    for measure in ("tokens", "turns"):
        used = check.get(f"{measure}_used") or {}
        if used.get("median") is not None:
            line += f"; {measure} used: median {used['median']:,}, most {used['max']:,}"
    return line


def render_final_block(
    summary: Mapping[str, Any],
    job_dir: str | os.PathLike[str],
    *,
    reused: int,
    elapsed_s: float,
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
    head = _paint(
        f"{mark} Score: {passed}/{total}{run} ({passed / total if total else 0.0:.1%})",
        style,
        color,
    )
    mean = summary.get("mean_reward")
    head += f", mean reward {mean:.2f}" if mean is not None else ""
    detail = f"errors={errored}" + (f" verifier-errors={verr}" if verr else "")
    head += f", {_paint(detail, 'err', color)}" if errored or verr else ", errors=0"
    if not_run:
        planned = summary.get("planned") or total + len(not_run)
        head += (
            f"; {len(not_run)} of {planned} planned tasks not run ({_not_run_reason(summary)}),"
            f" so {passed}/{planned} ({passed / planned:.1%}) of the plan"
        )
    lines = [head]
    failures = summary.get("failures") or []
    for failure in failures:
        body = short(f"✗ {failure['trial']}: {failure['reason']}", LINE_LIMIT - 2)
        lines.append(_paint(f"  {body}", "dim", color))
    if summary["failed"] > len(failures):
        lines.append(_paint(f"  … and {summary['failed'] - len(failures)} more", "dim", color))
    if failures and failures[0].get("rollout_name"):
        lines.append(
            _paint(f"  (details: {job}/{failures[0]['rollout_name']}/verifier)", "dim", color)
        )
    budget = summary.get("budget")
    if (
        isinstance(budget, Mapping)
        and budget.get("stopped")
        # a cap met exactly by the plan kept nothing from running: nothing to say
        and any(budget.get(k) for k in ("cancelled", "not_started", "retries_stopped"))
    ):
        lines.append(
            f"{_paint('Budget:', 'warn', color)} {budget.get('reason')}; "
            f"{len(budget.get('cancelled') or [])} running trial(s) cancelled, "
            f"{len(budget.get('not_started') or [])} not started (not counted as "
            f"failures; resume the job to run them){_retries_stopped(budget)}"
        )
    lines.extend(_outcome_lines(summary, job, color))
    lines.append(f"{_paint('Cost:', 'dim', color)}      {cost_text(summary)}")
    tail = f" (this run; {reused} task(s) reused from before)" if reused else ""
    lines.append(f"{_paint('Time:', 'dim', color)}      {duration(elapsed_s)}{tail}")
    lines.append(f"{_paint('Artifacts:', 'dim', color)} {job}")
    lines.append(f"{_paint('Summary:', 'dim', color)}   {job}/summary.json")
    lines.append(f"{_paint('View:', 'dim', color)}      bench view {job}")
    return lines


def _retries_stopped(budget: Mapping[str, Any]) -> str:
    """Errored trials whose retry the cap stopped are no "not started" trials: they count as errored."""
    n = len(budget.get("retries_stopped") or [])
    if not n:
        return ""
    return f"; {n} errored trial(s) not retried (the cap stopped their retry; their last attempt counts)"


def _outcome_lines(summary: Mapping[str, Any], job: str, color: bool) -> list[str]:
    scored = summary["passed"] + summary["failed"]
    lines = [
        f"Outcomes: {scored} scored ({summary['passed']} passed, {summary['failed']} failed), "
        f"{summary['verifier_errored']} unscored, {summary['errored']} errored"
    ]
    for group in summary.get("outcome_causes") or []:
        bucket = group["bucket"]
        word = _paint(
            f"{len(group['trials'])} {bucket}", "warn" if bucket == "unscored" else "err", color
        )
        headline = f"{group['label']} ({errors.FAULT_WORDS[group['fault']]})"
        lines.append(f"  {word}: {headline}: {_names(group['trials'])}")
        lines.append(
            f"      {_paint('next:', 'cyan', color)} {group['next'].replace('{job}', job)}"
        )
    limit = summary.get("usage_limit")
    if isinstance(limit, Mapping) and limit.get("not_started"):
        lines.append(
            f"  {len(limit['not_started'])} not started: the login's usage limit stopped "
            f"the job; `bench eval resume {job}` runs them on another login or after the "
            "reset"
        )
    lines.extend(trial_budget_lines(summary, color))
    return lines
