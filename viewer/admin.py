"""The Django admin (/admin/, the admin role): jobs, trials, attempts and budgets, read-only (the
job folder is the record and the index is rebuilt from it), with actions that call the same
operations as the dashboard and the CLI: resume, cancel, rerun selected trials, regrade them."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from runs.models import Attempt, Budget, Job, ReviewNote, Trial, TrialVerdict
from runs.operations import control
from runs.operations import launch as launching
from runs.operations import regrade as regrading
from runs.problems import Problem, UserError
from viewer.logins import AdminLoginForm
from viewer.operate import can_operate, gateway, job_dir, launcher, user_name

# the admin's own login is throttled and says when a lock refused it, as the dashboard's does
admin.site.login_form = AdminLoginForm


class ReadOnly(admin.ModelAdmin):
    """Rows are the index of job folders: nothing is added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _folder(request: HttpRequest, job: Job) -> Path | None:
    found = job_dir(job)
    if isinstance(found, Problem):
        messages.error(request, found.text)
        return None
    return found


def _report(request: HttpRequest, label: str, call: Any) -> None:
    try:
        call()
    except UserError as exc:
        for problem in exc.problems or [Problem("", str(exc))]:
            messages.error(request, f"{label}: {problem.text}")
    else:
        messages.success(request, label)


def _operator(request: HttpRequest) -> bool:
    if not can_operate(request):
        messages.error(request, "operating jobs needs the operator or admin role")
        return False
    return True


@admin.register(Job)
class JobAdmin(ReadOnly):
    list_display = (
        "name",
        "state",
        "agent",
        "model",
        "n_trials",
        "n_done",
        "passed",
        "failed",
        "errored",
        "mean_reward",
        "cost_usd",
        "total_tokens",
        "started_at",
        "duration_s",
    )
    list_filter = ("state", "agent", "model")
    search_fields = ("name", "path", "tasks_dir", "agent", "model")
    ordering = ("-started_at",)
    actions = ("resume_jobs", "cancel_jobs")

    @admin.action(description="Resume (rerun errored and unfinished trials)")
    def resume_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        if not _operator(request):
            return
        for job in queryset:
            folder = _folder(request, job)
            if folder is not None:
                _report(
                    request,
                    f"resume {job.name}",
                    lambda f=folder: launching.resume(
                        f, launcher(), gateway(), by=user_name(request)
                    ),
                )

    @admin.action(description="Cancel (as SIGTERM)")
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        if not _operator(request):
            return
        for job in queryset:
            folder = _folder(request, job)
            if folder is not None:
                _report(request, f"cancel {job.name}", lambda f=folder: control.cancel(f))


def _by_job(queryset: QuerySet[Trial]) -> dict[Job, list[str]]:
    grouped: dict[Job, list[str]] = defaultdict(list)
    for trial in queryset.select_related("job"):
        grouped[trial.job].append(trial.name)
    return grouped


@admin.register(Trial)
class TrialAdmin(ReadOnly):
    list_display = (
        "name",
        "job",
        "state",
        "outcome",
        "reward",
        "error_category",
        "n_attempts",
        "cost_usd",
        "total_tokens",
        "n_turns",
        "duration_s",
    )
    list_filter = ("state", "outcome", "error_category", "job__agent")
    search_fields = ("name", "task_name", "job__name", "error_category")
    list_select_related = ("job",)
    actions = ("rerun_trials", "regrade_trials")

    @admin.action(description="Rerun selected trials (again, though they have a reward)")
    def rerun_trials(self, request: HttpRequest, queryset: QuerySet[Trial]) -> None:
        if not _operator(request):
            return
        for job, names in _by_job(queryset).items():
            folder = _folder(request, job)
            if folder is not None:
                _report(
                    request,
                    f"rerun {len(names)} trial(s) of {job.name}",
                    lambda f=folder, n=names: launching.resume(
                        f, launcher(), gateway(), redo=n, by=user_name(request)
                    ),
                )

    @admin.action(description="Regrade selected trials")
    def regrade_trials(self, request: HttpRequest, queryset: QuerySet[Trial]) -> None:
        if not _operator(request):
            return
        for job, names in _by_job(queryset).items():
            folder = _folder(request, job)
            if folder is not None:
                _report(
                    request,
                    f"regrade {len(names)} trial(s) of {job.name}",
                    lambda f=folder, n=names: regrading.start_regrade(
                        f, n, "from the admin", launcher(), by=user_name(request)
                    ),
                )


@admin.register(Attempt)
class AttemptAdmin(ReadOnly):
    list_display = (
        "rollout_name",
        "trial",
        "number",
        "state",
        "outcome",
        "reward",
        "error_category",
        "cost_usd",
        "total_tokens",
        "n_turns",
        "n_tool_calls",
        "duration_s",
        "started_at",
    )
    list_filter = ("state", "outcome", "result_state", "error_category", "usage_source")
    search_fields = ("rollout_name", "trial__name", "trial__job__name", "error")
    list_select_related = ("trial",)


@admin.register(Budget)
class BudgetAdmin(ReadOnly):
    list_display = ("job", "trial", "scope", "measure", "limit", "spent", "source", "stopped")
    list_filter = ("scope", "measure", "stopped")
    search_fields = ("job__name", "trial__name")
    list_select_related = ("job", "trial")


@admin.register(ReviewNote)
class ReviewNoteAdmin(ReadOnly):
    """People's notes and tags (appended from the trial page, never edited)."""

    list_display = ("trial", "rollout_name", "step", "tags", "text", "author_name", "created_at")
    list_filter = ("created_at",)
    search_fields = ("trial__name", "trial__job__name", "tags", "text", "author_name")
    list_select_related = ("trial",)


@admin.register(TrialVerdict)
class TrialVerdictAdmin(ReadOnly):
    """Operators' verdicts on trials; the latest of a trial counts."""

    list_display = ("trial", "verdict", "author_name", "created_at", "note")
    list_filter = ("verdict",)
    search_fields = ("trial__name", "trial__job__name", "author_name")
    list_select_related = ("trial",)
