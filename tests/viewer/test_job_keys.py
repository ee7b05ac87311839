"""Every job is reachable: jobs folders each have their own 2026-12-02__12-00-00, so a URL names a
job by its key (name~id); a URL by name alone, from before keys, is redirected."""

from __future__ import annotations

import pytest

from runs.index.folder import index_path
from runs.models import Job
from tests.jobfolders import key, result_doc, write_attempt, write_job

NAME = "2026-11-29__12-00-00"


@pytest.fixture
def twins(tmp_path, settings, db):
    """Two jobs of the same name in two jobs folders, both in view: the older passed, the newer
    failed."""
    settings.BENCHFLOW_VIEW_ROOT = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    found = []
    for folder, reward in (("a", 1.0), ("b", 0.0)):
        job = write_job(tmp_path / folder, NAME, plan=["hello"])
        write_attempt(job, "hello__00000001", result_doc("hello", "hello__00000001", reward))
        index_path(job)
        found.append(job)
    return found


def test_two_jobs_of_one_name_are_each_reachable_by_their_key(client, twins):
    older, newer = twins
    assert Job.objects.filter(name=NAME).count() == 2
    for job, outcome in ((older, "passed"), (newer, "failed")):
        page = client.get(f"/jobs/{key(job)}/")
        assert page.status_code == 200 and str(job.resolve()) in page.content.decode()
        trial = client.get(f"/jobs/{key(job)}/hello/").content.decode()
        assert outcome in trial
    # and the jobs list links each by its key
    listing = client.get("/jobs/table/").content.decode()
    assert f'href="/jobs/{key(older)}/"' in listing and f'href="/jobs/{key(newer)}/"' in listing


def test_a_url_by_name_alone_is_redirected_to_the_newest_job_of_that_name(client, twins):
    _, newer = twins
    # a page, a trial with a query, and a form posted to the old URL
    moved = client.get(f"/jobs/{NAME}/")
    assert moved.status_code == 302 and moved["Location"] == f"/jobs/{key(newer)}/"
    trial = client.get(f"/jobs/{NAME}/hello/?x=1")
    assert trial["Location"] == f"/jobs/{key(newer)}/hello/?x=1"
    posted = client.post(f"/jobs/{NAME}/resume/")
    assert posted.status_code == 307 and posted["Location"] == f"/jobs/{key(newer)}/resume/"
    # a name no job has, and a key with a path no page has, are not found
    assert client.get("/jobs/nope/").status_code == 404
    assert client.get(f"/jobs/{key(newer)}/hello/x/y/z/").status_code == 404


def test_a_job_whose_name_looks_like_a_key_is_reachable_by_name_and_by_key(
    client, tmp_path, settings, db
):
    settings.BENCHFLOW_VIEW_ROOT = str(tmp_path)
    job = write_job(tmp_path, "nightly~1", plan=["hello"])
    index_path(job)

    assert client.get(f"/jobs/{key(job)}/").status_code == 200
    assert client.get("/jobs/nightly~1/").status_code == 200


def test_the_compare_page_tells_two_jobs_of_one_name_apart(client, twins):
    older, newer = twins
    page = client.get(f"/compare/?a={key(older)}&b={key(newer)}").content.decode()
    assert f'value="{key(older)}" selected' in page and f'value="{key(newer)}" selected' in page
    assert "passed only in A" in page and "1 passed only in A" in page
