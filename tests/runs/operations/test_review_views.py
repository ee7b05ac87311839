"""A rubric review started from the job page: an operator's, of the ticked trials or every one,
checked in the request and handed to the launcher; a viewer cannot."""

from __future__ import annotations

import json

from django.test import Client

from tests.jobfolders import key
from tests.runs.operations.conftest import STARTED

RUBRIC = {"criteria": [{"name": "ok", "description": "d", "guidance": "is it ok?"}]}


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_operator_reviews_the_ticked_trials_with_a_reviewer_agent(roots, done_job, users):
    page = (
        _client(users["operator"])
        .post(
            f"/jobs/{key(done_job)}/review/",
            {
                "trials": "hello-world",
                "review_agent": "claude",
                "review_model": "mock/oracle",
                "rubric": json.dumps(RUBRIC),
            },
            follow=True,
        )
        .content.decode()
    )
    assert "Reviewing hello-world of" in page
    [request] = STARTED
    assert (request.kind, request.job_dir) == ("review", str(done_job))
    assert request.body == {
        "trials": ["hello-world"],
        "agent": "claude",
        "model": "mock/oracle",
        "rubric": RUBRIC,
    }
    assert 'id="review-picked"' in page


def test_a_bad_rubric_is_named_and_nothing_starts(roots, done_job, users):
    bad = {"criteria": [{"name": "1st", "description": "d", "guidance": "g"}]}
    page = (
        _client(users["operator"])
        .post(
            f"/jobs/{key(done_job)}/review/",
            {"review_agent": "claude", "rubric": json.dumps(bad)},
            follow=True,
        )
        .content.decode()
    )
    assert "not a Python identifier" in page and STARTED == []
    page = (
        _client(users["operator"])
        .post(
            f"/jobs/{key(done_job)}/review/", {"review_agent": "claude", "rubric": "{"}, follow=True
        )
        .content.decode()
    )
    assert "the rubric is not JSON" in page and STARTED == []


def test_a_viewer_cannot_start_a_review(roots, done_job, users):
    response = _client(users["viewer"]).post(
        f"/jobs/{key(done_job)}/review/", {"review_agent": "claude"}
    )
    assert response.status_code == 403 and STARTED == []
