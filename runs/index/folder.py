"""`bench index PATH`: build or refresh the index rows of job folders from their files.

A job folder is read and replayed as events through the index's projector
(runs/index/projector.py, whose handlers for these are in runs/index/replay.py): the job's
documents, its attempt folders a batch at a time (so a 10,000-attempt job is never in memory at
once), then the end. The rows mean what the live writer's mean (runs/index/rows.py).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction

from runs import events as ev
from runs.index import rows as index_rows
from runs.index.projector import Projector
from runs.index.replay import BATCH
from runs.jobfolder import LOCK_FILE
from runs.models import Job, Trial
from runs.results.attempts import NOT_STARTED_MARK, read_json


def is_job_folder(path: Path) -> bool:
    if (path / "evaluation.json").is_file():
        return True
    try:
        return any(
            e.is_dir() and "__" in e.name and os.path.exists(os.path.join(e.path, "result.json"))
            for e in os.scandir(path)
        )
    except OSError:
        return False


def job_folders(path: Path) -> list[Path]:
    """A job folder, or the job folders in a jobs folder (newest name first)."""
    if is_job_folder(path):
        return [path]
    if not path.is_dir():
        return []
    return sorted(
        (p for p in path.iterdir() if p.is_dir() and is_job_folder(p)),
        key=lambda p: p.name,
        reverse=True,
    )


def is_live(job_dir: Path) -> bool:
    """A `bench run` holds the job's lock (an flock the kernel drops when its holder dies)."""
    lock = job_dir / LOCK_FILE
    if not lock.exists():
        return False
    try:
        with open(lock) as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    except OSError:
        return False
    return False


@dataclass
class Indexed:
    job: Job
    attempts: int
    trials: int
    live: bool


def _attempt_entries(job_dir: Path) -> Iterator[os.DirEntry[str]]:
    with os.scandir(job_dir) as entries:
        for entry in entries:
            if not entry.name.startswith(".") and "__" in entry.name and entry.is_dir():
                yield entry


def _read(entry: os.DirEntry[str], live: bool) -> dict[str, Any] | None:
    """One attempt folder as (names, fields), or None for one to leave out."""
    path = os.path.join(entry.path, "result.json")
    data = read_json(path)
    result = data if isinstance(data, dict) else None
    if result is not None:
        if result.get("purpose") == "reviewer":
            return None
        fields = index_rows.attempt_fields(result)
        if not fields["sort_at"]:
            fields["sort_at"] = entry.stat().st_mtime
        meta = result
    else:
        if os.path.exists(os.path.join(entry.path, NOT_STARTED_MARK)):
            return None
        corrupt = os.path.exists(path)
        timing = read_json(os.path.join(entry.path, "timing.json"))
        fields = index_rows.unfinished_fields(
            timing if isinstance(timing, dict) else None,
            corrupt=corrupt,
            live=live,
            mtime=entry.stat().st_mtime,
        )
        meta = read_json(os.path.join(entry.path, "config.json"))
        meta = meta if isinstance(meta, dict) else {}
    task = str(meta.get("task_name") or entry.name.rsplit("__", 1)[0])
    index = meta.get("trial_index")
    index = index if isinstance(index, int) and not isinstance(index, bool) else 0
    number = meta.get("attempt") if isinstance(meta.get("attempt"), int) else 1
    return {
        "rollout": entry.name,
        "task": task,
        "trial": str(meta.get("trial_name") or task),
        "index": index,
        "number": number,
        "fields": fields,
        "trial_budget": result.get("trial_budget") if result else None,
        "agent_model": (str(meta["agent"]), str(meta.get("model") or ""))
        if meta.get("agent")
        else None,
    }


def index_job(job_dir: Path) -> Indexed:
    """Build or refresh one job's rows from its folder, in one transaction."""
    job_dir = job_dir.resolve()
    settings = read_json(str(job_dir / "evaluation.json"))
    settings = settings if isinstance(settings, dict) else {}
    summary = read_json(str(job_dir / "summary.json"))
    summary = summary if isinstance(summary, dict) else None
    live = is_live(job_dir)
    projector = Projector(job_dir)
    with transaction.atomic():
        projector.apply(ev.JobFolderRead(job_dir.name, str(job_dir), settings, summary, live))
        batch: list[dict[str, Any]] = []
        count = 0
        for entry in _attempt_entries(job_dir):
            row = _read(entry, live)
            if row is None:
                continue
            count += 1
            batch.append(row)
            if len(batch) >= BATCH:
                projector.apply(ev.AttemptFoldersRead(tuple(batch)))
                batch = []
        if batch:
            projector.apply(ev.AttemptFoldersRead(tuple(batch)))
        projector.apply(ev.Indexed(job_dir.name, str(job_dir), count))
    job = Job.objects.get(path=str(job_dir))
    trials = Trial.objects.filter(job=job, n_attempts__gt=0).count()
    return Indexed(job, count, trials, live)


def index_path(path: Path, say: Callable[[str], None] = lambda _line: None) -> list[Indexed]:
    """`bench index PATH`: a job folder or a jobs folder."""
    done = []
    for job_dir in job_folders(path):
        report = index_job(job_dir)
        say(
            f"{job_dir.name}: {report.attempts} attempts, {report.trials} trials with attempts"
            + (" (running)" if report.live else "")
        )
        done.append(report)
    return done
