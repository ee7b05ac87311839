"""`bench export JOB --format harbor OUT`, checked with Harbor's own code (Harbor 0.26 in
.venv-harbor, made by scripts/setup.sh): its models parse every document, its viewer's folder
source lists the trials with their rewards, and `harbor job resume` accepts the copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from runs.export import export_harbor
from runs.problems import UserError
from runs.results.attempt_folder import read_attempt
from tests.conftest import EXAMPLES, REPO, run_bench
from tests.jobfolders import result_doc, write_attempt, write_job, write_summary

HARBOR_VENV = REPO / ".venv-harbor"
TASKS = ("hello-world", "partial-credit", "count-words")
# Harbor's code run on a folder of exported jobs: what its models parse and what its viewer lists
CHECK = """
import asyncio, json, sys
from pathlib import Path
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.result import TrialResult
from harbor.models.job.lock import TrialLock
from harbor.viewer.sources.folder import FolderSource

async def main(root):
    parsed = {}
    for job in sorted(p for p in root.iterdir() if p.is_dir()):
        JobConfig.model_validate_json((job / "config.json").read_text())
        result = JobResult.model_validate_json((job / "result.json").read_text())
        trials = {}
        for folder in sorted(p for p in job.iterdir() if p.is_dir()):
            TrialConfig.model_validate_json((folder / "config.json").read_text())
            TrialLock.model_validate_json((folder / "lock.json").read_text())
            trial = TrialResult.model_validate_json((folder / "result.json").read_text())
            info = trial.exception_info
            trials[trial.task_name] = {
                "rewards": trial.verifier_result.rewards if trial.verifier_result else None,
                "reward_valid": trial.reward_valid,
                "exception": info.exception_type if info else None,
                "agent": trial.agent_info.name,
                "model": trial.agent_info.model_info.name if trial.agent_info.model_info else None,
            }
        parsed[job.name] = {"n_total_trials": result.n_total_trials, "trials": trials}
    source = FolderSource(root)
    listed = {}
    for job in (await source.read("jobs", {}))["items"]:
        rollouts = (await source.read("rollouts", {"job_ids": [job["id"]]}))["items"]
        listed[job["name"]] = {
            "state": job["state"],
            "rewards": {r.task.name: r.rewards for r in rollouts},
        }
    await source.close()
    print(json.dumps({"parsed": parsed, "listed": listed}))

asyncio.run(main(Path(sys.argv[1])))
"""


@pytest.fixture(scope="module")
def harbor_env() -> dict[str, str]:
    """Harbor's venv, and an environment that keeps it off the network (no telemetry, LiteLLM's
    bundled price map, any HTTP client pointed at a closed loopback port)."""
    if not (HARBOR_VENV / "bin" / "harbor").is_file():
        why = f"{HARBOR_VENV} is missing: scripts/setup.sh makes it (Harbor needs Python 3.12)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    dead = "http://127.0.0.1:9"
    env.update(
        HARBOR_TELEMETRY="off",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        HTTP_PROXY=dead,
        HTTPS_PROXY=dead,
        ALL_PROXY=dead,
        NO_PROXY="",
    )
    return env


def _job(root: Path, tasks: Path) -> Path:
    """A finished job of ours: hello-world passed though its agent ran out of time (the verifier
    graded what it left), partial-credit scored 0.667 on four keys though the provider
    rate-limited its agent (after a retried attempt),
    count-words' agent failed to install (no reward)."""
    job = write_job(root, "2026-12-05__10-00-00", plan=list(TASKS), concurrency=2)
    docs = {
        "hello-world__00000001": result_doc(
            "hello-world",
            "hello-world__00000001",
            1.0,
            error="agent timed out after 120s",
            error_category="timeout",
        ),
        "partial-credit__00000002": result_doc(
            "partial-credit",
            "partial-credit__00000002",
            None,
            error="Agent install failed (exit 1): npm ERR! network",
            finished_at="2026-11-29T12:00:10.000",
        ),
        "partial-credit__00000003": result_doc(
            "partial-credit",
            "partial-credit__00000003",
            0.667,
            attempt=2,
            rewards={"reward": 0.667, "files": 1.0, "content": 1.0, "perms": 0.0},
            error="provider rate limited (HTTP 429)",
            error_category="provider_rate_limit",
        ),
        "count-words__00000004": result_doc(
            "count-words",
            "count-words__00000004",
            None,
            error="Agent install failed (exit 1): npm ERR! network",
            error_category="install_failure",
        ),
    }
    for folder, doc in docs.items():
        path = write_attempt(job, folder, doc)
        task = doc["task_name"]
        config = {"task_name": task, "trial_name": task, "task_path": str(tasks / task)}
        (path / "config.json").write_text(json.dumps(config))
        (path / "verifier" / "test-stdout.txt").write_text(f"{task} verified\n")
    write_summary(job, passed=1)
    return job


