"""What `bench results JOB` prints: denominators first, then one row per trial (or per attempt)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from runs.jobfolder import read_object
from runs.results.attempts import best_attempt
from runs.results.load import AttemptsMode, Job, Trial, with_mode
from runs.results.stats import pass_at_k_table, reward_stats

REVIEWS = "reviews.json"  # the job's notes and verdicts, written by runs/review/human.py

TRIAL_COLUMNS = (
    "Task",
    "Reward",
    "Outcome",
    "Attempts",
    "Agent",
    "Model",
    "Cost",
    "Tokens",
    "Cause",
)
ATTEMPT_COLUMNS = (
    "Task",
    "Attempt",
    "Folder",
    "Best",
    "Reward",
    "Outcome",
    "Agent",
    "Model",
    "Cost",
    "Tokens",
    "Cause",
)


def _pct(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "n/a"


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def denominator_lines(job: Job) -> list[str]:
    """The counts that say what the pass rates divide by."""

    d = job.denominators()
    unit = "attempts" if job.mode == "all" else "trials"
    lines = [
        f"Job:       {job.path}",
        f"Agent:     {job.settings.get('agent') or '-'}, model {job.settings.get('model') or '-'}",
        f"Counted:   {d['attempted']} {unit} attempted, {d['scored']} scored "
        f"({d['passed']} passed), {d['assessment_errors']} assessment errors, "
        f"{d['unscored']} unscored, {d['execution_errors']} execution errors",
        f"Pass rate: {_pct(d['passed'], d['scored'])} of scored ({d['passed']}/{d['scored']}), "
        f"{_pct(d['passed'], d['attempted'])} of attempted ({d['passed']}/{d['attempted']}); "
        f"mean reward {_num(d['mean_reward'], '.2f')}",
        f"Clean:     {d['clean_passed']}/{d['clean_scored']} scored runs that completed passed",
    ]
    if d["controls_excluded"]:
        if not d["attempted"]:  # a job of controls only: what they did is the whole answer
            del lines[2:5]
        lines.append(control_line(job, only=not d["attempted"]))
    if job.not_run:
        names = ", ".join(f"{n.trial_name} ({n.why})" for n in job.not_run)
        lines.append(
            f"Not run:   {len(job.not_run)} trials a job cap kept from running, not counted as "
            f"failures: {names}"
        )
    retried = sum(1 for t in job.best_trials if t.retried)
    interrupted = len(job.interrupted)
    n_attempts = sum(len(t.attempts) for t in job.best_trials)
    lines.append(
        f"Attempts:  {n_attempts} over {len(job.best_trials)} trials "
        f"({retried} needed a retry, {interrupted} interrupted)"
    )
    if _has_repeats(job):
        rates = pass_at_k_table(job, (1, 2, 3, 5, 10))
        parts = [f"pass@{k} {v:.3f}" for k, v in rates.items() if v is not None]
        stats = reward_stats(job)
        s, e = stats["scored"], stats["with_errors"]
        lines.append(
            f"Repeats:   {', '.join(parts) or 'pass@k n/a'}; mean reward "
            f"{_num(s['mean'], '.3f')} ± {_num(s['stderr'], '.3f')} (scored, n={s['n']}), "
            f"{_num(e['mean'], '.3f')} ± {_num(e['stderr'], '.3f')} "
            f"(errors as 0, n={e['n']})"
        )
    return lines


def control_line(job: Job, only: bool = False) -> str:
    """What the control runs (oracle, nop) did, by outcome: they check the tasks, not an agent."""
    runs = [t for t in job.trials if t.control is not None and t.outcome != "cancelled"]
    kinds = ", ".join(sorted({t.control or "" for t in runs}))
    counts: dict[str, int] = {}
    for t in runs:
        counts[t.outcome] = counts.get(t.outcome, 0) + 1
    order = ("passed", "failed", "errored", "verifier_errored", "interrupted")
    words = {"verifier_errored": "verifier errors"}
    done = ", ".join(f"{counts[o]} {words.get(o, o)}" for o in order if counts.get(o))
    scored = counts.get("passed", 0) + counts.get("failed", 0)
    rate = f"; {_pct(counts.get('passed', 0), scored)} of scored passed" if scored else ""
    tail = " (no agent was measured)" if only else ", left out of the rates above"
    return f"Controls:  {len(runs)} control runs ({kinds}): {done}{rate}{tail}"


def _cause_cell(trial: Trial) -> str:
    if trial.reward is None:
        cause = trial.cause()
        return cause.headline() if cause else ""
    if trial.error_category == "trial_budget":
        return "stopped at its trial budget"
    return trial.error_category or ""


def _row(trial: Trial, mode: str) -> list[str]:
    cost = "-" if trial.cost_usd is None else f"${trial.cost_usd:.4f}"
    tokens = "-" if trial.total_tokens is None else f"{trial.total_tokens:,}"
    common = [_num(trial.reward, ".2f"), trial.outcome]
    tail = [trial.agent or "-", trial.model or "-", cost, tokens, _cause_cell(trial)]
    if mode == "all" and trial.chosen is not None:
        number = str(trial.attempts.index(trial.chosen) + 1)
        best = "*" if trial.chosen is best_attempt(trial.attempts) else ""
        return [trial.trial_name, number, trial.chosen.folder, best, *common, *tail]
    return [trial.trial_name, *common, str(len(trial.attempts)), *tail]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip()] + [fmt.format(*row).rstrip() for row in rows]


def record(trial: Trial, mode: str) -> dict[str, Any]:
    """One flat row of a trial (or, in "all" mode, of one attempt) for JSON and CSV."""
    chosen = trial.chosen
    cause = trial.cause()
    row = {
        "task": trial.task,
        "trial_name": trial.trial_name,
        "trial_index": trial.trial_index,
        "agent": trial.agent,
        "model": trial.model,
        "reward": trial.reward,
        "outcome": trial.outcome,
        "execution": trial.execution,
        "assessment": trial.assessment,
        "control": trial.control,
        "error": trial.error,
        "error_category": trial.error_category,
        "verifier_error": trial.verifier_error,
        "verifier_error_category": trial.verifier_error_category,
        "cause": cause.label if cause else None,
        "fault": cause.fault if cause else None,
        "cost_usd": trial.cost_usd,
        "total_tokens": trial.total_tokens,
        "n_attempts": len(trial.attempts),
        "rollout_name": chosen.folder if chosen else None,
        "started_at": chosen.get("started_at") if chosen else None,
        "finished_at": chosen.get("finished_at") if chosen else None,
    }
    if mode == "all" and chosen is not None:
        row["attempt"] = trial.attempts.index(chosen) + 1
        row["best"] = chosen is best_attempt(trial.attempts)
    return row


def strict_json(value: Any) -> Any:
    """A copy with NaN and infinities replaced by None (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


def job_document(job: Job, include_controls: bool = False) -> dict[str, Any]:

    d = job.denominators(include_controls)
    doc: dict[str, Any] = {
        "kind": "benchflow.job",
        "schema_version": 1,
        "job_dir": job.path,
        "job_name": job.name,
        "agent": job.settings.get("agent"),
        "model": job.settings.get("model"),
        "attempts": job.mode,
        "denominators": d,
        "pass_rate_scored": d["passed"] / d["scored"] if d["scored"] else None,
        "pass_rate_attempted": d["passed"] / d["attempted"] if d["attempted"] else None,
        "n_attempts": len(job.attempts),
        "interrupted": [a.folder for a in job.interrupted],
        "trials": records(job),
        "not_run": [
            {
                "trial_name": n.trial_name,
                "why": n.why,
                "rollout_names": [a.folder for a in n.attempts],
            }
            for n in job.not_run
        ],
    }
    reviews = read_object(os.path.join(job.path, REVIEWS))
    if reviews is not None:  # people's notes, tags and verdicts (runs/review/human.py writes it)
        doc["reviews"] = reviews.get("trials")
    if _has_repeats(job):
        top = max((len(ts) for ts in _tasks(job).values()), default=0)
        rates = pass_at_k_table(job, range(1, top + 1))
        doc["pass_at_k"] = {str(k): v for k, v in rates.items()}
        doc["reward_stats"] = reward_stats(job)
    clean: dict[str, Any] = strict_json(doc)
    return clean


def _tasks(job: Job) -> dict[str, list[Trial]]:
    tasks: dict[str, list[Trial]] = {}
    for trial in job.best_trials:
        tasks.setdefault(trial.task, []).append(trial)
    return tasks


def _has_repeats(job: Job) -> bool:
    return any(len(ts) > 1 for ts in _tasks(job).values())


def records_csv(records: Sequence[dict[str, Any]]) -> str:
    out = io.StringIO()
    if records:
        writer = csv.DictWriter(out, fieldnames=list(records[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
    return out.getvalue()


def render(job: Job, fmt: str = "table") -> str:
    if fmt == "json":
        return json.dumps(job_document(job), indent=2, allow_nan=False)
    if fmt == "csv":
        return records_csv(records(job))
    if fmt != "table":
        raise ValueError(f"format must be table, json or csv, not {fmt!r}")
    header = ATTEMPT_COLUMNS if job.mode == "all" else TRIAL_COLUMNS
    rows = [_row(t, job.mode) for t in job.trials]
    return "\n".join([*denominator_lines(job), "", *table(header, rows)]) + "\n"


def records(job: Job) -> list[dict[str, Any]]:
    """One record per row of the job (a trial, or an attempt with --attempts all)."""
    return [record(t, job.mode) for t in job.trials]


def render_results(job: Job, fmt: str = "table", attempts: AttemptsMode | None = None) -> str:
    """What `bench results JOB [--attempts all] [--json|--csv]` prints."""
    return render(with_mode(job, attempts or job.mode), fmt)
