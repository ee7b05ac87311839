"""`bench index PATH`: build or refresh the index rows of job folders from their files.

Idempotent (a second run changes nothing and doubles nothing) and streaming: attempt folders are
read and written in batches, so a 10,000-attempt job is never in memory at once; only each
trial's id is kept between batches. The rows mean what the live writer's mean (runs/index/rows.py).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
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
from runs.results.attempts import NOT_STARTED_MARK, read_json

BATCH = 500  # attempt folders read and written at a time (about 2 MB of result.json)
ATTEMPT_FIELDS = [
    f.name
    for f in Attempt._meta.concrete_fields
    if f.name not in ("id", "trial", "rollout_name", "number")
]
DEFAULTS = {name: Attempt._meta.get_field(name).get_default() for name in ATTEMPT_FIELDS}
ATTEMPT_FIELDS.append("number")


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
    settings = read_json(str(job_dir / "evaluation.json"))
    settings = settings if isinstance(settings, dict) else {}
    summary = read_json(str(job_dir / "summary.json"))
    summary = summary if isinstance(summary, dict) else None
    live = is_live(job_dir)
    state = JobState.RUNNING if live else JobState.FINISHED if summary else JobState.INTERRUPTED
    with transaction.atomic():
        job = ensure_job(job_dir, settings, state=state, summary=summary if not live else None)
        known = dict(Trial.objects.filter(job=job).values_list("name", "id"))
        seen: set[str] = set()
        first: tuple[str, str] | None = (
            None  # agent and model, for a folder without evaluation.json
        )
        batch: list[dict[str, Any]] = []
        for entry in _attempt_entries(job_dir):
            row = _read(entry, live)
            if row is None:
                continue
            seen.add(row["rollout"])
            first = first or row["agent_model"]
            batch.append(row)
            if len(batch) >= BATCH:
                _write_batch(job, batch, known)
                batch = []
        if batch:
            _write_batch(job, batch, known)
        # attempt folders removed since the last index (compared here: a long IN list is not)
        stale = [
            pk
            for pk, name in Attempt.objects.filter(trial__job=job).values_list("id", "rollout_name")
            if name not in seen
        ]
        for i in range(0, len(stale), BATCH):
            Attempt.objects.filter(id__in=stale[i : i + BATCH]).delete()
        if not settings.get("agent") and first:
            Job.objects.filter(pk=job.pk).update(agent=first[0], model=first[1])
        trials = _refresh_trials(job, live)
        if live:
            refresh_job(job.pk)
        else:
            finish_job_rows(job.pk, summary, state)
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
