"""Events into index rows: the one writer of the index. Each event class has one handler here, and
each handler writes its rows and the event's own Event row (job, seq, kind, payload) in one
transaction, so an open page that hears of the row finds the rows it changed.

Every write comes as an event: a running job's (runs/index/subscriber.py hands them over from the
job's bus), an operation's (runs/operations/shown.py: launched, launch failed, closed), a regrade's,
and a job folder replayed by `bench index` (runs/index/folder.py reads it; runs/index/replay.py
applies it). Handlers decide nothing about how a job went: the code that knows emits it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from runs import events as ev
from runs.index import replay, search
from runs.index import rows as index_rows
from runs.index.projection import Projection, job_at
from runs.index.writer import (
    ensure_job,
    finish_job_rows,
    refresh_job,
    refresh_trial,
    save_attempt,
    save_trial_budgets,
)
from runs.models import Attempt, AttemptState, Job, JobState, Trial


class Projector:
    """Applies one job's events to its rows, in order: `apply` is the only entry."""

    def __init__(self, job_dir: Path | None = None) -> None:
        self.state = Projection(job_dir)

    def apply(self, event: ev.Event) -> None:
        HANDLERS[type(event)](self.state, event)


# --- a running job ---------------------------------------------------------------------------------


def job_started(p: Projection, e: ev.JobStarted) -> None:
    with transaction.atomic():
        job = ensure_job(Path(e.job_dir), e.settings)
        Job.objects.filter(pk=job.pk).update(summary=None, finished_at=None)
        p.job_id = job.pk
        refresh_job(job.pk)
        p.record(e.kind, "", e.to_payload())


def attempt_started(p: Projection, e: ev.AttemptStarted) -> None:
    if p.job_id is None:
        return
    with transaction.atomic():
        trial = p.trial(e.trial_name, e.task_name, e.trial_index)
        now = timezone.now()
        Attempt.objects.get_or_create(
            trial_id=trial,
            rollout_name=e.rollout_name,
            defaults={
                "number": e.attempt,
                "state": AttemptState.RUNNING,
                "started_at": now,
                "sort_at": now.timestamp(),
            },
        )
        refresh_trial(trial, True)
        p.changed(e.kind, e.trial_name, e.to_payload())


def _progress(p: Projection, e: ev.PhaseChanged | ev.ToolCalled) -> None:
    """A running attempt's phase and tool calls, on its row and its trial's."""
    if e.trial_name not in p.trials or p.job_id is None:
        return
    phase = p.phase.get(e.rollout_name, "agent")[:40]
    tools = p.tools.get(e.rollout_name, 0)
    with transaction.atomic():
        trial = p.trials[e.trial_name]
        Attempt.objects.filter(trial_id=trial, rollout_name=e.rollout_name).update(
            phase=phase, n_tool_calls=tools
        )
        Trial.objects.filter(pk=trial).update(phase=phase, n_tool_calls=tools)
        p.record(e.kind, e.trial_name, e.to_payload())


def phase_changed(p: Projection, e: ev.PhaseChanged) -> None:
    p.phase[e.rollout_name] = e.phase
    _progress(p, e)


def tool_called(p: Projection, e: ev.ToolCalled) -> None:
    """Counted each time; the rows move at most once a second (an agent may call hundreds)."""
    p.tools[e.rollout_name] = p.tools.get(e.rollout_name, 0) + 1
    if p.due(e.kind, e.rollout_name):
        _progress(p, e)


def usage_counted(p: Projection, e: ev.UsageCounted) -> None:
    """What the proxy counted so far for a running attempt: its row's tokens, turns and cost."""
    if e.trial_name not in p.trials or p.job_id is None or not p.due(e.kind, e.rollout_name):
        return
    with transaction.atomic():
        trial = p.trials[e.trial_name]
        Attempt.objects.filter(
            trial_id=trial, rollout_name=e.rollout_name, state=AttemptState.RUNNING
        ).update(
            n_input_tokens=e.input_tokens,
            n_output_tokens=e.output_tokens,
            n_cache_read_tokens=e.cache_read_tokens,
            total_tokens=e.total_tokens,
            n_turns=e.turns,
            cost_usd=e.cost_usd,
        )
        Trial.objects.filter(pk=trial, state="running").update(
            total_tokens=e.total_tokens, n_turns=e.turns, cost_usd=e.cost_usd
        )
        p.record(e.kind, e.trial_name, e.to_payload())


def attempt_finished(p: Projection, e: ev.AttemptFinished | ev.AttemptScored) -> None:
    """An attempt's result: its row (and its trial's) from result.json; the same again when a
    rubric review rewrote it with the gated reward (AttemptScored)."""
    if p.job_id is None:
        return
    payload = e.to_payload()
    result: dict[str, Any] = payload["result"]
    with transaction.atomic():
        trial = p.trial(result["trial_name"], result["task_name"], result.get("trial_index", 0))
        save_attempt(
            trial,
            result["rollout_name"],
            result.get("attempt") or 1,
            index_rows.attempt_fields(result),
        )
        if isinstance(e, ev.AttemptFinished):
            save_trial_budgets(p.job_id, trial, result.get("trial_budget"))
        refresh_trial(trial, True)
        p.changed(e.kind, e.trial_name, payload)
    _searchable(trial, result["rollout_name"])


