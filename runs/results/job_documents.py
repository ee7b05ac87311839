"""A job folder's own documents, read once for every reader: ours (evaluation.json, summary.json,
console.log) or a Harbor job's (config.json, result.json, job.log), in evaluation.json's names.

`bench results` and `bench index` take the job's settings, whether it ended, when, and how many
trials it planned from here; the job page links the documents it finds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from runs.jobfolder import read_object
from runs.results.attempt_folder import RESULT
from runs.results.harbor import read as harbor

# The job's own files a page offers, in this order; the first log present is the job's log.
JOB_FILES = (
    "evaluation.json",
    "summary.json",
    "console.log",
    "config.json",
    "result.json",
    "job.log",
    "lock.json",
    "reviews.json",
)
LOGS = ("console.log", "job.log")
REVIEWS = "reviews.json"  # people's notes and verdicts, by trial (runs/review/human.py writes it)


def read_reviews(job_dir: str | os.PathLike[str]) -> tuple[dict[str, dict[str, Any]], str]:
    """reviews.json's trials (name -> {"notes": [...], "verdicts": [...]}) and, when the file is
    there but not one, why (a line naming it); ({}, "") when the job has none."""
    path = os.path.join(job_dir, REVIEWS)
    if not os.path.isfile(path):
        return {}, ""
    doc = read_object(path)
    trials = doc.get("trials") if doc is not None else None
    if not isinstance(trials, dict):
        return {}, f'{path}: not a reviews document (an object with "trials"); left as it is'
    return {str(k): v for k, v in trials.items() if isinstance(v, dict)}, ""


@dataclass
class JobDocuments:
    """`settings` in evaluation.json's names; `ended` once the job said it finished (summary.json,
    or Harbor's finished_at); `n_trials` as the job planned them, when it says (Harbor does)."""

    source: Literal["benchflow", "harbor"]
    settings: dict[str, Any]
    summary: dict[str, Any] | None = None
    ended: bool = False
    started_at: str | None = None
    finished_at: str | None = None
    n_trials: int | None = None
    files: list[str] = field(default_factory=list)

    @property
    def log(self) -> str | None:
        return next((name for name in LOGS if name in self.files), None)

    @property
    def duration_s(self) -> float | None:
        if self.started_at and self.finished_at:
            try:
                start = datetime.fromisoformat(self.started_at)
                end = datetime.fromisoformat(self.finished_at)
                return (end - start).total_seconds()
            except (ValueError, TypeError):
                return None
        return None


def job_files(job_dir: str | os.PathLike[str]) -> list[str]:
    """The job's own documents present (regular files, never a symlink), in JOB_FILES' order."""
    found = []
    for name in JOB_FILES:
        path = os.path.join(job_dir, name)
        if os.path.isfile(path) and not os.path.islink(path):
            found.append(name)
    return found


def read_job(job_dir: str | os.PathLike[str]) -> JobDocuments:
    """The job's documents: evaluation.json and summary.json, else a Harbor job's config.json
    and result.json, else nothing (a folder of attempt folders only)."""
    files = job_files(job_dir)
    settings = read_object(os.path.join(job_dir, "evaluation.json"))
    if settings is not None:
        summary = read_object(os.path.join(job_dir, "summary.json"))
        created = settings.get("created_at")
        return JobDocuments(
            "benchflow",
            settings,
            summary,
            ended=summary is not None,
            started_at=str(created) if created else None,
            files=files,
        )
    config = read_object(os.path.join(job_dir, "config.json"))
    if config is not None and harbor.is_job_config(config):
        result = read_object(os.path.join(job_dir, "result.json")) or {}
        total, started, finished = harbor.job_progress(result)
        return JobDocuments(
            "harbor",
            harbor.job_settings(config, result),
            ended=finished is not None,
            started_at=started,
            finished_at=finished,
            n_trials=total,
            files=files,
        )
    return JobDocuments("benchflow", {}, files=files)


def _own_documents(path: str | os.PathLike[str]) -> bool:
    if os.path.isfile(os.path.join(path, "evaluation.json")):
        return True
    config = read_object(os.path.join(path, "config.json"))
    return config is not None and harbor.is_job_config(config)


def is_job_folder(path: str | os.PathLike[str]) -> bool:
    """Ours (evaluation.json), a Harbor job's (its config.json), or a folder of attempt folders
    at least one of which wrote its result (a job folder inside a jobs folder is no attempt: a
    Harbor job's own result.json sits where an attempt's would)."""
    if _own_documents(path):
        return True
    try:
        with os.scandir(path) as entries:
            return any(
                e.is_dir()
                and "__" in e.name
                and os.path.exists(os.path.join(e.path, RESULT))
                and not _own_documents(e.path)
                for e in entries
            )
    except OSError:
        return False


def not_a_job(path: object) -> str:
    """What a command says of a folder that is no job folder."""
    return (
        f"{path} is not a job folder (no evaluation.json, no Harbor job config.json and no "
        "<task>__<id>/result.json in it); fix: pass a folder made by bench run or harbor run"
    )
