"""The jobs list and the job page, with the fragments they fetch over HTTP when a hint arrives."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote, unquote

from django.db.models import Count, Sum
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import Resolver404, resolve, reverse

from runs.models import Job, Verdict
from runs.results import files, job_documents
from viewer import confirm, outcomes_views, queries, trial_views
from viewer.fragments import once_per_seq


def _job_seq(request: HttpRequest, kwargs: dict[str, object]) -> tuple[int, int]:
    """A job's identity and state: its last event's sequence number."""
    job = queries.find_job(str(kwargs["job"]))
    return (job.pk, job.last_seq) if job is not None else (0, 0)


def _all_seq(request: HttpRequest, kwargs: dict[str, object]) -> tuple[int, int]:
    """Every job's state at once: how many jobs there are, and their events in all (an event adds
    one to its job's last_seq in its own transaction, so every committed change moves the sum;
    the newest event's id would not on PostgreSQL, where ids are not given in commit order)."""
    row = Job.objects.aggregate(jobs=Count("id"), events=Sum("last_seq"))
    return row["jobs"], row["events"] or 0


def _int(value: str | None, default: int = 0) -> int:
    try:
        return int(value or default)
    except ValueError:
        return default


JOBS_SHOWN = 200


def _fragment(request: HttpRequest, template: str, context: dict[str, object]) -> HttpResponse:
    """A shared fragment (once_per_seq): rendered without the context processors, so nothing of
    the visitor (user, permissions, CSRF token, messages) is in it or costs a query; the request
    is there for the query string of its links."""
    return HttpResponse(render_to_string(template, {**context, "request": request}))


def _jobs_context() -> dict[str, object]:
    jobs = queries.job_list()
    return {"jobs": jobs[:JOBS_SHOWN], "total": jobs.count(), "shown": JOBS_SHOWN}


def jobs(request: HttpRequest) -> HttpResponse:
    return render(request, "viewer/jobs.html", _jobs_context())


@once_per_seq(_all_seq)
def jobs_table(request: HttpRequest) -> HttpResponse:
    return _fragment(request, "viewer/_jobs_table.html", _jobs_context())


def _trials_context(request: HttpRequest, job: queries.Job) -> dict[str, object]:
    sort = request.GET.get("sort", "trial")
    show = request.GET.get("show", "")
    q = request.GET.get("q", "")[:200]
    tag, verdict = request.GET.get("tag", "")[:40], request.GET.get("verdict", "")[:20]
    page = queries.trials_page(job, sort, show, q, _int(request.GET.get("page"), 1), tag, verdict)
    return {
        "tag": tag,
        "verdict": verdict,
        "verdicts": [("none", "no verdict"), *Verdict.choices],
        "job": job,
        "page": page,
        "hits": queries.trial_hits(q, page),
        "sort": sort,
        "show": show,
        "q": q,
        "sorts": queries.TRIAL_SORTS,
        "filters": queries.OUTCOME_FILTERS,
    }


def _progress_context(job: queries.Job) -> dict[str, object]:
    return {
        "job": job,
        "running": queries.running(job),
        "budgets": queries.job_budgets(job),
        "trial_budgets": queries.trial_budget_totals(job),
        "waiting": max(0, job.n_trials - job.n_done - job.n_running),
    }


def job_page(request: HttpRequest, job: str) -> HttpResponse:
    row = queries.get_job(job)
    files = job_documents.job_files(row.path)  # a few stats: which of the job's own files exist
    log = next((name for name in job_documents.LOGS if name in files), None)
    context = {
        **_trials_context(request, row),
        **_progress_context(row),
        "job_log": log,
        "job_files": [name for name in files if name != log],
        "coordination": _coordination_lines(row.path),
        "confirm": confirm.pending(row.key),
    }
    return render(request, "viewer/job.html", context)


def _coordination_lines(path: str) -> list[str]:
    """Where a job handed to the worker fleet is coordinated, and each handover."""
    from pathlib import Path

    from runs.operations.control import on_fleet
    from runs.workers.coordination import where

    if not on_fleet(Path(path)):
        return []
    found = where(str(Path(path).resolve()))
    return found.lines() if found is not None else []


