"""What the index stores for an attempt, a trial and a budget, from the job folder's documents (pure).

The live writer (runs/index/writer.py, on each event) and `bench index` (runs/index/folder.py, from the
files) both call these, so a row means the same whichever way it was written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from runs import errors
from runs.jobfolder import finite as _float
from runs.results import attempts as attempt_results
from runs.results.trial_result import TrialResult

TEXT_MAX = 5000  # characters of an error kept in a row; the whole text stays in result.json


def _int(value: Any) -> int | None:
    number = _float(value)
    return None if number is None else int(number)


def _text(value: Any) -> str:
    return str(value)[:TEXT_MAX] if value else ""


def parse_time(value: Any) -> datetime | None:
    """BenchFlow's local, zone-less `started_at`/`finished_at` (taken as this machine's local time)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo else when.astimezone(UTC)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def attempt_fields(
    document: Mapping[str, Any], result: TrialResult | None = None
) -> dict[str, Any]:
    """An Attempt row's fields from the attempt's result.json document in BenchFlow's names and
    the same typed (made here when not given); the error table reads the document, for the keys
    only some writers add."""
    if result is None:
        result = TrialResult.from_json(dict(document), str(document.get("rollout_name") or ""))
    usage = result.agent_result
    timing = document.get("timing")
    rewards = result.rewards
    reward = result.reward
    started, finished = parse_time(result.started_at), parse_time(result.finished_at)
    duration = _float(result.timing.total)
    if duration is None and started and finished:
        duration = (finished - started).total_seconds()
    error_category = errors.error_category(document) if result.error else None
    budget = document.get("trial_budget")
    judged = document.get("verifier_usage")
    return {
        "state": "finished",
        "result_state": "ok",
        "outcome": attempt_results.outcome_of(document),
        "reward": reward,
        "rewards": _json_safe(rewards) if isinstance(rewards, Mapping) else None,
        "error": _text(result.error),
        "error_category": error_category or "",
        "verifier_error": _text(result.verifier_error),
        "verifier_error_category": (
            errors.verifier_category(document) or "" if result.verifier_error else ""
        ),
        "n_input_tokens": _int(usage.n_input_tokens),
        "n_cache_read_tokens": _int(usage.n_cache_read_tokens),
        "n_cache_creation_tokens": _int(usage.n_cache_creation_tokens),
        "n_output_tokens": _int(usage.n_output_tokens),
        "total_tokens": _int(usage.total_tokens),
        "cost_usd": _float(usage.cost_usd),
        "usage_source": _text(usage.usage_source)[:40],
        "price_source": _text(usage.price_source)[:60],
        "n_turns": _int(usage.n_calls),
        "n_tool_calls": _int(result.n_tool_calls) or 0,
        "trial_budget": _json_safe(budget) if isinstance(budget, Mapping) else None,
        "verifier_usage": _json_safe(judged) if isinstance(judged, Mapping) else None,
        "timing": _json_safe(timing) if isinstance(timing, Mapping) else None,
        "phase": "",
        "last_tool_call": _text(result.last_tool_call),
        "cancelled_by": "",
        "started_at": started,
        "finished_at": finished,
        "duration_s": duration,
        "sort_at": when.timestamp() if (when := finished or started) else 0.0,
    }


def unfinished_fields(
    timing: Mapping[str, Any] | None, *, corrupt: str | None, live: bool, mtime: float
) -> dict[str, Any]:
    """An Attempt row without a usable result.json: corrupt (`corrupt` is its error, shown as
    such), cancelled (timing.json says so), running (its job is live) or interrupted."""
    cancelled_by = str(timing.get("cancelled_by") or "") if isinstance(timing, Mapping) else ""
    if corrupt:
        state, outcome = "finished", "errored"
    elif cancelled_by or (isinstance(timing, Mapping) and timing.get("cancelled")):
        state, outcome = "cancelled", "cancelled" if cancelled_by else "interrupted"
    elif live:
        state, outcome = "running", ""
    else:
        state, outcome = "interrupted", "interrupted"
    usage = timing.get("agent_result") if isinstance(timing, Mapping) else None
    usage = usage if isinstance(usage, Mapping) else {}
    return {
        "state": state,
        "result_state": "corrupt" if corrupt else "missing",
        "outcome": outcome,
        "reward": None,
        "rewards": None,
        "error": _text(corrupt),
        "error_category": "corrupt_result" if corrupt else "",
        "total_tokens": _int(usage.get("total_tokens")),
        "cost_usd": _float(usage.get("cost_usd")),
        "cancelled_by": _text(cancelled_by),
        "timing": _json_safe(timing) if isinstance(timing, Mapping) else None,
        "duration_s": _float(timing.get("total")) if isinstance(timing, Mapping) else None,
        "sort_at": mtime,
    }


