"""Writes the job's progress to the database index, off the event loop, in one writer thread."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from runs.models import Attempt, AttemptState, Job, JobState, Trial


def outcome_of(result: dict[str, Any] | None) -> str:
    """passed | failed | errored | verifier_errored (a reward wins over an error)."""
    if result is None:
        return "interrupted"
    reward = (result.get("rewards") or {}).get("reward")
    if isinstance(reward, (int, float)) and not isinstance(reward, bool):
        return "passed" if reward == 1.0 else "failed"
    if result.get("error"):
        return "errored"
    return "verifier_errored"


class Index:
    """A single writer thread: SQLite takes one writer at a time, and the loop never blocks on it."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="bench-index"
        )
        self.job_id: int | None = None
        self._trials: dict[str, int] = {}

    def submit(self, fn: Any, *args: Any) -> concurrent.futures.Future[Any]:
        return self._pool.submit(fn, *args)

    def open_job(self, job_dir: Path, settings: dict[str, Any]) -> None:
        self.submit(self._open_job, job_dir, settings)

    def _open_job(self, job_dir: Path, settings: dict[str, Any]) -> None:
        job, _ = Job.objects.update_or_create(
            path=str(job_dir.resolve()),
            defaults={
                "name": job_dir.name,
                "tasks_dir": settings.get("tasks_dir", ""),
                "agent": settings.get("agent", ""),
                "model": settings.get("model") or "",
                "state": JobState.RUNNING,
                "settings": settings,
                "n_trials": len(settings.get("plan") or []) * int(settings.get("trials") or 1),
            },
        )
        self.job_id = job.pk

    def _trial_id(self, trial_name: str, task_name: str, trial_index: int) -> int:
        if trial_name not in self._trials:
            trial, _ = Trial.objects.get_or_create(
                job_id=self.job_id,
                name=trial_name,
                defaults={"task_name": task_name, "trial_index": trial_index},
            )
            self._trials[trial_name] = trial.pk
        return self._trials[trial_name]

    def attempt_created(
        self, trial_name: str, task_name: str, trial_index: int, rollout: str, number: int
    ) -> None:
        self.submit(self._attempt_created, trial_name, task_name, trial_index, rollout, number)

    def _attempt_created(
        self, trial_name: str, task_name: str, trial_index: int, rollout: str, number: int
    ) -> None:
        trial_id = self._trial_id(trial_name, task_name, trial_index)
        Attempt.objects.get_or_create(
            trial_id=trial_id,
            rollout_name=rollout,
            defaults={"number": number, "state": AttemptState.RUNNING},
        )

    def attempt_finished(self, result: dict[str, Any], best: dict[str, Any] | None) -> None:
        self.submit(self._attempt_finished, result, best)

    def _attempt_finished(self, result: dict[str, Any], best: dict[str, Any] | None) -> None:
        trial_id = self._trial_id(
            result["trial_name"], result["task_name"], result.get("trial_index", 0)
        )
        reward = (result.get("rewards") or {}).get("reward")
        usage = result.get("agent_result") or {}
        with transaction.atomic():
            Attempt.objects.filter(trial_id=trial_id, rollout_name=result["rollout_name"]).update(
                state=AttemptState.FINISHED,
                reward=reward,
                error=(result.get("error") or result.get("verifier_error") or "")[:5000],
                error_category=result.get("error_category") or "",
                verifier_error_category=result.get("verifier_error_category") or "",
                n_tool_calls=result.get("n_tool_calls") or 0,
                total_tokens=usage.get("total_tokens"),
                cost_usd=usage.get("cost_usd"),
                finished_at=timezone.now(),
                duration_s=(result.get("timing") or {}).get("total"),
            )
            best = best or result
            Trial.objects.filter(pk=trial_id).update(
                outcome=outcome_of(best),
                reward=(best.get("rewards") or {}).get("reward"),
                n_attempts=Attempt.objects.filter(trial_id=trial_id).count(),
            )

    def attempt_cancelled(self, trial_name: str, rollout: str) -> None:
        self.submit(self._attempt_cancelled, trial_name, rollout)

    def _attempt_cancelled(self, trial_name: str, rollout: str) -> None:
        if trial_name in self._trials:
            Attempt.objects.filter(trial_id=self._trials[trial_name], rollout_name=rollout).update(
                state=AttemptState.CANCELLED, finished_at=timezone.now()
            )

    def finish_job(self, summary: dict[str, Any], state: str) -> None:
        self.submit(self._finish_job, summary, state)

    def _finish_job(self, summary: dict[str, Any], state: str) -> None:
        Job.objects.filter(pk=self.job_id).update(
            state=state,
            summary=summary,
            passed=summary.get("passed") or 0,
            failed=summary.get("failed") or 0,
            errored=(summary.get("errored") or 0) + (summary.get("verifier_errored") or 0),
            finished_at=timezone.now(),
        )

    def close(self) -> None:
        from django.db import connections

        self._pool.submit(connections.close_all)  # the writer thread's own connection
        self._pool.shutdown(wait=True)
