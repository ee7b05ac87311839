"""`bench index PATH`: build or refresh the index rows of job folders from their files.

Idempotent (a second run changes nothing and doubles nothing) and streaming: attempt folders are
read and written in batches, so a 10,000-attempt job is never in memory at once; only each
trial's id is kept between batches. The rows mean what the live writer's mean (runs/index/rows.py).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from runs.index import rows as index_rows
from runs.index.writer import (
    ATTEMPT_COLUMNS,
    ensure_job,
    finish_job_rows,
    record_event,
    refresh_job,
    save_trial_budgets,
)
from runs.jobfolder import LOCK_FILE
from runs.models import Attempt, Job, JobState, Trial
from runs.results import job_documents
from runs.results.attempt_folder import AttemptRecord, job_attempts
from runs.results.job_documents import read_job

BATCH = 500  # attempt folders read and written at a time (about 2 MB of result.json)
ATTEMPT_FIELDS = [
    f.name
    for f in Attempt._meta.concrete_fields
    if f.name not in ("id", "trial", "rollout_name", "number")
]
DEFAULTS = {name: Attempt._meta.get_field(name).get_default() for name in ATTEMPT_FIELDS}
ATTEMPT_FIELDS.append("number")


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


def _row(record: AttemptRecord, live: bool) -> dict[str, Any]:
    """One attempt folder's rows: its Attempt fields, its trial, its per-trial budget."""
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


def _trial_ids(job: Job, rows: list[dict[str, Any]], known: dict[str, int]) -> None:
    new = {r["trial"]: r for r in rows if r["trial"] not in known}
    if not new:
        return
    Trial.objects.bulk_create(
        [
            Trial(job=job, name=name, task_name=r["task"], trial_index=r["index"], position=10**6)
            for name, r in new.items()
        ],
        ignore_conflicts=True,
    )
    known.update(
        Trial.objects.filter(job=job, name__in=list(new)).values_list("name", "id").iterator()
    )


def _write_batch(job: Job, rows: list[dict[str, Any]], known: dict[str, int]) -> None:
    _trial_ids(job, rows, known)
    # one INSERT ... ON CONFLICT DO UPDATE a batch (bulk_update's CASE per column is 10x slower)
    Attempt.objects.bulk_create(
        [
            Attempt(
                trial_id=known[r["trial"]],
                rollout_name=r["rollout"],
                number=r["number"],
                **{name: r["fields"].get(name, DEFAULTS[name]) for name in DEFAULTS},
            )
            for r in rows
        ],
        update_conflicts=True,
        unique_fields=["trial", "rollout_name"],
        update_fields=ATTEMPT_FIELDS,
    )
    for r in rows:
        if r["trial_budget"]:
            save_trial_budgets(job.pk, known[r["trial"]], r["trial_budget"])


def _refresh_trials(job: Job, live: bool) -> int:
    """Every trial's row from its attempts' rows, one pass over them ordered by trial."""
    Trial.objects.filter(job=job).update(
        state="waiting" if live else "not_run",
        outcome="",
        best=None,
        n_attempts=0,
        phase="",
        error_category="",
        **dict.fromkeys(index_rows.TRIAL_COPIED),
    )
    rows = (
        Attempt.objects.filter(trial__job=job)
        .order_by("trial_id")
        .values("trial_id", *ATTEMPT_COLUMNS)
        .iterator(chunk_size=2000)
    )
    names = ["n_attempts", "phase", "state", "outcome", "best_id", "error_category"]
    names += list(index_rows.TRIAL_COPIED)
    # executemany of one UPDATE: bulk_update's CASE WHEN per column costs seconds at 10,000 trials
    table = Trial._meta.db_table
    columns = ", ".join(f"{Trial._meta.get_field(n).column} = %s" for n in names)
    sql = f"UPDATE {table} SET {columns} WHERE id = %s"
    batch: list[list[Any]] = []
    count = 0
    with connection.cursor() as cursor:
        for trial_id, group in groupby(rows, key=lambda r: r["trial_id"]):
            fields = index_rows.trial_fields(list(group), live)
            batch.append([fields[k] for k in names] + [trial_id])
            count += 1
            if len(batch) >= BATCH:
                cursor.executemany(sql, batch)
                batch = []
        if batch:
            cursor.executemany(sql, batch)
    return count


def index_job(job_dir: Path) -> Indexed:
    """Build or refresh one job's rows from its folder, in one transaction."""
    job_dir = job_dir.resolve()
    documents = read_job(job_dir)
    settings, summary = documents.settings, documents.summary
    live = is_live(job_dir)
    state = (
        JobState.RUNNING if live else JobState.FINISHED if documents.ended else JobState.INTERRUPTED
    )
    with transaction.atomic():
        job = ensure_job(
            job_dir,
            settings,
            state=state,
            summary=summary if not live else None,
            n_trials=documents.n_trials,
        )
        known = dict(Trial.objects.filter(job=job).values_list("name", "id"))
        seen: set[tuple[str, str]] = set()
        first: tuple[str, str] | None = (
            None  # agent and model, for a folder without evaluation.json
        )
        batch: list[dict[str, Any]] = []
        for record in job_attempts(job_dir):
            row = _row(record, live)
            seen.add((row["trial"], row["rollout"]))
            first = first or row["agent_model"]
            batch.append(row)
            if len(batch) >= BATCH:
                _write_batch(job, batch, known)
                batch = []
        if batch:
            _write_batch(job, batch, known)
        # attempt folders removed since the last index (compared here: a long IN list is not)
        # (a Harbor trial may be numbered anew as its task's trials finish: keyed by trial too)
        stale = [
            pk
            for pk, trial, name in Attempt.objects.filter(trial__job=job).values_list(
                "id", "trial__name", "rollout_name"
            )
            if (trial, name) not in seen
        ]
        for i in range(0, len(stale), BATCH):
            Attempt.objects.filter(id__in=stale[i : i + BATCH]).delete()
        if not settings.get("agent") and first:
            Job.objects.filter(pk=job.pk).update(agent=first[0], model=first[1])
        trials = _refresh_trials(job, live)
        if trials > job.n_trials:  # a folder that names no plan: at least the trials it holds
            Job.objects.filter(pk=job.pk).update(n_trials=trials)
        if live:
            refresh_job(job.pk)
        else:
            finish_job_rows(
                job.pk,
                summary,
                state,
                finished_at=index_rows.parse_time(documents.finished_at),
                duration_s=documents.duration_s,
            )
        record_event(job.pk, "indexed", "", {"attempts": len(seen)})
    job.refresh_from_db()
    return Indexed(job, len(seen), trials, live)


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
