"""People's review of a job's trials: notes and tags on a trial or on one step of an attempt's
event stream, and an operator's verdict per trial (approved, rejected, needs a look).

Rows are appended, never edited (as regrades are), each with its author and time. After each, the
job folder's reviews.json is written anew from the rows: the folder stays the record a copy or an
export carries (the dashboard's index can be rebuilt from folders; these rows are the one thing
it cannot infer, so they are written there too).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery

from runs.jobfolder import write_json
from runs.models import Job, ReviewNote, Trial, TrialVerdict, Verdict
from runs.problems import UserError

REVIEWS = "reviews.json"
SCHEMA = "benchflow-site.reviews/1"
TAG = re.compile(r"[a-z0-9][a-z0-9_.:-]{0,39}")
TAGS_MAX = 20
TEXT_MAX = 20_000


def parse_tags(raw: str) -> list[str]:
    """Tags as typed (`flaky, slow` or `flaky slow`): lower case, each 1-40 of a-z 0-9 _ . : -."""
    tags: list[str] = []
    for word in re.split(r"[\s,]+", raw.strip().lower()):
        if not word:
            continue
        if not TAG.fullmatch(word):
            raise UserError(
                f"tag {word[:60]!r} is not a tag; fix: 1-40 of a-z, 0-9, '_', '.', ':' or '-', "
                "starting with a letter or digit"
            )
        if word not in tags:
            tags.append(word)
    if len(tags) > TAGS_MAX:
        raise UserError(f"{len(tags)} tags on one note; fix: {TAGS_MAX} at most")
    return tags


def add_note(
    trial: Trial,
    *,
    text: str,
    tags: list[str],
    author: Any = None,
    rollout_name: str = "",
    step: int | None = None,
) -> ReviewNote:
    if not text.strip() and not tags:
        raise UserError("the note is empty; fix: write a note or give a tag")
    if len(text) > TEXT_MAX:
        raise UserError(f"the note is {len(text):,} characters; fix: {TEXT_MAX:,} at most")
    note = ReviewNote.objects.create(
        trial=trial,
        rollout_name=rollout_name[:300],
        step=step,
        text=text,
        tags=f" {' '.join(tags)} " if tags else "",
        author_id=getattr(author, "pk", None),
        author_name=str(getattr(author, "username", "") or "")[:150],
    )
    transaction.on_commit(lambda: write_reviews(trial.job))
    return note


def set_verdict(trial: Trial, verdict: str, *, author: Any = None, note: str = "") -> TrialVerdict:
    if verdict not in Verdict.values:
        raise UserError(f"{verdict!r} is not a verdict; fix: one of {', '.join(Verdict.values)}")
    row = TrialVerdict.objects.create(
        trial=trial,
        verdict=verdict,
        note=note[:TEXT_MAX],
        author_id=getattr(author, "pk", None),
        author_name=str(getattr(author, "username", "") or "")[:150],
    )
    transaction.on_commit(lambda: write_reviews(trial.job))
    return row


def latest_verdict() -> Subquery:
    """Each trial's latest verdict, for annotating a query of trials."""
    rows = TrialVerdict.objects.filter(trial=OuterRef("pk")).order_by("-created_at", "-id")
    return Subquery(rows.values("verdict")[:1])


def filter_trials(rows: QuerySet[Trial], tag: str = "", verdict: str = "") -> QuerySet[Trial]:
    """The trials with a note tagged `tag`, and whose latest verdict is `verdict` (`none`: no
    verdict yet)."""
    if tag:
        rows = rows.filter(notes__tags__contains=f" {tag.strip().lower()} ").distinct()
    if verdict:
        rows = rows.annotate(latest_verdict=latest_verdict())
        if verdict == "none":
            rows = rows.filter(latest_verdict__isnull=True)
        else:
            rows = rows.filter(latest_verdict=verdict)
    return rows


def note_record(n: ReviewNote) -> dict[str, Any]:
    return {
        "text": n.text,
        "tags": n.tags.split(),
        "rollout_name": n.rollout_name or None,
        "step": n.step,
        "author": n.author_name or None,
        "created_at": n.created_at.isoformat(),
    }


def verdict_record(v: TrialVerdict) -> dict[str, Any]:
    return {
        "verdict": v.verdict,
        "note": v.note or None,
        "author": v.author_name or None,
        "created_at": v.created_at.isoformat(),
    }


def job_reviews(job: Job) -> dict[str, Any]:
    """Every note and verdict of the job, by trial: reviews.json's document."""
    trials: dict[str, dict[str, Any]] = {}

    def entry(name: str) -> dict[str, Any]:
        return trials.setdefault(name, {"verdict": None, "verdicts": [], "notes": []})

    for v in TrialVerdict.objects.filter(trial__job=job).select_related("trial"):
        e = entry(v.trial.name)
        e["verdicts"].append(verdict_record(v))
        e["verdict"] = v.verdict  # ordered oldest first: the last is the latest
    for n in ReviewNote.objects.filter(trial__job=job).select_related("trial"):
        entry(n.trial.name)["notes"].append(note_record(n))
    return {"schema": SCHEMA, "job": job.name, "trials": dict(sorted(trials.items()))}


def write_reviews(job: Job) -> None:
    folder = Path(job.path)
    if folder.is_dir() and not folder.is_symlink():
        write_json(folder / REVIEWS, job_reviews(job))


def trial_reviews(trial: Trial) -> tuple[list[ReviewNote], list[TrialVerdict]]:
    return list(trial.notes.all()), list(trial.verdicts.all())
