"""The index's row writers: a job, its planned trials, an attempt, a trial's best-attempt figures,
the job's counts and caps, an Event row with the job's next sequence number.

The job bus's subscriber (runs/index/subscriber.py) calls them as a job runs, and `bench index`
(runs/index/folder.py) as it rebuilds the rows from a job folder's files.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import Count, F, Q, Sum
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
) -> Job:
    """The job's row, its planned trials (waiting until they start) and its job caps' rows."""
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
            "n_trials": len(planned),
        },
    )
    if job.started_at is None:
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


def refresh_job(job_id: int) -> None:
    """The job's counts over its trials, and the job caps' spend so far over its attempts."""
    done, running = Q(state="done"), Q(state="running")
    t = Trial.objects.filter(job_id=job_id).aggregate(
        n_done=Count("id", filter=done),
        n_running=Count("id", filter=running),
        passed=Count("id", filter=Q(outcome="passed")),
        failed=Count("id", filter=Q(outcome="failed")),
        errored=Count("id", filter=Q(outcome__in=("errored", "verifier_errored"))),
        unscored=Count("id", filter=done & Q(reward__isnull=True)),
        reward_sum=Sum("reward", filter=done),
        scored=Count("id", filter=done & Q(reward__isnull=False)),
    )
    a = Attempt.objects.filter(trial__job_id=job_id).aggregate(
        n=Count("id"),
        cost=Sum("cost_usd"),
        tokens=Sum("total_tokens"),
        seconds=Sum("duration_s"),
    )
    scored, reward_sum = t.pop("scored"), t.pop("reward_sum")
    Job.objects.filter(pk=job_id).update(
        **t,
        mean_reward=reward_sum / scored if scored else None,
        n_attempts=a["n"],
        cost_usd=a["cost"],
        total_tokens=a["tokens"],
    )
    job = Job.objects.only("summary", "state").get(pk=job_id)
    if job.summary is None:  # while it runs; summary.json's budget block has the last word
        spent = {
            "cost_usd": a["cost"] or 0.0,
            "tokens": a["tokens"] or 0,
            "sandbox_seconds": a["seconds"] or 0.0,
            "rollouts": a["n"],
        }
        for measure, value in spent.items():
            Budget.objects.filter(job_id=job_id, trial=None, measure=measure).update(spent=value)


def record_event(
    job_id: int, kind: str, trial_name: str = "", payload: Mapping[str, Any] | None = None
) -> int:
    """An Event row with the job's next sequence number; its hint is published after commit."""
    Job.objects.filter(pk=job_id).update(last_seq=F("last_seq") + 1)
    seq = Job.objects.filter(pk=job_id).values_list("last_seq", flat=True).get()
    Event.objects.create(
        job_id=job_id, seq=seq, kind=kind, trial_name=trial_name, payload=dict(payload or {})
    )
    transaction.on_commit(lambda: live.publish(job_id, seq, kind, trial_name))
    return seq


def finish_job_rows(job_id: int, summary: Mapping[str, Any] | None, state: str) -> None:
    """A job that ended: its summary, its trials not run, its caps' final spend."""
    job = Job.objects.get(pk=job_id)
    Attempt.objects.filter(trial__job_id=job_id, state__in=("running", "preparing")).update(
        state=AttemptState.INTERRUPTED, outcome="interrupted"
    )
    open_trials = Trial.objects.filter(job_id=job_id, state__in=("waiting", "running"))
    open_trials.filter(n_attempts=0).update(state="not_run", phase="")
    for trial in open_trials.values_list("id", flat=True):
        refresh_trial(trial, False)
    elapsed = summary.get("elapsed_sec") if summary else None
    Job.objects.filter(pk=job_id).update(
        state=state,
        summary=dict(summary) if summary is not None else None,
        finished_at=timezone.now(),
        duration_s=elapsed if isinstance(elapsed, int | float) else None,
    )
    for row in index_rows.job_budget_rows(job.settings, summary):
        Budget.objects.update_or_create(
            job_id=job_id, trial=None, measure=row.pop("measure"), defaults={"scope": "job", **row}
        )
    refresh_job(job_id)
