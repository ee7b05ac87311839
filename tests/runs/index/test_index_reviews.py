"""`bench index` reads a job's reviews.json (people's notes, tags and verdicts) back into rows a
trial lacks, so a rebuilt index or a copied folder keeps its review."""

from __future__ import annotations

import json

import pytest

from runs.index import search
from runs.index.folder import index_path
from runs.models import ReviewNote, Trial, TrialVerdict
from tests.jobfolders import result_doc, write_attempt, write_job

pytestmark = pytest.mark.django_db

REVIEWS = {
    "schema": "benchflow-site.reviews/1",
    "job": "j",
    "trials": {
        "a": {
            "verdict": "rejected",
            "verdicts": [
                {
                    "verdict": "approved",
                    "note": None,
                    "author": "ann",
                    "created_at": "2026-11-29T12:00:00+00:00",
                },
                {
                    "verdict": "rejected",
                    "note": "cheated",
                    "author": "bob",
                    "created_at": "2026-11-29T13:00:00+00:00",
                },
            ],
            "notes": [
                {
                    "text": "reads the answer key",
                    "tags": ["cheat", "flaky"],
                    "rollout_name": "a__00000001",
                    "step": 7,
                    "author": "bob",
                    "created_at": "2026-11-29T12:30:00+00:00",
                }
            ],
        },
        "gone": {"verdict": None, "verdicts": [], "notes": [{"text": "no such trial"}]},
    },
}


@pytest.fixture
def job(tmp_path):
    job = write_job(tmp_path, plan=["a", "b"])
    write_attempt(job, "a__00000001", result_doc("a", "a__00000001", 1.0))
    write_attempt(job, "b__00000002", result_doc("b", "b__00000002", 0.0))
    (job / "reviews.json").write_text(json.dumps(REVIEWS))
    return job


def test_bench_index_reads_notes_and_verdicts_back_once_and_search_finds_the_notes(job):
    # when a job folder with a reviews.json is indexed (twice)
    lines: list[str] = []
    index_path(job, lines.append)
    index_path(job)
    # then its notes and verdicts are rows, with their authors and times, made once
    trial = Trial.objects.get(name="a")
    assert [(v.verdict, v.author_name, v.note) for v in TrialVerdict.objects.all()] == [
        ("approved", "ann", ""),
        ("rejected", "bob", "cheated"),
    ]
    [note] = ReviewNote.objects.all()
    assert (note.trial, note.text, note.tags.split(), note.step) == (
        trial,
        "reads the answer key",
        ["cheat", "flaky"],
        7,
    )
    assert (note.rollout_name, note.created_at.isoformat()) == (
        "a__00000001",
        "2026-11-29T12:30:00+00:00",
    )
    assert "3 notes and verdicts from reviews.json" in lines[0]
    # and the note's words are found by search
    hits, count = search.search("answer key", None, 10)
    assert count == 1 and hits[0].trial_id == trial.pk and hits[0].piece == -note.pk


def test_a_trial_with_rows_keeps_them_and_a_bad_file_is_named(job):
    index_path(job)
    TrialVerdict.objects.filter(verdict="approved").delete()
    index_path(job)  # the trial still has a verdict: nothing is read back
    assert TrialVerdict.objects.count() == 1
    (job / "reviews.json").write_text("[1, 2]")
    lines: list[str] = []
    index_path(job, lines.append)
    assert lines[-1].endswith(
        'reviews.json: not a reviews document (an object with "trials"); left as it is'
    )
