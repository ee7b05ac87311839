"""Human review from the browser's side: notes and tags on a trial or a step, an operator's
verdict, the job page filtered by tag and verdict, and the reviews exported with the job."""

from __future__ import annotations

import json

import pytest

from runs.models import ReviewNote, TrialVerdict
from runs.operations import roles
from runs.results.load import load_job
from runs.results.render import render_results
from tests.jobfolders import key


@pytest.fixture
def operator(db, django_user_model):
    roles.add_user("olga", roles.OPERATOR, "pw-operator-olga-1")
    return django_user_model.objects.get(username="olga")


@pytest.fixture
def viewer_user(db, django_user_model):
    roles.add_user("vic", roles.VIEWER, "pw-viewer-vic-123")
    return django_user_model.objects.get(username="vic")


def test_a_note_with_tags_on_a_step_is_kept_with_its_author_and_shown(
    client, job, viewer_user, django_capture_on_commit_callbacks
):
    # given a viewer logged in
    client.force_login(viewer_user)
    # when they note step e42 of the trial's attempt
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            f"/jobs/{key(job)}/hello/note/",
            {
                "text": "passes by <luck>",
                "tags": "Flaky, slow",
                "step": "e42",
                "attempt": "hello__00000001",
            },
        )
    # then
    assert response.status_code == 302
    note = ReviewNote.objects.get()
    assert (note.tags.split(), note.step, note.author_name) == (["flaky", "slow"], 42, "vic")
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    assert "passes by &lt;luck&gt;" in page and 'href="#e42"' in page and "— vic" in page
    # and the job folder's reviews.json has it, as bench results --json does
    saved = json.loads((job / "reviews.json").read_text())
    assert saved["trials"]["hello"]["notes"][0]["tags"] == ["flaky", "slow"]
    doc = json.loads(render_results(load_job(job), fmt="json"))
    assert doc["reviews"]["hello"]["notes"][0]["step"] == 42


def test_a_bad_tag_is_refused_with_its_fix(client, job, viewer_user):
    client.force_login(viewer_user)
    response = client.post(
        f"/jobs/{key(job)}/hello/note/", {"text": "x", "tags": "no/slash"}, follow=True
    )
    assert "is not a tag; fix:" in response.content.decode()
    assert not ReviewNote.objects.exists()


def test_only_an_operator_sets_a_verdict_and_the_latest_counts(client, job, operator, viewer_user):
    client.force_login(viewer_user)
    assert (
        client.post(f"/jobs/{key(job)}/hello/verdict/", {"verdict": "approved"}).status_code == 403
    )
    client.force_login(operator)
    client.post(f"/jobs/{key(job)}/hello/verdict/", {"verdict": "needs_look"})
    client.post(f"/jobs/{key(job)}/hello/verdict/", {"verdict": "rejected"})
    assert list(TrialVerdict.objects.values_list("verdict", "author_name")) == [
        ("needs_look", "olga"),
        ("rejected", "olga"),
    ]
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    assert 'class="verdict rejected"' in page and "2 verdicts" in page


def test_the_job_page_filters_trials_by_tag_and_verdict(client, job, operator):
    client.force_login(operator)
    client.post(f"/jobs/{key(job)}/hello/note/", {"tags": "flaky"})
    client.post(f"/jobs/{key(job)}/broken/note/", {"tags": "flaky-not"})
    client.post(f"/jobs/{key(job)}/broken/verdict/", {"verdict": "approved"})
    tagged = client.get(f"/jobs/{key(job)}/?tag=flaky").content.decode()
    assert ">hello</a>" in tagged and ">broken</a>" not in tagged
    approved = client.get(f"/jobs/{key(job)}/trials/?verdict=approved").content.decode()
    assert ">broken</a>" in approved and ">hello</a>" not in approved
    none_yet = client.get(f"/jobs/{key(job)}/trials/?verdict=none").content.decode()
    assert ">hello</a>" in none_yet and ">broken</a>" not in none_yet
    reviews = client.get(f"/jobs/{key(job)}/reviews.json").json()
    assert reviews["trials"]["broken"]["verdict"] == "approved"


def test_notes_and_verdicts_are_in_the_admin(client, job, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "", "pw-root-root-123")
    client.force_login(admin)
    client.post(f"/jobs/{key(job)}/hello/note/", {"text": "look again", "tags": "flaky"})
    page = client.get("/admin/runs/reviewnote/").content.decode()
    assert "look again" in page
    assert client.get("/admin/runs/trialverdict/").status_code == 200
