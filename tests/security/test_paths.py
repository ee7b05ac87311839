"""Hole 11 of issue 28 (the web and host part): a job name that is a symlink is refused, a file with
another hard link is neither listed nor served, and `/static/..` and a regrade back to a trial whose
name holds a `/` answer as any bad request does (404, a redirect), never 500."""

from __future__ import annotations

import http.client
import os

import httpx
import pytest

from tests.conftest import EXAMPLES, run_args, run_bench
from tests.e2e.browser import Viewer
from tests.jobfolders import result_doc, write_attempt, write_job, write_summary
from tests.runs.operations.conftest import done_job, roots, users  # noqa: F401 - fixtures
from tests.security.site import bench_env


@pytest.fixture
def viewed(tmp_path, bench_database):
    """`bench view` of a job whose attempt holds a hard link to a file outside it."""
    secret = tmp_path / "outside.txt"
    secret.write_text("not the attempt's")
    job = write_job(tmp_path / "jobs", agent="oracle", model=None, plan=["hello"])
    folder = write_attempt(job, "hello__00000001", result_doc("hello", "hello__00000001", 1.0))
    (folder / "agent" / "own.txt").write_text("the attempt's own")
    os.link(secret, folder / "agent" / "linked.txt")
    write_summary(job, passed=1)
    viewer = Viewer(tmp_path, bench_env(tmp_path, bench_database), [str(tmp_path / "jobs")])
    yield viewer, job
    viewer.stop()


def test_a_hard_linked_file_is_neither_listed_nor_served(viewed):
    viewer, job = viewed
    base = f"{viewer.base}/jobs/{job.name}/hello"
    page = httpx.get(f"{base}/", follow_redirects=True).text
    assert "own.txt" in page and "linked.txt" not in page and "not the attempt" not in page
    own = httpx.get(f"{base}/hello__00000001/files/agent/own.txt", follow_redirects=True)
    assert own.status_code == 200
    linked = httpx.get(f"{base}/hello__00000001/files/agent/linked.txt", follow_redirects=True)
    assert linked.status_code == 404


def test_a_static_path_leaving_the_static_folder_is_a_404(viewed):
    viewer, _job = viewed
    for path in ("/static/..", "/static/../manage.py", "/static/vendor/../../README.md"):
        # http.client sends the path as it is (httpx would normalise the dots away)
        connection = http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=30)
        connection.request("GET", path)
        assert connection.getresponse().status == 404, path
        connection.close()


def test_a_job_name_that_is_a_symlink_is_refused(tmp_path, bench_database):
    # given a jobs folder where the job's name links elsewhere
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "mine").symlink_to(outside, target_is_directory=True)
    # when a run names it
    done = run_bench(
        run_args("oracle", "--job", "mine", tasks=EXAMPLES, include=["hello-world"]),
        env=bench_env(tmp_path, bench_database),
        cwd=tmp_path,
    )
    # then it is refused before anything is written there
    assert done.returncode != 0 and "symbolic link" in done.stderr, done.stderr
    assert list(outside.iterdir()) == []


@pytest.mark.django_db
def test_a_regrade_back_to_a_trial_named_with_a_slash_goes_to_the_job_page(done_job, users):  # noqa: F811
    from django.test import Client

    client = Client()
    client.force_login(users["operator"])
    from runs.models import Job

    key = Job.objects.get(name=done_job.name).key
    client.get(f"/jobs/{key}/")
    answer = client.post(
        f"/jobs/{key}/regrade/",
        {"trials": "a/b", "next": "trial", "reason": "x", "picked": "1"},
    )
    assert answer.status_code == 302 and answer["Location"] == f"/jobs/{key}/"
