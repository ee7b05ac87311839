"""`bench view`: a job's trials and one trial's files, read from the job folder (the record)."""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from runs.results.load import load_job

TEXT_LIMIT = 200_000  # characters of a log shown on a page


def _root() -> Path:
    return Path(settings.BENCHFLOW_VIEW_ROOT).resolve()


def _jobs() -> list[Path]:
    root = _root()
    if (root / "evaluation.json").is_file() or any(root.glob("*/result.json")):
        return [root]
    return sorted(
        (p for p in root.iterdir() if p.is_dir() and (p / "evaluation.json").is_file()),
        reverse=True,
    )


def _job(name: str) -> Path:
    for job in _jobs():
        if job.name == name:
            return job
    raise Http404(f"no job {name!r} under {_root()}")


def index(request: HttpRequest) -> HttpResponse:
    jobs = [load_job(p) for p in _jobs()]
    if len(jobs) == 1:
        return job_page(request, jobs[0].name)
    return render(request, "viewer/index.html", {"root": _root(), "jobs": jobs})


def job_page(request: HttpRequest, name: str) -> HttpResponse:
    job = load_job(_job(name), attempts="all" if request.GET.get("attempts") == "all" else "best")
    return render(
        request, "viewer/job.html", {"job": job, "d": job.denominators(include_controls=True)}
    )


def _read(path: Path) -> str | None:
    if not path.is_file() or path.is_symlink():
        return None
    text = path.read_text(errors="replace")
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + "\n[… cut here]"


def trial_page(request: HttpRequest, name: str, rollout: str) -> HttpResponse:
    job = _job(name)
    folder = job / rollout
    if folder.parent != job or not (folder / "config.json").is_file():
        raise Http404(f"no attempt {rollout!r} in {name}")
    result = json.loads(_read(folder / "result.json") or "null")
    files = {
        rel: _read(folder / rel)
        for rel in sorted(
            p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
        )
        if rel.startswith(("agent/", "verifier/", "steps/"))
        or rel in ("config.json", "timing.json")
    }
    return render(
        request,
        "viewer/trial.html",
        {
            "job": job.name,
            "rollout": rollout,
            "result": result,
            "result_text": json.dumps(result, indent=2),
            "files": files,
        },
    )
