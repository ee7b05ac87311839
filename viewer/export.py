"""`bench view JOB [JOB...] --export out.html`: the jobs in one self-contained, redacted HTML file.

The file holds the outcomes grid across the jobs, pass@1 per column, the Pareto view, each job's
figures and utilization chart, and every trial with its best attempt's result, files' heads and
model calls. CSS and JS are inlined (the vendored uPlot and our own scripts); nothing is fetched,
so it opens from a disk or an email attachment. Before the assets go in, the page's text is
redacted: the secret values of this machine's environment (runs/secrets.py) and anything shaped
like a key.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.template.loader import render_to_string
from django.utils.html import escape

from runs.models import Job
from runs.results import attempt_page, files
from runs.results import transcript as calls
from runs.secrets import redact_text, secret_values
from viewer import outcomes_views, queries

# inlined in this order (paths under static/)
STYLES = ("viewer/viewer.css", "vendor/uplot-1.6.32/uPlot.min.css")
SCRIPTS = (
    "vendor/uplot-1.6.32/uPlot.iife.min.js",
    "viewer/chart.js",
    "viewer/grid.js",
    "viewer/pareto.js",
    "viewer/export.js",
)
CALLS_PER_TRIAL = 500  # model calls of a trial written out; the rest are counted


@dataclass
class Exported:
    out: Path
    jobs: int
    trials: int
    redacted: int  # secret values and key-shaped strings replaced
    bytes: int


def anchor(index: int, name: str) -> str:
    """A trial's element id: what grid.js's link (`#j<index>-` + encodeURIComponent(name)) names."""
    return f"j{index}-" + quote(name, safe="-_.!~*'()")


def _asset(rel: str) -> str:
    for root in settings.STATICFILES_DIRS:
        path = Path(root) / rel
        if path.is_file():
            return path.read_text(encoding="utf-8")
    raise FileNotFoundError(rel)


def _transcript(folder: Path) -> dict[str, Any] | None:
    fh = files.open_file(folder, attempt_page.TRAJECTORY)
    if fh is None:
        return None
    with fh:
        page = calls.transcript_page(fh, 1, CALLS_PER_TRIAL)
    return {"calls": page.calls, "total": page.total, "more": max(0, page.total - len(page.calls))}


def _trial(job: Job, index: int, trial: Any) -> dict[str, Any]:
    attempts = queries.attempts(trial)
    best = next((a for a in attempts if a.pk == trial.best_id), attempts[-1] if attempts else None)
    shown: dict[str, Any] = {
        "trial": trial,
        "anchor": anchor(index, trial.name),
        "attempts": attempts,
    }
    if best is not None:
        folder = queries.attempt_folder(job, best)
        if not folder.is_symlink() and folder.is_dir():
            shown.update(
                attempt=best,
                files=attempt_page.attempt_files(folder),
                transcript=_transcript(folder),
                cause=queries.cause_text(best.error_category or best.verifier_error_category),
            )
    return shown


def _job(job: Job, index: int) -> dict[str, Any]:
    trials = list(queries.trials(job))
    return {
        "job": job,
        "index": index,
        "chart": queries.utilization_series(job),
        "chart_id": f"chart-{index}",
        "chart_data_id": f"chart-{index}-data",
        "trials": [_trial(job, index, t) for t in trials],
    }


def render(jobs: list[Job]) -> tuple[str, int]:
    """The file's text and how many secrets were replaced."""
    bases = {job.pk: f"#j{i}-" for i, job in enumerate(jobs)}
    shared = outcomes_views.across(jobs, href=lambda job: bases[job.pk])
    for column in shared["grid"]["columns"]:
        column["suffix"] = ""
    context = {
        **shared,
        "jobs": [_job(job, i) for i, job in enumerate(jobs)],
        "made_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "styles": [f"/*@asset:{rel}@*/" for rel in STYLES],
        "scripts": [f"/*@asset:{rel}@*/" for rel in SCRIPTS],
    }
    text = render_to_string("viewer/export.html", context)
    values = secret_values(dict(os.environ))
    text, count = redact_text(text, values + [escape(v) for v in values] + _json_forms(values))
    for rel in (*STYLES, *SCRIPTS):
        body = _asset(rel).replace("</", "<\\/") if rel.endswith(".js") else _asset(rel)
        text = text.replace(f"/*@asset:{rel}@*/", body)
    return text, count


def _json_forms(values: list[str]) -> list[str]:
    """A value as json_script writes it (its <, > and & escaped)."""
    return [
        json.dumps(v)[1:-1].replace("<", "\\u003C").replace(">", "\\u003E").replace("&", "\\u0026")
        for v in values
    ]


def export(jobs: list[Job], out: Path) -> Exported:
    text, count = render(jobs)
    tmp = out.with_name(out.name + ".writing")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)
    return Exported(out, len(jobs), sum(j.n_trials for j in jobs), count, len(text.encode()))
