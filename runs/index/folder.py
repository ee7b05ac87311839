"""`bench index PATH`: build or refresh the index rows of job folders from their files.

A job folder is read and replayed as events through the index's projector
(runs/index/projector.py, whose handlers for these are in runs/index/replay.py): the job's
documents, its attempt folders a batch at a time (so a 10,000-attempt job is never in memory at
once), then the end. The rows mean what the live writer's mean (runs/index/rows.py).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import transaction

from runs import events as ev
from runs.index import rows as index_rows
from runs.index import search
from runs.index.projector import Projector
from runs.index.replay import BATCH
from runs.jobfolder import LOCK_FILE
from runs.models import Job, ReviewNote, Trial, TrialVerdict, Verdict
from runs.results import job_documents
from runs.results.attempt_folder import AttemptRecord, job_attempts
from runs.results.job_documents import read_job, read_reviews


def is_job_folder(path: Path) -> bool:
    return job_documents.is_job_folder(path)


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
    reviews: int = 0  # notes and verdicts read back from reviews.json
    problem: str = ""  # why reviews.json was not read


def _when(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


def restore_reviews(job: Job, trials: dict[str, dict[str, Any]]) -> int:
    """The notes and verdicts of reviews.json as rows, for each trial that has none (a new index,
    a copied folder): the dashboard's index can be rebuilt from folders, people's review too. A
    trial with rows keeps them (they are what wrote the file). Returns how many rows were made."""
    rows = {t.name: t for t in Trial.objects.filter(job=job, name__in=list(trials))}
    reviewed = set(
        ReviewNote.objects.filter(trial__job=job).values_list("trial__name", flat=True)
    ) | set(TrialVerdict.objects.filter(trial__job=job).values_list("trial__name", flat=True))
    made, notes = 0, []
    for name, entry in trials.items():
        trial = rows.get(name)
        if trial is None or name in reviewed:
            continue
        for v in entry.get("verdicts") or ():
            if not isinstance(v, dict) or v.get("verdict") not in Verdict.values:
                continue
            row = TrialVerdict.objects.create(
                trial=trial,
                verdict=v["verdict"],
                note=str(v.get("note") or ""),
                author_name=str(v.get("author") or "")[:150],
            )
            if (at := _when(v.get("created_at"))) is not None:
                TrialVerdict.objects.filter(pk=row.pk).update(created_at=at)
            made += 1
        for n in entry.get("notes") or ():
            if not isinstance(n, dict):
                continue
            tags = [w for t in n.get("tags") or () if isinstance(t, str) for w in t.lower().split()]
            step = n.get("step")
            note = ReviewNote.objects.create(
                trial=trial,
                rollout_name=str(n.get("rollout_name") or "")[:300],
                step=step if isinstance(step, int) and not isinstance(step, bool) else None,
                text=str(n.get("text") or ""),
                tags=f" {' '.join(tags)} " if tags else "",
                author_name=str(n.get("author") or "")[:150],
            )
            if (at := _when(n.get("created_at"))) is not None:
                ReviewNote.objects.filter(pk=note.pk).update(created_at=at)
            notes.append(note)
            made += 1
    search.index_notes(notes)
    return made


def _row(record: AttemptRecord, live: bool) -> dict[str, Any]:
    """One attempt folder as the projector takes it: its names, its Attempt fields, its per-trial
    budget, and who ran it (for a folder without evaluation.json)."""
    result = record.result
    if result is not None:
        fields = index_rows.attempt_fields(record.document or {}, result)
        if not fields["sort_at"]:
            fields["sort_at"] = os.stat(record.path).st_mtime
    else:
        fields = index_rows.unfinished_fields(
            record.timing,
            corrupt=record.error,
            live=live,
            mtime=os.stat(record.path).st_mtime,
        )
    meta = record.config or {}
    agent = result.agent if result is not None else meta.get("agent")
    model = result.model if result is not None else meta.get("model")
    return {
        "rollout": record.name,
        "task": record.task,
        "trial": record.trial_name,
        "index": record.trial_index,
        "number": record.number,
        "fields": fields,
        "trial_budget": (record.document or {}).get("trial_budget") if result else None,
        "agent_model": (str(agent), str(model or "")) if agent else None,
    }


def index_job(job_dir: Path) -> Indexed:
    """Build or refresh one job's rows from its folder, in one transaction."""
    job_dir = job_dir.resolve()
    documents = read_job(job_dir)
    live = is_live(job_dir)
    projector = Projector(job_dir)
    with transaction.atomic():
        projector.apply(
            ev.JobFolderRead(
                job_dir.name,
                str(job_dir),
                documents.settings,
                documents.summary,
                live,
                ended=documents.ended,
                n_trials=documents.n_trials,
                finished_at=documents.finished_at,
                duration_s=documents.duration_s,
            )
        )
        batch: list[dict[str, Any]] = []
        count = 0
        for record in job_attempts(job_dir):
            batch.append(_row(record, live))
            count += 1
            if len(batch) >= BATCH:
                projector.apply(ev.AttemptFoldersRead(tuple(batch)))
                batch = []
        if batch:
            projector.apply(ev.AttemptFoldersRead(tuple(batch)))
        projector.apply(ev.Indexed(job_dir.name, str(job_dir), count))
        job = Job.objects.get(path=str(job_dir))
        reviews, problem = read_reviews(job_dir)
        restored = restore_reviews(job, reviews) if reviews else 0
    trials = Trial.objects.filter(job=job, n_attempts__gt=0).count()
    return Indexed(job, count, trials, live, restored, problem)


def index_path(path: Path, say: Callable[[str], None] = lambda _line: None) -> list[Indexed]:
    """`bench index PATH`: a job folder or a jobs folder."""
    done = []
    for job_dir in job_folders(path):
        report = index_job(job_dir)
        say(
            f"{job_dir.name}: {report.attempts} attempts, {report.trials} trials with attempts"
            + (" (running)" if report.live else "")
            + (f", {report.reviews} notes and verdicts from reviews.json" if report.reviews else "")
        )
        if report.problem:
            say(report.problem)
        done.append(report)
    return done
