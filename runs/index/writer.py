"""The index's row writers: a job, its planned trials, an attempt, a trial's best-attempt figures,
the job's counts and caps, an Event row with the job's next sequence number.

The job bus's subscriber (runs/index/subscriber.py) calls them as a job runs, and `bench index`
(runs/index/folder.py) as it rebuilds the rows from a job folder's files.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import connections, router, transaction
from django.db.models import Case, FloatField, Value, When
from django.utils import timezone

from runs.index import live
from runs.index import rows as index_rows
from runs.models import Attempt, AttemptState, Budget, BudgetScope, Event, Job, JobState, Trial
from runs.results.attempts import outcome_of as _outcome_of

ATTEMPT_COLUMNS = (
    "id",
    "rollout_name",
    "state",
    "result_state",
    "outcome",
    "reward",
    "error_category",
    "verifier_error_category",
    "cost_usd",
    "total_tokens",
    "n_turns",
    "n_tool_calls",
    "duration_s",
    "cancelled_by",
    "sort_at",
    "phase",
)


def outcome_of(result: dict[str, Any] | None) -> str:
    """passed | failed | errored | verifier_errored | interrupted (a reward wins over an error)."""
    return _outcome_of(result)


def planned_trials(settings: Mapping[str, Any]) -> list[tuple[str, int, str]]:
    """(task, repeat, trial_name) of every trial the job plans, in plan order (as runs/jobs.py names them)."""
    plan = settings.get("plan")
    repeats = settings.get("trials")
    repeats = repeats if isinstance(repeats, int) and repeats > 0 else 1
    if not isinstance(plan, list):
        return []
    return [
        (str(task), i, str(task) if i == 0 else f"{task}#{i}")
        for i in range(repeats)
        for task in plan
    ]


def ensure_job(
    job_dir: Path,
    settings: Mapping[str, Any],
    *,
    state: str = JobState.RUNNING,
    summary: Mapping[str, Any] | None = None,
    n_trials: int | None = None,
) -> Job:
    """The job's row, its planned trials (waiting until they start) and its job caps' rows.
    `n_trials`: how many the job planned, when its folder says so rather than by a plan (Harbor)."""
    planned = planned_trials(settings)
    started = index_rows.parse_time(settings.get("created_at"))
    job, _ = Job.objects.update_or_create(
        path=str(job_dir.resolve()),
        defaults={
            "name": job_dir.name,
            "tasks_dir": str(settings.get("tasks_dir") or ""),
            "agent": str(settings.get("agent") or ""),
            "model": str(settings.get("model") or ""),
            "state": state,
            "settings": dict(settings),
            "summary": dict(summary) if summary is not None else None,
            "n_trials": n_trials if n_trials is not None else len(planned),
        },
    )
    if job.started_at is None or (started is not None and job.started_at != started):
        Job.objects.filter(pk=job.pk).update(started_at=started or timezone.now())
    Trial.objects.bulk_create(
        [
            Trial(job=job, name=name, task_name=task, trial_index=i, position=pos)
            for pos, (task, i, name) in enumerate(planned)
        ],
        ignore_conflicts=True,
        batch_size=500,
    )
    for row in index_rows.job_budget_rows(settings, summary):
        Budget.objects.update_or_create(
            job=job, trial=None, measure=row.pop("measure"), defaults={"scope": "job", **row}
        )
    return job


def trial_id(job_id: int, name: str, task: str, index: int) -> int:
    trial, _ = Trial.objects.get_or_create(
        job_id=job_id, name=name, defaults={"task_name": task, "trial_index": index}
    )
    return trial.pk


def save_attempt(trial: int, rollout: str, number: int, fields: Mapping[str, Any]) -> None:
    Attempt.objects.update_or_create(
        trial_id=trial, rollout_name=rollout, defaults={"number": number, **fields}
    )


def save_trial_budgets(job_id: int, trial: int, block: Any) -> None:
    for row in index_rows.trial_budget_rows(block):
        Budget.objects.update_or_create(
            job_id=job_id,
            trial_id=trial,
            measure=row.pop("measure"),
            defaults={"scope": BudgetScope.TRIAL, **row},
        )


def refresh_trial(trial: int, job_live: bool) -> dict[str, Any]:
    """The trial's state, outcome and figures from its attempts, by the best-attempt rule."""
    rows = list(Attempt.objects.filter(trial_id=trial).values(*ATTEMPT_COLUMNS))
    fields = index_rows.trial_fields(rows, job_live)
    Trial.objects.filter(pk=trial).update(**fields)
    return fields


