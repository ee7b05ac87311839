"""A trial's page (every attempt, its result, usage, budget, timing, files, regrade history), its
model calls a page at a time, its session logs, and any of its files whole.

Files are read only through runs.results.files: a path from a URL must be one of the attempt's
own regular files (no `..`, no symlink, no other hard link). What the page shows of a folder is
bounded by runs.results.attempt_page (a listing in pages, heads of files); a whole file is
streamed as plain text, a piece at a time as the client takes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils.http import content_disposition_header

from runs.models import Attempt, Job, Trial, Verdict
from runs.results import attempt_folder, attempt_page, event_stream, files, verifier_tab
from runs.results import transcript as calls
from runs.review import human
from runs.workers.overview import attempt_workers
from viewer import queries

TRAJECTORY = attempt_page.TRAJECTORY


def _int(value: str | None, default: int = 1) -> int:
    try:
        return int(value or default)
    except ValueError:
        return default


def _resolve(job: str, trial: str, rollout: str) -> tuple[Job, Trial, Attempt, Path]:
    row = queries.get_job(job)
    trial_row = queries.get_trial(row, trial)
    attempt = queries.get_attempt(trial_row, rollout)
    folder = queries.attempt_folder(row, attempt)
    if folder.is_symlink() or not folder.is_dir():
        raise Http404(f"the folder of attempt {rollout!r} is not there")
    return row, trial_row, attempt, folder


def trial_page(request: HttpRequest, job: str, trial: str) -> HttpResponse:
    row = queries.get_job(job)
    trial_row = queries.get_trial(row, trial)
    attempts = queries.attempts(trial_row)
    ran_on = attempt_workers(row.path, [a.rollout_name for a in attempts])
    for a in attempts:  # where each ran: a worker's name, or the bench run itself
        a.worker = ran_on.get(a.rollout_name, "")  # type: ignore[attr-defined]
    wanted = request.GET.get("attempt")
    chosen = next((a for a in attempts if a.rollout_name == wanted), None)
    if chosen is None:
        chosen = next((a for a in attempts if a.pk == trial_row.best_id), None)
    if chosen is None and attempts:
        chosen = attempts[-1]
    notes, verdicts = human.trial_reviews(trial_row)
    context: dict[str, Any] = {
        "job": row,
        "trial": trial_row,
        "attempts": attempts,
        "notes": notes,
        "verdicts": verdicts,
        "verdict_choices": Verdict.choices,
    }
    if chosen is not None:
        folder = queries.attempt_folder(row, chosen)
        shown = attempt_page.attempt_files(folder, _int(request.GET.get("files")))
        own = not folder.is_symlink()
        result = attempt_folder.read_attempt(str(folder)).result if own else None
        regrades = attempt_page.regrades(folder) if own else None
        context.update(
            attempt=chosen,
            files=shown,
            result=result,
            rewards=attempt_page.rewards_shown(chosen.rewards),
            regrades=regrades,
            verifier_before=verifier_tab.original_run(folder, result, chosen.reward),
            verifier_after=verifier_tab.latest_regrade(folder, regrades) if own else None,
            review=attempt_page.rubric_review(folder) if own else None,
            build_log=files.safe_file(Path(row.path), f"builds/{trial_row.task_name}.log"),
            cause=queries.cause_text(chosen.error_category or chosen.verifier_error_category),
            stream=_first_page(folder, shown),
            stream_kinds=event_stream.KINDS,
            stream_focus=" ".join(event_stream.FOCUS),
        )
    return render(request, "viewer/trial.html", context)


def _first_page(folder: Path, shown: attempt_page.AttemptFiles) -> event_stream.StreamPage | None:
    """The stream's first page, painted with the trial page; the rest comes as it is scrolled to."""
    paths = [e.path for e in shown.logs] + ([TRAJECTORY] if shown.has_transcript else [])
    source = event_stream.find_source(folder, paths) if not folder.is_symlink() else None
    if source is None:
        return None
    first = event_stream.FIRST_PAGE_BYTES
    return event_stream.stream_page(folder, source, event_stream.Cursor(), page_bytes=first)


def stream(request: HttpRequest, job: str, trial: str, rollout: str) -> HttpResponse:
    """The next page of the trial's event stream from a cursor, or (with q) its search hits."""
    row, trial_row, attempt, folder = _resolve(job, trial, rollout)
    kind, rel = request.GET.get("kind", ""), request.GET.get("src", "")
    known = event_stream.is_source_path(rel) and files.safe_file(folder, rel) is not None
    if kind not in event_stream.READERS or not known:
        raise Http404("not a stream of this attempt")
    source = event_stream.source_of(folder, kind, rel)
    cursor = event_stream.Cursor.parse(request.GET)
    query = request.GET.get("q", "")[:200]
    if query:
        page = event_stream.search(folder, source, query, cursor)
    else:
        page = event_stream.stream_page(folder, source, cursor)
    context = {"job": row, "trial": trial_row, "attempt": attempt, "stream": page, "q": query}
    return render(request, "viewer/_stream_hits.html" if query else "viewer/_stream.html", context)


def transcript(request: HttpRequest, job: str, trial: str, rollout: str) -> HttpResponse:
    row, trial_row, attempt, folder = _resolve(job, trial, rollout)
    fh = files.open_file(folder, TRAJECTORY)
    if fh is None:
        raise Http404("this attempt has no model calls (trajectory/llm_trajectory.jsonl)")
    with fh:
        page = calls.transcript_page(fh, _int(request.GET.get("page")))
    return render(
        request,
        "viewer/_transcript.html",
        {"job": row, "trial": trial_row, "attempt": attempt, "page": page},
    )


def jsonl_log(request: HttpRequest, job: str, trial: str, rollout: str) -> HttpResponse:
    row, trial_row, attempt, folder = _resolve(job, trial, rollout)
    rel = request.GET.get("path", "")
    fh = files.open_file(folder, rel) if rel.endswith(".jsonl") else None
    if fh is None:
        raise Http404("no such log in this attempt")
    with fh:
        page = calls.log_page(fh, _int(request.GET.get("page")))
    return render(
        request,
        "viewer/_log.html",
        {"job": row, "trial": trial_row, "attempt": attempt, "rel": rel, "page": page},
    )


def raw_file(request: HttpRequest, job: str, trial: str, rollout: str, rel: str) -> HttpResponse:
    """One of the attempt's files, whole, streamed as plain text that no browser runs (or as a
    download): under ASGI a piece at a time, read only when the server has sent the one before."""
    row, trial_row, attempt, folder = _resolve(job, trial, rollout)
    if rel == "build.log":  # the task's image build log, kept in the job folder
        fh = files.open_file(Path(row.path), f"builds/{trial_row.task_name}.log")
    else:
        fh = files.open_file(folder, rel)
    if fh is None:
        raise Http404("not a file of this attempt")
    return stream_file(request, fh, Path(rel).name, bool(request.GET.get("download")))


def stream_file(request: HttpRequest, fh: Any, name: str, download: bool) -> HttpResponse:
    """A file as a streamed response that never holds it whole (also the console log's)."""
    chunks = files.astream(fh) if isinstance(request, ASGIRequest) else files.stream(fh)
    if download:
        response = StreamingHttpResponse(chunks, content_type="application/octet-stream")
        response["Content-Disposition"] = content_disposition_header(True, name)
    else:
        response = StreamingHttpResponse(chunks, content_type="text/plain; charset=utf-8")
        response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    response["Content-Length"] = str(files.size_of(fh))
    response["X-Content-Type-Options"] = "nosniff"
    return response
