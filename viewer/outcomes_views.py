"""Outcomes across jobs (the grid, pass@1 per column, the Pareto view) and the job page's grid:
compact JSON from runs/results/outcomes.py that static/viewer/grid.js draws on a canvas."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from runs.models import Job
from runs.results import outcomes
from viewer import queries

MAX_JOBS = 24


def label(job: Job) -> str:
    """A column's name: agent and model, then the job (grid.js draws the two on two lines)."""
    model = f" / {job.model}" if job.model else ""
    return f"{job.agent or '–'}{model} · {job.name}"


def trial_base(job: Job) -> str:
    """The start of a trial page's URL in this job (the name and a slash follow)."""
    return reverse("viewer:trial", args=[job.key, "-"])[:-2]


def job_grid(job: Job) -> dict[str, Any]:
    """The job page's grid: the job's one column."""
    rows = queries.trial_rows(job)
    tasks = outcomes.task_rows([rows])
    return outcomes.grid(
        [outcomes.column(job.key, label(job), trial_base(job), rows, tasks)], tasks
    )


def across(jobs: list[Job], show: str = "all", href: Any = None) -> dict[str, Any]:
    """The grid and the Pareto points of several jobs (`href(job)`: where a trial's link starts)."""
    rows = [queries.trial_rows(job, costs=True) for job in jobs]
    tasks = outcomes.task_rows(rows)
    base = href or trial_base
    columns = [
        outcomes.column(job.key, label(job), base(job), r, tasks)
        for job, r in zip(jobs, rows, strict=True)
    ]
    points = [
        outcomes.pareto_point(job.key, label(job), r) for job, r in zip(jobs, rows, strict=True)
    ]
    return {
        "grid": outcomes.grid(columns, tasks, show if show in outcomes.ROW_FILTERS else "all"),
        "pareto": outcomes.pareto(points),
        "pareto_measures": list(outcomes.MEASURE_NAMES.items()),
    }


def outcomes_page(request: HttpRequest) -> HttpResponse:
    keys = list(dict.fromkeys(request.GET.getlist("job")))[:MAX_JOBS]
    show = request.GET.get("show", "all")
    jobs = [queries.get_job(key) for key in keys]
    context: dict[str, Any] = {
        "choices": queries.job_list()[:200],
        "chosen": [job.key for job in jobs],
        "show": show,
        "filters": outcomes.ROW_FILTERS,
        "jobs": jobs,
    }
    if jobs:
        context.update(across(jobs, show))
    return render(request, "viewer/outcomes.html", context)