def job_file(request: HttpRequest, job: str, name: str) -> HttpResponse:
    """One of the job's own documents (evaluation.json, summary.json, a Harbor job's config.json,
    result.json, job.log, ...), whole, as plain text that no browser runs."""
    row = queries.get_job(job)
    fh = files.open_file(Path(row.path), name) if name in job_documents.JOB_FILES else None
    if fh is None:
        raise Http404(f"{name!r} is not one of this job's own files")
    return trial_views.stream_file(request, fh, name, download=False)


@once_per_seq(_job_seq)
def job_trials(request: HttpRequest, job: str) -> HttpResponse:
    row = queries.get_job(job)
    return _fragment(request, "viewer/_trials.html", _trials_context(request, row))


@once_per_seq(_job_seq)
def job_grid(request: HttpRequest, job: str) -> HttpResponse:
    row = queries.get_job(job)
    return _fragment(
        request, "viewer/_grid.html", {"job": row, "grid": outcomes_views.job_grid(row)}
    )


@once_per_seq(_job_seq)
def job_live(request: HttpRequest, job: str) -> HttpResponse:
    """What a hint changed on the job page, in one response (one request per hint per page):
    the progress and the trials page the visitor is on (the trials' own query), and after a
    trial finished or was regraded (`?parts=finished`) the outcomes grid, the chart's series and
    the regrades too."""
    request.GET = request.GET.copy()  # the trials' links are made from the query, without parts
    finished = request.GET.pop("parts", [""])[-1] == "finished"
    row = queries.get_job(job)
    context = {**_trials_context(request, row), **_progress_context(row), "finished": finished}
    if finished:
        context["grid"] = outcomes_views.job_grid(row)
        context["chart"] = json.dumps(queries.utilization_series(row), separators=(",", ":"))
        context.update(queries.job_regrades(row))
    return _fragment(request, "viewer/_live.html", context)


def search(request: HttpRequest) -> HttpResponse:
    """`/search/?q=...`: the trials whose calls, tool calls, output, instruction or errors hold
    every word, across the jobs in view (`&job=NAME`: one job's name), each at its step."""
    q = request.GET.get("q", "")[:200]
    job = request.GET.get("job", "")[:200]
    context: dict[str, object] = {"q": q, "job_name": job}
    if q.strip():
        context.update(queries.search_jobs(q, job, _int(request.GET.get("page"), 1)))
    return render(request, "viewer/search.html", context)


def job_chart(request: HttpRequest, job: str) -> JsonResponse:
    return JsonResponse(queries.utilization_series(queries.get_job(job)))


def job_events(request: HttpRequest, job: str) -> JsonResponse:
    """What a page missed while its socket was down: the events after its last sequence number."""
    row = queries.get_job(job)
    after = _int(request.GET.get("after"))
    return JsonResponse(
        {"job": row.name, "last_seq": row.last_seq, "events": queries.events_after(row, after)}
    )


def by_name(request: HttpRequest, name: str, rest: str) -> HttpResponse:
    """A URL naming a job by its name alone (bookmarks from before keys): the same page of the
    newest job of that name, at its key. Nothing else is redirected: a key with a path no page
    has is not found."""
    job = queries.get_job(name)
    url = reverse("viewer:job", args=[job.key]) + quote(rest, safe="/!$&'()*+,;=~:@")
    if name == job.key or _resolves_here(url):
        raise Http404(f"no page {request.path}")
    query = request.META.get("QUERY_STRING", "")
    moved = HttpResponseRedirect(url + (f"?{query}" if query else ""))
    if request.method not in ("GET", "HEAD"):
        moved.status_code = 307  # a form posted to the old URL is posted again to the new one
    return moved


def _resolves_here(url: str) -> bool:
    """Whether `url` would come back to by_name (a path no page of the job has)."""
    try:
        return resolve(unquote(url)).func is by_name
    except Resolver404:
        return True