# The job's counts after each of its attempts' events: two statements of plain SQL (SQLite and
# PostgreSQL alike), as the ORM's filtered aggregates cost more to build than to run.
TRIAL_COUNTS = """
SELECT COUNT(CASE WHEN state = 'done' THEN 1 END),
       COUNT(CASE WHEN state = 'running' THEN 1 END),
       COUNT(CASE WHEN outcome = 'passed' THEN 1 END),
       COUNT(CASE WHEN outcome = 'failed' THEN 1 END),
       COUNT(CASE WHEN outcome IN ('errored', 'verifier_errored') THEN 1 END),
       COUNT(CASE WHEN state = 'done' AND reward IS NULL THEN 1 END),
       SUM(CASE WHEN state = 'done' THEN reward END),
       COUNT(CASE WHEN state = 'done' AND reward IS NOT NULL THEN 1 END)
FROM {trial} WHERE job_id = %s"""
ATTEMPT_SUMS = """
SELECT COUNT(a.id), SUM(a.cost_usd), SUM(a.total_tokens), SUM(a.duration_s)
FROM {attempt} a JOIN {trial} t ON t.id = a.trial_id WHERE t.job_id = %s"""


def _one_row(sql: str, job_id: int) -> tuple[Any, ...]:
    tables = {"trial": Trial._meta.db_table, "attempt": Attempt._meta.db_table}
    with connections[router.db_for_read(Job)].cursor() as cursor:
        cursor.execute(sql.format(**tables), [job_id])
        return tuple(cursor.fetchone())


def refresh_job(job_id: int) -> None:
    """The job's counts over its trials, and the job caps' spend so far over its attempts."""
    n_done, n_running, passed, failed, errored, unscored, reward_sum, scored = _one_row(
        TRIAL_COUNTS, job_id
    )
    n, cost, tokens, seconds = _one_row(ATTEMPT_SUMS, job_id)
    tokens = int(tokens) if tokens is not None else None  # PostgreSQL sums integers as numeric
    Job.objects.filter(pk=job_id).update(
        n_done=n_done,
        n_running=n_running,
        passed=passed,
        failed=failed,
        errored=errored,
        unscored=unscored,
        mean_reward=float(reward_sum) / scored if scored else None,
        n_attempts=n,
        cost_usd=cost,
        total_tokens=tokens,
    )
    spent = {
        "cost_usd": float(cost or 0.0),
        "tokens": float(tokens or 0),
        "sandbox_seconds": float(seconds or 0.0),
        "rollouts": float(n),
    }
    # while it runs (summary.json's budget block has the last word once it ended): one statement
    Budget.objects.filter(
        job_id=job_id, trial=None, measure__in=spent, job__summary__isnull=True
    ).update(
        spent=Case(
            *(When(measure=m, then=Value(v)) for m, v in spent.items()),
            output_field=FloatField(),
        )
    )


def record_event(
    job_id: int, kind: str, trial_name: str = "", payload: Mapping[str, Any] | None = None
) -> int:
    """An Event row with the job's next sequence number; its hint is published after commit."""
    table = Job._meta.db_table
    with connections[router.db_for_write(Job)].cursor() as cursor:  # one statement, not two
        cursor.execute(
            f"UPDATE {table} SET last_seq = last_seq + 1 WHERE id = %s RETURNING last_seq",
            [job_id],
        )
        seq = cursor.fetchone()[0]
    Event.objects.create(
        job_id=job_id, seq=seq, kind=kind, trial_name=trial_name, payload=dict(payload or {})
    )
    transaction.on_commit(lambda: live.publish(job_id, seq, kind, trial_name))
    return seq


def finish_job_rows(
    job_id: int,
    summary: Mapping[str, Any] | None,
    state: str,
    *,
    finished_at: datetime | None = None,
    duration_s: float | None = None,
) -> None:
    """A job that ended: its summary, its trials not run, its caps' final spend. `finished_at` and
    `duration_s` when the job's folder says (Harbor's result.json), else now and summary.json's."""
    job = Job.objects.get(pk=job_id)
    Attempt.objects.filter(trial__job_id=job_id, state__in=("running", "preparing")).update(
        state=AttemptState.INTERRUPTED, outcome="interrupted"
    )
    open_trials = Trial.objects.filter(job_id=job_id, state__in=("waiting", "running"))
    open_trials.filter(n_attempts=0).update(state="not_run", phase="")
    for trial in open_trials.values_list("id", flat=True):
        refresh_trial(trial, False)
    elapsed = summary.get("elapsed_sec") if summary else duration_s
    Job.objects.filter(pk=job_id).update(
        state=state,
        summary=dict(summary) if summary is not None else None,
        finished_at=finished_at or timezone.now(),
        duration_s=elapsed if isinstance(elapsed, int | float) else None,
    )
    for row in index_rows.job_budget_rows(job.settings, summary):
        Budget.objects.update_or_create(
            job_id=job_id, trial=None, measure=row.pop("measure"), defaults={"scope": "job", **row}
        )
    refresh_job(job_id)
