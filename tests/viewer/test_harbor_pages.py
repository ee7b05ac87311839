"""`bench view` of Harbor 0.26's job folders (tests/harborjobs/): the job page, its own files and
log, a trial page, and the compare page pairing a Harbor job with another and with ours."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runs.index.folder import index_path
from runs.models import Job
from tests.jobfolders import result_doc, write_attempt, write_job

HARBOR = Path(__file__).resolve().parents[1] / "harborjobs"
ORACLE, NOP = "2026-12-04__20-26-30", "2026-12-04__20-27-02"


def key(name: str) -> str:
    """The job's key in the dashboard's URLs."""
    return Job.objects.get(name=name).key


@pytest.fixture
def harbor(view_root, db):
    for name in (ORACLE, NOP):
        shutil.copytree(HARBOR / name, view_root / name)
        index_path(view_root / name)
    return view_root


def test_a_harbor_job_page_shows_it_finished_with_its_agent_and_progress(client, harbor):
    page = client.get(f"/jobs/{key(NOP)}/").content.decode()
    assert '<b class="finished">finished</b>' in page and "<b>3 / 3</b>" in page
    assert "<td>nop</td>" in page and "<td>openai/gpt-4o</td>" in page
    assert '<b class="failed">3</b>' in page and "interrupted" not in page


def test_a_harbor_jobs_log_and_documents_are_a_link_away(client, harbor):
    page = client.get(f"/jobs/{key(ORACLE)}/").content.decode()
    for name in ("config.json", "result.json", "lock.json"):
        assert f'href="/jobs/{key(ORACLE)}/files/{name}"' in page
        body = b"".join(client.get(f"/jobs/{key(ORACLE)}/files/{name}").streaming_content)
        assert body == (harbor / ORACLE / name).read_bytes()
    assert f'href="/jobs/{key(ORACLE)}/console/" id="console-log">job.log</a>' in page
    log = client.get(f"/jobs/{key(ORACLE)}/console/")
    assert log.status_code == 200 and b"Starting step 1/2: create" in b"".join(
        log.streaming_content
    )
    assert client.get(f"/jobs/{key(ORACLE)}/files/..%2Fsecret").status_code == 404
    assert client.get(f"/jobs/{key(ORACLE)}/files/hello-world").status_code == 404


def test_a_job_run_from_a_terminal_offers_no_console_log_link(client, view_root, db):
    job = write_job(view_root, plan=["t"])
    write_attempt(job, "t__00000001", result_doc("t", "t__00000001", 1.0))
    index_path(job)
    page = client.get(f"/jobs/{key(job.name)}/").content.decode()
    assert 'id="console-log"' not in page  # the link that was a 404
    assert "a job run from a terminal printed there" in page
    assert "of a job run from the browser" not in page
    assert f'href="/jobs/{key(job.name)}/files/evaluation.json"' in page


def test_a_harbor_trial_page_shows_every_reward_its_agent_version_and_model(client, harbor):
    page = client.get(f"/jobs/{key(NOP)}/partial-credit/").content.decode()
    assert "agent nop 1.0.0 · model openai/gpt-4o" in page
    for name in ("reward", "files", "content", "perms"):
        assert f"<tr><th>{name}</th><td>0.0</td></tr>" in page
    assert "verifier_result" in page  # result.json as Harbor wrote it
    assert "agent_execution" in page and "environment_setup" in page


def test_the_compare_page_pairs_harbor_jobs_and_ours_by_task(client, harbor, view_root):
    page = client.get("/compare/", {"a": NOP, "b": ORACLE}).content.decode()
    assert "over 3 paired trials" in page and "unpaired" not in page
    assert "3 passed only in B" in page
    ours = write_job(view_root, "ours", plan=["hello-world", "multi-step", "partial-credit"])
    for task in ("hello-world", "multi-step", "partial-credit"):
        write_attempt(ours, f"{task}__0000000a", result_doc(task, f"{task}__0000000a", 1.0))
    index_path(ours)
    page = client.get("/compare/", {"a": NOP, "b": "ours"}).content.decode()
    assert "over 3 paired trials" in page and "McNemar p=0.25" in page
