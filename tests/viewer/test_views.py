"""`bench view` pages over a job folder: the job's trials and one trial's files."""

import json

import pytest


@pytest.fixture
def job(tmp_path, settings):
    job = tmp_path / "2026-11-29__12-00-00"
    for name, reward in (("hello", 1.0), ("broken", None)):
        folder = job / f"{name}__0000000{1 if reward else 2}"
        (folder / "verifier").mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        (folder / "verifier" / "test-stdout.txt").write_text(f"<script>{name}</script>")
        (folder / "result.json").write_text(
            json.dumps(
                {
                    "task_name": name,
                    "trial_name": name,
                    "rollout_name": folder.name,
                    "rewards": {"reward": reward} if reward is not None else None,
                    "verifier_error": None if reward is not None else "No reward file found",
                    "agent": "oracle",
                }
            )
        )
    (job / "evaluation.json").write_text(
        json.dumps({"agent": "oracle", "plan": ["hello", "broken"]})
    )
    settings.BENCHFLOW_VIEW_ROOT = str(tmp_path)
    return job


def test_jobs_folder_with_one_job_shows_its_trials(client, job):
    page = client.get("/").content.decode()
    assert "hello" in page and "broken" in page and "passed" in page and "verifier_errored" in page


def test_trial_page_shows_result_and_logs_as_text(client, job):
    page = client.get(f"/jobs/{job.name}/hello__00000001/").content.decode()
    assert "reward <b>1.0</b>" in page
    assert "&lt;script&gt;hello&lt;/script&gt;" in page  # untrusted output is escaped, never run


def test_unknown_job_or_attempt_is_404(client, job):
    assert client.get("/jobs/nope/").status_code == 404
    assert client.get(f"/jobs/{job.name}/..%2F..%2Fetc/").status_code == 404