def attempt_cancelled(p: Projection, e: ev.AttemptCancelled) -> None:
    if e.trial_name not in p.trials or p.job_id is None:
        return
    by = e.cancelled_by or ""
    with transaction.atomic():
        trial = p.trials[e.trial_name]
        Attempt.objects.filter(trial_id=trial, rollout_name=e.rollout_name).update(
            state=AttemptState.CANCELLED,
            outcome="cancelled" if by else "interrupted",
            cancelled_by=by,
            finished_at=timezone.now(),
        )
        refresh_trial(trial, True)
        p.changed(e.kind, e.trial_name, e.to_payload())
    _searchable(trial, e.rollout_name)


def _searchable(trial: int, rollout: str) -> None:
    """An attempt that ended: its words into the search index, after its rows are committed (the
    page hears of the attempt first; its words follow in their own transaction)."""
    attempt = (
        Attempt.objects.filter(trial_id=trial, rollout_name=rollout)
        .values_list("id", flat=True)
        .first()
    )
    if attempt is not None:
        with transaction.atomic():
            search.index_attempt(attempt)


def attempt_lost(p: Projection, e: ev.AttemptLost) -> None:
    """A run lost with its worker counts for nothing (the attempt runs again): its row goes."""
    if e.trial_name not in p.trials or p.job_id is None:
        return
    with transaction.atomic():
        trial = p.trials[e.trial_name]
        Attempt.objects.filter(trial_id=trial, rollout_name=e.rollout_name).delete()
        refresh_trial(trial, True)
        p.changed(e.kind, e.trial_name, e.to_payload())


def job_finished(p: Projection, e: ev.JobFinished) -> None:
    if p.job_id is None:
        return
    with transaction.atomic():
        finish_job_rows(p.job_id, e.summary, e.state)
        p.record(e.kind, "", e.to_payload())


# --- operations from the dashboard ---------------------------------------------------------------


def job_launched(p: Projection, e: ev.JobLaunched) -> None:
    """A new job's row with its planned trials waiting, or a resumed job's row marked running."""
    with transaction.atomic():
        p.job_id = job_at(e.job_dir)
        if p.job_id is None:
            p.job_id = ensure_job(Path(e.job_dir), e.settings, state=JobState.RUNNING).pk
            refresh_job(p.job_id)
        else:
            Job.objects.filter(pk=p.job_id).update(state=JobState.RUNNING, finished_at=None)
        p.record(e.kind, "", e.to_payload())


def launch_failed(p: Projection, e: ev.LaunchFailed) -> None:
    """The row of a job that never was goes (with its events: no page can show it)."""
    with transaction.atomic():
        Job.objects.filter(path=str(Path(e.job_dir).resolve())).delete()
    p.job_id = None


def job_closed(p: Projection, e: ev.JobClosed) -> None:
    with transaction.atomic():
        p.job_id = job_at(e.job_dir)
        if p.job_id is None:
            return
        finish_job_rows(p.job_id, e.summary, e.state)
        p.record(e.kind, "", e.to_payload())


# --- events that change no row but their own --------------------------------------------------------


def recorded(p: Projection, e: ev.Event) -> None:
    """Its Event row only, for the pages: a retry scheduled, a cap reached, a utilization report
    (the chart reads them), a regrade's start and each regraded trial (regrade.json in the
    attempt folder stays the record). Before the job's row exists there is nothing to attach it to."""
    if p.job() is None:
        return
    with transaction.atomic():
        p.record(e.kind, str(getattr(e, "trial_name", "") or ""), e.to_payload())


def ignored(p: Projection, e: ev.Event) -> None:
    """Nothing a page shows: a heartbeat (the running attempt's row already moves with its
    phase and tool calls), and a worker's own log lines."""


Handler = Callable[[Projection, Any], None]
HANDLERS: dict[type[ev.Event], Handler] = {
    ev.JobStarted: job_started,
    ev.AttemptStarted: attempt_started,
    ev.PhaseChanged: phase_changed,
    ev.ToolCalled: tool_called,
    ev.UsageCounted: usage_counted,
    ev.AttemptFinished: attempt_finished,
    ev.AttemptScored: attempt_finished,
    ev.AttemptCancelled: attempt_cancelled,
    ev.AttemptLost: attempt_lost,
    ev.JobFinished: job_finished,
    ev.JobLaunched: job_launched,
    ev.LaunchFailed: launch_failed,
    ev.JobClosed: job_closed,
    ev.JobFolderRead: replay.folder_read,
    ev.AttemptFoldersRead: replay.attempts_read,
    ev.Indexed: replay.indexed,
    ev.Heartbeat: ignored,
    ev.WorkerStarted: ignored,
    ev.WorkerAttemptStarted: ignored,
    ev.WorkerAttemptEnded: ignored,
    ev.OrphansReaped: ignored,
    ev.WorkerNote: ignored,
    **dict.fromkeys(
        (
            ev.AgentInstalling,
            ev.RipgrepFetching,
            ev.TasksWarned,
            ev.AgentLacks,
            ev.LoginLent,
            ev.ResourcesReduced,
            ev.JobChosen,
            ev.SignalReceived,
            ev.AgentOutOfMemory,
            ev.RetryScheduled,
            ev.WorkersChosen,
            ev.BudgetReached,
            ev.CostUnknown,
            ev.UtilizationReported,
            ev.RegradeStarted,
            ev.Regraded,
        ),
        recorded,
    ),
}