def _light(row: Mapping[str, Any]) -> attempt_results.Attempt:
    """An attempt_results.Attempt with what the best-attempt rule reads, from an index row."""
    cancelled = row.get("cancelled_by") or ""
    return attempt_results.Attempt(
        task="",
        trial_name="",
        trial_index=0,
        folder=row["rollout_name"],
        path=row.get("path", ""),
        result=None,
        when=row["sort_at"],
        mtime=row["sort_at"] if row.get("result_state") != "ok" else None,
        reward=row.get("reward"),
        timing={"cancelled_by": cancelled} if cancelled else None,
    )


def best_of(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The trial's best attempt among its finished rows, by `bench results`' rule (the newest
    scored, else the newest a job cap did not cancel); None while none has finished."""
    done = [r for r in rows if r.get("state") != "running" and r.get("state") != "preparing"]
    if not done:
        return None
    lights = [_light(r) for r in done]
    chosen = attempt_results.best_attempt(lights)
    return done[lights.index(chosen)]


TRIAL_COPIED = ("reward", "cost_usd", "total_tokens", "n_turns", "n_tool_calls", "duration_s")


def trial_fields(rows: Sequence[Mapping[str, Any]], job_live: bool) -> dict[str, Any]:
    """A Trial row's state, outcome and figures from its attempts' rows."""
    running = [r for r in rows if r.get("state") in ("running", "preparing")]
    best = best_of(rows)
    fields: dict[str, Any] = {"n_attempts": len(rows), "phase": ""}
    if running:
        fields["phase"] = running[-1].get("phase") or ""
    if best is None:
        fields.update(
            state="running" if running else ("waiting" if job_live else "not_run"),
            outcome="",
            best_id=None,
            error_category="",
            **dict.fromkeys(TRIAL_COPIED),
        )
        return fields
    if best.get("outcome") == "cancelled":
        # every finished attempt a job cap cancelled: kept from running, not a failure
        state = "running" if running else ("waiting" if job_live else "not_run")
    else:
        state = "running" if running and best.get("reward") is None else "done"
    outcome = best.get("outcome") or ""
    category = best.get("error_category") or best.get("verifier_error_category") or ""
    if not category and outcome in ("errored", "verifier_errored", "interrupted"):
        category = "interrupted" if outcome == "interrupted" else "no_verdict"
    fields.update(
        state=state,
        outcome=outcome,
        best_id=best.get("id"),
        error_category=category,
        **{k: best.get(k) for k in TRIAL_COPIED},
    )
    return fields


# the word of each cap in summary.json's `budget reached: ...` reason
REASON_WORDS = {
    "cost_usd": " USD ",
    "tokens": " tokens ",
    "sandbox_seconds": " sandbox-seconds ",
    "rollouts": " rollouts ",
}
JOB_CAPS = {
    "max_cost_usd": "cost_usd",
    "max_tokens": "tokens",
    "max_sandbox_seconds": "sandbox_seconds",
    "max_rollouts": "rollouts",
}


def job_budget_rows(
    settings: Mapping[str, Any], summary: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """Each job cap the run set: (measure, limit, spent, stopped) from evaluation.json's caps and,
    once the job ended, summary.json's budget block."""
    block = summary.get("budget") if isinstance(summary, Mapping) else None
    block = block if isinstance(block, Mapping) else {}
    caps = block.get("caps") if isinstance(block.get("caps"), Mapping) else settings.get("budget")
    spent = block.get("spent")
    spent = spent if isinstance(spent, Mapping) else {}
    reason = str(block.get("reason") or "")
    rows = []
    for cap, measure in JOB_CAPS.items():
        limit = _float(caps.get(cap)) if isinstance(caps, Mapping) else None
        if limit is None:
            continue
        rows.append(
            {
                "measure": measure,
                "limit": limit,
                "spent": _float(spent.get(measure)) or 0.0,
                "stopped": bool(block.get("stopped")) and REASON_WORDS[measure] in reason,
            }
        )
    return rows


def trial_budget_rows(block: Any) -> list[dict[str, Any]]:
    """A trial's per-trial budgets (tokens, turns) from result.json's `trial_budget`."""
    if not isinstance(block, Mapping):
        return []
    budget, used = block.get("budget") or {}, block.get("used") or {}
    source = block.get("source") or {}
    rows = []
    for measure in ("tokens", "turns"):
        limit = _float(budget.get(measure)) if isinstance(budget, Mapping) else None
        if limit is None:
            continue
        rows.append(
            {
                "measure": measure,
                "limit": limit,
                "spent": (_float(used.get(measure)) or 0.0) if isinstance(used, Mapping) else 0.0,
                "source": str(source.get(measure) or "") if isinstance(source, Mapping) else "",
                "stopped": block.get("stopped_by") == measure,
            }
        )
    return rows
