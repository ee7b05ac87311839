"""A trial's page (every attempt, its result, usage, budget, timing, files, regrade history), its
model calls a page at a time, its session logs, and any of its files whole.

Files are read only through runs.results.files: a path from a URL must be one of the attempt's
own regular files (no `..`, no symlink), and large files are cut on the page with a link to the
whole, which is streamed as plain text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.http import FileResponse, Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render

from runs.models import Attempt, Job, Trial
from runs.results import attempt_folder, files
from runs.results import transcript as calls
from runs.results.trial_result import TrialResult
from runs.workers.overview import attempt_workers
from viewer import queries

INLINE = ("agent/", "verifier/", "config.json", "timing.json", "steps/")
TRAJECTORY = "trajectory/llm_trajectory.jsonl"


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


def _result(folder: Path) -> tuple[TrialResult | None, str]:
    """The attempt's result (typed; a Harbor trial's too) and result.json's first bytes as written."""
    if folder.is_symlink() or files.safe_file(folder, attempt_folder.RESULT) is None:
        return None, ""
    text, _ = attempt_folder.result_text(folder, files.HEAD_BYTES)
    return attempt_folder.read_attempt(str(folder)).result, text


def _regrades(folder: Path) -> dict[str, Any] | None:
    path = files.safe_file(folder, "regrade.json")
    if path is None:
        return None
    try:
        data = json.loads(files.read_head(path, 4 << 20).text)
    except ValueError:
        return {"unreadable": True}
    return data if isinstance(data, dict) else None


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
    context: dict[str, Any] = {"job": row, "trial": trial_row, "attempts": attempts}
    if chosen is not None:
        folder = queries.attempt_folder(row, chosen)
        listing = [] if folder.is_symlink() else files.list_files(folder)
        result, raw = _result(folder)
        inline = []
        for entry in listing:
            if entry.path.startswith(INLINE) and not entry.path.endswith(".jsonl"):
                path = files.safe_file(folder, entry.path)
                if path is not None:
                    inline.append((entry, files.read_head(path)))
        context.update(
            attempt=chosen,
            result=result,
            result_text=raw,
            listing=listing,
            inline=inline,
            logs=[e for e in listing if e.path.endswith(".jsonl") and e.path != TRAJECTORY],
            has_transcript=any(e.path == TRAJECTORY for e in listing),
            regrades=_regrades(folder) if not folder.is_symlink() else None,
            build_log=files.safe_file(Path(row.path), f"builds/{trial_row.task_name}.log"),
            cause=queries.cause_text(chosen.error_category or chosen.verifier_error_category),
        )
    return render(request, "viewer/trial.html", context)


def transcript(request: HttpRequest, job: str, trial: str, rollout: str) -> HttpResponse:
    row, trial_row, attempt, folder = _resolve(job, trial, rollout)
    path = files.safe_file(folder, TRAJECTORY)
    if path is None:
        raise Http404("this attempt has no model calls (trajectory/llm_trajectory.jsonl)")
    page = calls.transcript_page(path, _int(request.GET.get("page")))
    return render(
        request,
        "viewer/_transcript.html",
        {"job": row, "trial": trial_row, "attempt": attempt, "page": page},
    )


def jsonl_log(request: HttpRequest, job: str, trial: str, rollout: str) -> HttpResponse:
    row, trial_row, attempt, folder = _resolve(job, trial, rollout)
    rel = request.GET.get("path", "")
    path = files.safe_file(folder, rel) if rel.endswith(".jsonl") else None
    if path is None:
        raise Http404("no such log in this attempt")
    page = calls.log_page(path, _int(request.GET.get("page")))
    return render(
        request,
        "viewer/_log.html",
        {"job": row, "trial": trial_row, "attempt": attempt, "rel": rel, "page": page},
    )


def raw_file(request: HttpRequest, job: str, trial: str, rollout: str, rel: str) -> HttpResponse:
    """One of the attempt's files, whole, streamed as plain text that no browser runs."""
    row, trial_row, attempt, folder = _resolve(job, trial, rollout)
    if rel == "build.log":  # the task's image build log, kept in the job folder
        path = files.safe_file(Path(row.path), f"builds/{trial_row.task_name}.log")
    else:
        path = files.safe_file(folder, rel)
    if path is None:
        raise Http404("not a file of this attempt")
    if request.GET.get("download"):
        return FileResponse(open(path, "rb"), as_attachment=True, filename=path.name)
    response = StreamingHttpResponse(files.stream(path), content_type="text/plain; charset=utf-8")
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    return response