@pytest.fixture
def exported(tmp_path):
    tasks = tmp_path / "tasks"
    for task in TASKS:
        shutil.copytree(EXAMPLES / task, tasks / task)
    job = _job(tmp_path / "ours", tasks)
    report = export_harbor(job, tmp_path / "harbor" / job.name)
    return job, report


def _harbor(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HARBOR_VENV / "bin" / args[0]), *args[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_harbor_parses_and_lists_our_export_with_its_rewards(exported, harbor_env, tmp_path):
    job, report = exported
    # when Harbor's own models and its viewer's folder source read the copy
    out = _harbor(harbor_env, "python", "-c", CHECK, str(report.out.parent), cwd=tmp_path)
    # then
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    trials = seen["parsed"][job.name]["trials"]
    assert seen["parsed"][job.name]["n_total_trials"] == 3
    # Harbor's own policy keeps a reward beside an agent timeout, as ours does
    assert trials["hello-world"] == {
        "rewards": {"reward": 1.0},
        "reward_valid": True,
        "exception": "AgentTimeoutError",
        "agent": "opencode",
        "model": "oracle",
    }
    partial = trials["partial-credit"]
    assert partial["rewards"] == {"reward": 0.667, "files": 1.0, "content": 1.0, "perms": 0.0}
    # the best attempt, not the first; a class whose Harbor types would void the reward goes by
    # our name, which Harbor's policy leaves the reward to
    assert partial["reward_valid"] and partial["exception"] == "provider_rate_limit"
    assert trials["count-words"]["rewards"] is None and trials["count-words"]["exception"]
    listed = seen["listed"][job.name]
    assert listed["state"] == "finished"
    assert listed["rewards"] == {
        "hello-world": {"reward": 1.0},
        "partial-credit": {"reward": 0.667, "files": 1.0, "content": 1.0, "perms": 0.0},
        "count-words": None,
    }


def test_harbor_job_resume_accepts_the_export_and_reruns_nothing(exported, harbor_env, tmp_path):
    job, report = exported
    before = sorted(p.name for p in report.out.iterdir() if p.is_dir())
    # when
    out = _harbor(harbor_env, "harbor", "job", "resume", "-p", str(report.out), "-y", cwd=tmp_path)
    # then Harbor planned the same three trials from config.json and found them all done
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert sorted(p.name for p in report.out.iterdir() if p.is_dir()) == before
    result = json.loads((report.out / "result.json").read_text())
    assert result["stats"]["n_completed_trials"] == 3 and result["finished_at"]


def test_the_export_reads_back_as_the_job_it_came_from(exported):
    job, report = exported
    record = read_attempt(str(report.out / "partial-credit__00000003"))
    assert record.source == "harbor" and record.result is not None
    assert record.result.rewards == {"reward": 0.667, "files": 1.0, "content": 1.0, "perms": 0.0}
    errored = read_attempt(str(report.out / "count-words__00000004")).result
    assert errored is not None and errored.error_category == "install_failure"
    assert not (report.out / "partial-credit__00000002").exists()  # one folder per trial, as Harbor
    assert (report.out / "hello-world__00000001" / "verifier" / "test-stdout.txt").is_file()


def test_an_interrupted_trial_is_left_out_and_named(tmp_path):
    job = write_job(tmp_path, plan=["a", "b"])
    write_attempt(job, "a__00000001", result_doc("a", "a__00000001", 1.0))
    write_attempt(job, "b__00000002", None)
    report = export_harbor(job, tmp_path / "out")
    assert report.trials == 1 and report.left_out == ["b (interrupted: no result)"]


def test_bench_export_states_what_it_writes_and_refuses_to_merge(tmp_path, bench_env):
    job = write_job(tmp_path, plan=["a"])
    write_attempt(job, "a__00000001", result_doc("a", "a__00000001", 1.0))
    (tmp_path / "out").mkdir()
    helped = run_bench(["export", "--help"], env=bench_env, cwd=tmp_path)
    assert "config.json" in helped.stdout and "harbor job resume" in helped.stdout
    out = run_bench(["export", str(job), "--format", "harbor", "out"], env=bench_env, cwd=tmp_path)
    assert out.returncode == 2 and "out already exists" in out.stderr
    with pytest.raises(UserError, match="is not a job folder"):
        export_harbor(tmp_path / "out", tmp_path / "elsewhere")


def test_the_export_carries_the_jobs_reviews(tmp_path):
    # given a job whose trials people reviewed (reviews.json, keyed by trial name)
    job = write_job(tmp_path, plan=["a"])
    write_attempt(job, "a__00000001", result_doc("a", "a__00000001", 1.0))
    reviews = {"schema": "benchflow-site.reviews/1", "trials": {"a": {"notes": [{"text": "ok"}]}}}
    (job / "reviews.json").write_text(json.dumps(reviews))
    # when
    report = export_harbor(job, tmp_path / "out")
    # then the copy has them, for `bench index` of the copy to read back
    assert json.loads((report.out / "reviews.json").read_text()) == reviews
