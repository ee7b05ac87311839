"""A job folder replayed into the index (`bench index`): the projector's handlers of the three
events runs/index/folder.py emits as it reads the folder (the job's documents, its attempt folders
in batches, the end), run in the caller's transaction.

Idempotent (a second replay changes nothing and doubles nothing) and streaming: attempts are
written a batch at a time, one statement each, so a 10,000-attempt job is never in memory at once
and only each trial's id is kept between batches. The rows mean what the live handlers' mean
(runs/index/rows.py)."""

from __future__ import annotations

from itertools import groupby
from pathlib import Path
from typing import Any

from django.db import connection

from runs import events as ev
from runs.index import rows as index_rows
from runs.index import search
from runs.index.projection import Projection, Replay
from runs.index.writer import (
    ATTEMPT_COLUMNS,
    ensure_job,
    finish_job_rows,
    refresh_job,
    save_trial_budgets,
)
from runs.models import Attempt, AttemptState, Job, JobState, Trial

BATCH = 500  # attempt folders read and written at a time (about 2 MB of result.json)
ATTEMPT_FIELDS = [
    f.name
    for f in Attempt._meta.concrete_fields
    if f.name not in ("id", "trial", "rollout_name", "number", "searched")
]
DEFAULTS = {name: Attempt._meta.get_field(name).get_default() for name in ATTEMPT_FIELDS}
ATTEMPT_FIELDS.append("number")


def folder_state(live: bool, ended: bool) -> str:
    """How a job folder's job stands: running while a run holds its lock, else finished once it
    said so (its summary; a Harbor job's finished_at), else interrupted."""
    return JobState.RUNNING if live else JobState.FINISHED if ended else JobState.INTERRUPTED


def folder_read(p: Projection, e: ev.JobFolderRead) -> None:
    summary = e.summary if not e.live else None
    ended = e.summary is not None if e.ended is None else e.ended
    job = ensure_job(
        Path(e.job_dir),
        e.settings,
        state=folder_state(e.live, ended),
        summary=summary,
        n_trials=e.n_trials,
    )
    p.job_id = job.pk
    p.trials = dict(Trial.objects.filter(job=job).values_list("name", "id"))
    p.replay = Replay(e.settings, e.summary, e.live, ended, e.finished_at, e.duration_s)


def attempts_read(p: Projection, e: ev.AttemptFoldersRead) -> None:
    replay, job_id = p.replay, p.job_id
    assert replay is not None and job_id is not None
    rows = list(e.rows)
    for r in rows:
        replay.seen.add((r["trial"], r["rollout"]))
        replay.agent_model = replay.agent_model or r["agent_model"]
    _trial_ids(job_id, rows, p.trials)
    # one INSERT ... ON CONFLICT DO UPDATE a batch (bulk_update writes a CASE per column and row)
    Attempt.objects.bulk_create(
        [
            Attempt(
                trial_id=p.trials[r["trial"]],
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
            save_trial_budgets(job_id, p.trials[r["trial"]], r["trial_budget"])
    if p.job_path is not None:
        replay.searched += _search_pieces(Path(p.job_path), rows, p.trials, replay.live)


def _search_pieces(
    job_dir: Path, rows: list[dict[str, Any]], trials: dict[str, int], live: bool
) -> int:
    """The words of the batch's attempts that ended and are not in the search index yet (an
    attempt still running in a live job is indexed when it ends)."""
    ended = {
        (trials[r["trial"]], r["rollout"]): r
        for r in rows
        if not live or r["fields"].get("state") != AttemptState.RUNNING
    }
    if not ended:
        return 0
    unsearched = Attempt.objects.filter(
        trial_id__in={trial for trial, _ in ended}, searched=False
    ).values_list("id", "trial_id", "rollout_name")
    batch = []
    for pk, trial, rollout in unsearched:
        r = ended.get((trial, rollout))
        if r is None:
            continue
        errors = (str(r["fields"].get("error") or ""), str(r["fields"].get("verifier_error") or ""))
        batch.append(search.Pieces(pk, search.read_pieces(job_dir / rollout, errors)))
    return search.add(batch)


def indexed(p: Projection, e: ev.Indexed) -> None:
    replay, job_id = p.replay, p.job_id
    assert replay is not None and job_id is not None
    # attempt folders removed since the last index (compared here: a long IN list is not)
    stale = [
        pk
        for pk, trial, name in Attempt.objects.filter(trial__job_id=job_id).values_list(
            "id", "trial__name", "rollout_name"
        )
        if (trial, name) not in replay.seen
    ]
    for i in range(0, len(stale), BATCH):
        Attempt.objects.filter(id__in=stale[i : i + BATCH]).delete()
    if not replay.settings.get("agent") and replay.agent_model:
        agent, model = replay.agent_model
        Job.objects.filter(pk=job_id).update(agent=agent, model=model)
    trials = _refresh_trials(job_id, replay.live)
    # a folder that names no plan: at least the trials it holds
    Job.objects.filter(pk=job_id, n_trials__lt=trials).update(n_trials=trials)
    if replay.live:
        refresh_job(job_id)
    else:
        finish_job_rows(
            job_id,
            replay.summary,
            folder_state(False, replay.ended),
            finished_at=index_rows.parse_time(replay.finished_at),
            duration_s=replay.duration_s,
        )
    if replay.searched:
        search.settle(replay.searched)
    p.record(e.kind, "", e.to_payload())
    p.replay = None


def _trial_ids(job_id: int, rows: list[dict[str, Any]], known: dict[str, int]) -> None:
    new = {r["trial"]: r for r in rows if r["trial"] not in known}
    if not new:
        return
    Trial.objects.bulk_create(
        [
            Trial(
                job_id=job_id,
                name=name,
                task_name=r["task"],
                trial_index=r["index"],
                position=10**6,
            )
            for name, r in new.items()
        ],
        ignore_conflicts=True,
    )
    known.update(
        Trial.objects.filter(job_id=job_id, name__in=list(new)).values_list("name", "id").iterator()
    )


def _refresh_trials(job_id: int, live: bool) -> int:
    """Every trial's row from its attempts' rows, one pass over them ordered by trial."""
    Trial.objects.filter(job_id=job_id).update(
        state="waiting" if live else "not_run",
        outcome="",
        best=None,
        n_attempts=0,
        phase="",
        error_category="",
        **dict.fromkeys(index_rows.TRIAL_COPIED),
    )
    rows = (
        Attempt.objects.filter(trial__job_id=job_id)
        .order_by("trial_id")
        .values("trial_id", *ATTEMPT_COLUMNS)
        .iterator(chunk_size=2000)
    )
    names = ["n_attempts", "phase", "state", "outcome", "best_id", "error_category"]
    names += list(index_rows.TRIAL_COPIED)
    # executemany of one UPDATE: bulk_update builds a CASE WHEN per column over the whole batch
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
