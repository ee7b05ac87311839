"""The job bus's database subscriber: each event of a running job changes its rows and writes an
Event row (job, seq, kind, payload) in the same transaction, off the event loop, in one writer
thread (SQLite takes one writer at a time, and the loop never waits for it).

The Event row's kind and payload are the event's own (`runs.events`: AttemptFinished's payload
holds the attempt's result.json document); the dashboard's pages are told of each row (hints
after commit, runs/index/live.py) and read the rows. Frequent events (a tool call, the proxy's
usage count) move an attempt's row at most once a second.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from runs import events as ev
from runs.index import live
from runs.index import rows as index_rows
from runs.index.writer import (
    ensure_job,
    finish_job_rows,
    record_event,
    refresh_job,
    refresh_trial,
    save_attempt,
    save_trial_budgets,
    trial_id,
)
from runs.models import Attempt, AttemptState, Job, Trial

THROTTLE_S = 1.0  # a running attempt's progress row is written at most this often


class Index:
    """One job's index writer: call it with each of the job's events (a `Bus` subscriber)."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="bench-index"
        )
        self.job_id: int | None = None
        self._trials: dict[str, int] = {}
        # a running attempt's phase and tool calls (for its progress line), and when its row last
        # moved for a frequent event
        self._phase: dict[str, str] = {}
        self._tools: dict[str, int] = {}
        self._written: dict[tuple[str, str], float] = {}

    def __call__(self, event: ev.Event) -> None:
        payload = event.to_payload()
        trial = str(payload.get("trial_name") or "")
        if isinstance(event, ev.JobStarted):
            self.open_job(Path(event.job_dir), event.settings, payload)
        elif isinstance(event, ev.AttemptStarted):
            self.attempt_created(
                event.trial_name,
                event.task_name,
                event.trial_index,
                event.rollout_name,
                event.attempt,
                payload,
            )
        elif isinstance(event, ev.PhaseChanged):
            self._phase[event.rollout_name] = event.phase
            tools = self._tools.get(event.rollout_name, 0)
            self.phase_changed(trial, event.rollout_name, event.phase, tools, event.kind, payload)
        elif isinstance(event, ev.ToolCalled):
            rollout = event.rollout_name
            self._tools[rollout] = self._tools.get(rollout, 0) + 1
            if self._due(event.kind, rollout):
                phase = self._phase.get(rollout, "agent")
                payload["tool_calls"] = self._tools[rollout]
                self.phase_changed(trial, rollout, phase, self._tools[rollout], event.kind, payload)
        elif isinstance(event, ev.UsageCounted):
            if self._due(event.kind, event.rollout_name):
                self.submit(self._usage, trial, event.rollout_name, payload)
        elif isinstance(event, ev.AttemptFinished):
            self.attempt_finished(payload["result"], payload)
        elif isinstance(event, ev.AttemptCancelled):
            self.submit(self._attempt_cancelled, trial, event.rollout_name, payload)
        elif isinstance(event, ev.AttemptLost):
            self.submit(self._attempt_lost, trial, event.rollout_name, payload)
        elif isinstance(event, ev.JobFinished):
            self.finish_job(event.summary, event.state, payload)
        elif not isinstance(event, ev.Heartbeat):  # a heartbeat changes nothing a page shows
            self.submit(self._record, event.kind, trial, payload)

    def _due(self, kind: str, rollout: str) -> bool:
        now = time.monotonic()
        if now - self._written.get((kind, rollout), 0.0) < THROTTLE_S:
            return False
        self._written[(kind, rollout)] = now
        return True

    def submit(self, fn: Any, *args: Any) -> concurrent.futures.Future[Any]:
        return self._pool.submit(fn, *args)

    def open_job(
        self, job_dir: Path, settings: dict[str, Any], payload: Mapping[str, Any] | None = None
    ) -> None:
        self.submit(self._open_job, job_dir, settings, payload or {"job_name": job_dir.name})

    def _open_job(
        self, job_dir: Path, settings: dict[str, Any], payload: Mapping[str, Any]
    ) -> None:
        with transaction.atomic():
            job = ensure_job(job_dir, settings)
            Job.objects.filter(pk=job.pk).update(summary=None, finished_at=None)
            self.job_id = job.pk
            refresh_job(job.pk)
            record_event(job.pk, "job_started", "", payload)

    def _trial_id(self, trial_name: str, task_name: str, trial_index: int) -> int:
        if trial_name not in self._trials:
            assert self.job_id is not None
            self._trials[trial_name] = trial_id(self.job_id, trial_name, task_name, trial_index)
        return self._trials[trial_name]

    def attempt_created(
        self,
        trial_name: str,
        task_name: str,
        trial_index: int,
        rollout: str,
        number: int,
        payload: Mapping[str, Any] | None = None,
    ) -> None:
        self.submit(
            self._attempt_created,
            trial_name,
            task_name,
            trial_index,
            rollout,
            number,
            payload or {"rollout_name": rollout},
        )

    def _attempt_created(
        self,
        trial_name: str,
        task_name: str,
        trial_index: int,
        rollout: str,
        number: int,
        payload: Mapping[str, Any],
    ) -> None:
        if self.job_id is None:
            return
        with transaction.atomic():
            trial = self._trial_id(trial_name, task_name, trial_index)
            now = timezone.now()
            Attempt.objects.get_or_create(
                trial_id=trial,
                rollout_name=rollout,
                defaults={
                    "number": number,
                    "state": AttemptState.RUNNING,
                    "started_at": now,
                    "sort_at": now.timestamp(),
                },
            )
            refresh_trial(trial, True)
            self._changed("attempt_started", trial_name, payload)

    def phase_changed(
        self,
        trial_name: str,
        rollout: str,
        phase: str,
        tool_calls: int,
        kind: str = "phase_changed",
        payload: Mapping[str, Any] | None = None,
    ) -> None:
        self.submit(
            self._phase_changed,
            trial_name,
            rollout,
            phase,
            tool_calls,
            kind,
            payload or {"phase": phase},
        )

    def _phase_changed(
        self,
        trial_name: str,
        rollout: str,
        phase: str,
        tool_calls: int,
        kind: str,
        payload: Mapping[str, Any],
    ) -> None:
        if trial_name not in self._trials or self.job_id is None:
            return
        with transaction.atomic():
            trial = self._trials[trial_name]
            Attempt.objects.filter(trial_id=trial, rollout_name=rollout).update(
                phase=phase[:40], n_tool_calls=tool_calls
            )
            Trial.objects.filter(pk=trial).update(phase=phase[:40], n_tool_calls=tool_calls)
            record_event(self.job_id, kind, trial_name, payload)

    def _usage(self, trial_name: str, rollout: str, payload: Mapping[str, Any]) -> None:
        """What the proxy counted so far for a running attempt: its row's tokens, turns, cost."""
        if trial_name not in self._trials or self.job_id is None:
            return
        with transaction.atomic():
            trial = self._trials[trial_name]
            fields = {
                "n_input_tokens": payload.get("input_tokens"),
                "n_output_tokens": payload.get("output_tokens"),
                "n_cache_read_tokens": payload.get("cache_read_tokens"),
                "total_tokens": payload.get("total_tokens"),
                "n_turns": payload.get("turns"),
                "cost_usd": payload.get("cost_usd"),
            }
            Attempt.objects.filter(
                trial_id=trial, rollout_name=rollout, state=AttemptState.RUNNING
            ).update(**fields)
            Trial.objects.filter(pk=trial, state="running").update(
                total_tokens=fields["total_tokens"],
                n_turns=fields["n_turns"],
                cost_usd=fields["cost_usd"],
            )
            record_event(self.job_id, "usage_counted", trial_name, payload)

    def attempt_finished(
        self, result: dict[str, Any], payload: Mapping[str, Any] | None = None
    ) -> None:
        self.submit(self._attempt_finished, result, payload or {"result": result})

    def _attempt_finished(self, result: dict[str, Any], payload: Mapping[str, Any]) -> None:
        if self.job_id is None:
            return
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
            save_trial_budgets(self.job_id, trial, result.get("trial_budget"))
            refresh_trial(trial, True)
            self._changed("attempt_finished", result["trial_name"], payload)

    def attempt_cancelled(self, trial_name: str, rollout: str) -> None:
        self.submit(self._attempt_cancelled, trial_name, rollout, {"rollout_name": rollout})

    def _attempt_cancelled(self, trial_name: str, rollout: str, payload: Mapping[str, Any]) -> None:
        if trial_name not in self._trials or self.job_id is None:
            return
        by = str(payload.get("cancelled_by") or "")
        with transaction.atomic():
            trial = self._trials[trial_name]
            Attempt.objects.filter(trial_id=trial, rollout_name=rollout).update(
                state=AttemptState.CANCELLED,
                outcome="cancelled" if by else "interrupted",
                cancelled_by=by,
                finished_at=timezone.now(),
            )
            refresh_trial(trial, True)
            self._changed("attempt_cancelled", trial_name, payload)

    def _attempt_lost(self, trial_name: str, rollout: str, payload: Mapping[str, Any]) -> None:
        """A run lost with its worker counts for nothing (the attempt runs again): its row goes."""
        if trial_name not in self._trials or self.job_id is None:
            return
        with transaction.atomic():
            trial = self._trials[trial_name]
            Attempt.objects.filter(trial_id=trial, rollout_name=rollout).delete()
            refresh_trial(trial, True)
            self._changed("attempt_lost", trial_name, payload)

    def _changed(self, kind: str, trial_name: str, payload: Mapping[str, Any]) -> None:
        assert self.job_id is not None
        refresh_job(self.job_id)
        record_event(self.job_id, kind, trial_name, payload)

    def _record(self, kind: str, trial_name: str, payload: Mapping[str, Any]) -> None:
        """An event that changes no row (a retry scheduled, a cap reached, a utilization report):
        its Event row, for the pages (the chart reads the utilization reports)."""
        if self.job_id is None:  # before the job's folder was chosen: nothing to attach it to
            return
        with transaction.atomic():
            record_event(self.job_id, kind, trial_name, payload)

    def finish_job(
        self, summary: dict[str, Any], state: str, payload: Mapping[str, Any] | None = None
    ) -> None:
        self.submit(self._finish_job, summary, state, payload or {"state": state})

    def _finish_job(self, summary: dict[str, Any], state: str, payload: Mapping[str, Any]) -> None:
        if self.job_id is None:
            return
        with transaction.atomic():
            finish_job_rows(self.job_id, summary, state)
            record_event(self.job_id, "job_finished", "", payload)

    def close(self) -> None:
        from django.db import connections

        self._pool.submit(connections.close_all)  # the writer thread's own connection
        self._pool.shutdown(wait=True)
        live.flush()
