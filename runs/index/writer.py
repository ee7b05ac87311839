"""Writes a job's progress to the database index, and an Event row for each change in the same
transaction, off the event loop in one writer thread.

The row-writing functions (`ensure_job`, `save_attempt`, `refresh_trial`, `refresh_job`,
`record_event`) are shared with `bench index` (runs/index/folder.py), which rebuilds the same rows
from a job folder's files.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from runs import events as ev
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


class Index:
    """A single writer thread: SQLite takes one writer at a time, and the loop never blocks on it."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="bench-index"
        )
        self.job_id: int | None = None
        self._trials: dict[str, int] = {}
        # a running attempt's phase and tool calls, for its progress line
        self._phase: dict[str, str] = {}
        self._tools: dict[str, int] = {}
        self._tools_written: dict[str, float] = {}

    def __call__(self, event: ev.Event) -> None:
        """The job bus's subscriber: each event that changes the index is written, in order, off
        the event loop. Tool calls move an attempt's progress line at most once a second."""
        if isinstance(event, ev.JobStarted):
            self.open_job(Path(event.job_dir), event.settings)
        elif isinstance(event, ev.AttemptStarted):
            self.attempt_created(
                event.trial_name,
                event.task_name,
                event.trial_index,
                event.rollout_name,
                event.attempt,
            )
        elif isinstance(event, ev.PhaseChanged):
            self._phase[event.rollout_name] = event.phase
            tools = self._tools.get(event.rollout_name, 0)
            self.phase_changed(event.trial_name, event.rollout_name, event.phase, tools)
        elif isinstance(event, ev.ToolCalled):
            rollout = event.rollout_name
            self._tools[rollout] = self._tools.get(rollout, 0) + 1
            now = time.monotonic()
            if now - self._tools_written.get(rollout, 0.0) >= 1.0:
                self._tools_written[rollout] = now
                phase = self._phase.get(rollout, "agent")
                self.phase_changed(event.trial_name, rollout, phase, self._tools[rollout])
        elif isinstance(event, ev.AttemptFinished):
            self.attempt_finished(event.result.to_json())
        elif isinstance(event, ev.AttemptCancelled):
            self.attempt_cancelled(event.trial_name, event.rollout_name)
        elif isinstance(event, ev.JobFinished):
            self.finish_job(event.summary, event.state)

    def submit(self, fn: Any, *args: Any) -> concurrent.futures.Future[Any]:
        return self._pool.submit(fn, *args)

    def open_job(self, job_dir: Path, settings: dict[str, Any]) -> None:
        self.submit(self._open_job, job_dir, settings)

    def _open_job(self, job_dir: Path, settings: dict[str, Any]) -> None:
        with transaction.atomic():
            job = ensure_job(job_dir, settings)
            Job.objects.filter(pk=job.pk).update(summary=None, finished_at=None)
            self.job_id = job.pk
            refresh_job(job.pk)
            record_event(job.pk, "job_started", "", {"name": job.name})

    def _trial_id(self, trial_name: str, task_name: str, trial_index: int) -> int:
        if trial_name not in self._trials:
            assert self.job_id is not None
            self._trials[trial_name] = trial_id(self.job_id, trial_name, task_name, trial_index)
        return self._trials[trial_name]

    def attempt_created(
        self, trial_name: str, task_name: str, trial_index: int, rollout: str, number: int
    ) -> None:
        self.submit(self._attempt_created, trial_name, task_name, trial_index, rollout, number)

    def _attempt_created(
        self, trial_name: str, task_name: str, trial_index: int, rollout: str, number: int
    ) -> None:
        with transaction.atomic():
            trial = self._trial_id(trial_name, task_name, trial_index)
            Attempt.objects.get_or_create(
                trial_id=trial,
                rollout_name=rollout,
                defaults={
                    "number": number,
                    "state": AttemptState.RUNNING,
                    "started_at": timezone.now(),
                    "sort_at": timezone.now().timestamp(),
                },
            )
            refresh_trial(trial, True)
            self._changed("attempt_started", trial_name, {"rollout_name": rollout})

    def phase_changed(self, trial_name: str, rollout: str, phase: str, tool_calls: int) -> None:
        self.submit(self._phase_changed, trial_name, rollout, phase, tool_calls)

    def _phase_changed(self, trial_name: str, rollout: str, phase: str, tool_calls: int) -> None:
        if trial_name not in self._trials:
            return
        with transaction.atomic():
            trial = self._trials[trial_name]
            Attempt.objects.filter(trial_id=trial, rollout_name=rollout).update(
                phase=phase[:40], n_tool_calls=tool_calls
            )
            Trial.objects.filter(pk=trial).update(phase=phase[:40])
            assert self.job_id is not None
            record_event(self.job_id, "phase_changed", trial_name, {"phase": phase})

    def attempt_finished(self, result: dict[str, Any]) -> None:
        self.submit(self._attempt_finished, result)

    def _attempt_finished(self, result: dict[str, Any]) -> None:
        with transaction.atomic():
            trial = self._trial_id(
                result["trial_name"], result["task_name"], result.get("trial_index", 0)
            )
            save_attempt(
                trial,
                result["rollout_name"],
                result.get("attempt") or 1,
                index_rows.attempt_fields(result),
            )
            assert self.job_id is not None
            save_trial_budgets(self.job_id, trial, result.get("trial_budget"))
            refresh_trial(trial, True)
            self._changed("attempt_finished", result["trial_name"], result)

    def attempt_cancelled(self, trial_name: str, rollout: str) -> None:
        self.submit(self._attempt_cancelled, trial_name, rollout)

    def _attempt_cancelled(self, trial_name: str, rollout: str) -> None:
        if trial_name not in self._trials:
            return
        with transaction.atomic():
            trial = self._trials[trial_name]
            Attempt.objects.filter(trial_id=trial, rollout_name=rollout).update(
                state=AttemptState.CANCELLED, outcome="cancelled", finished_at=timezone.now()
            )
            refresh_trial(trial, True)
            self._changed("attempt_cancelled", trial_name, {"rollout_name": rollout})

    def _changed(self, kind: str, trial_name: str, payload: Mapping[str, Any]) -> None:
        assert self.job_id is not None
        refresh_job(self.job_id)
        record_event(self.job_id, kind, trial_name, payload)

    def finish_job(self, summary: dict[str, Any], state: str) -> None:
        self.submit(self._finish_job, summary, state)

    def _finish_job(self, summary: dict[str, Any], state: str) -> None:
        if self.job_id is None:
            return
        with transaction.atomic():
            finish_job_rows(self.job_id, summary, state)
            record_event(self.job_id, "job_finished", "", {"state": state})

    def close(self) -> None:
        from django.db import connections

        self._pool.submit(connections.close_all)  # the writer thread's own connection
        self._pool.shutdown(wait=True)
        live.flush()


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
