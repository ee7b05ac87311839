"""A separate verifier (Harbor 1.3's `[verifier] environment_mode = "separate"`), for real: the
held-out task tests/tasksets/separate-verifier with the oracle, a nop agent, a verifier image
that does not build, and `bench regrade` from the saved artifacts."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from runs.regrade.regrade import regrade_job
from tests.conftest import REPO, job_dirs, only_result, run_args, run_bench

pytestmark = pytest.mark.docker

TASK = REPO / "tests" / "tasksets" / "separate-verifier"


def run_on_task(tmp_path: Path, bench_env: dict, agent: str, *flags: str):
    tasks = tmp_path / "tasks"
    if not tasks.exists():
        shutil.copytree(TASK, tasks / TASK.name)
    proc = run_bench(run_args(agent, *flags), env=bench_env, cwd=tmp_path)
    job = job_dirs(tmp_path / "jobs")[-1]
    return proc, job, only_result(job)


def container_events(client, job: Path, since: datetime) -> list[tuple[str, str]]:
    """(action, attempt label) of the job's containers' start and die events, in order."""
    found = client.events(
        since=since,
        until=datetime.now() + timedelta(seconds=2),  # whole seconds: the last one included
        decode=True,
        filters={"type": "container", "label": f"benchflow.job_dir={job.resolve()}"},
    )
    return [
        (e["Action"], e["Actor"]["Attributes"]["benchflow.attempt"])
        for e in found
        if e["Action"] in ("start", "die")
    ]


def test_the_oracle_passes_in_the_verifiers_own_container_and_regrade_uses_the_artifacts(
    docker_client, bench_env, tmp_path
):
    since = datetime.now()
    # when the oracle runs the task
    proc, job, result = run_on_task(tmp_path, bench_env, "oracle")
    # then every check of its tests held in the verifier's own container, the mode recorded
    assert result["rewards"] == {"reward": 1.0}, proc.stdout + proc.stderr
    assert result["verifier_environment_mode"] == "separate"
    attempt = job / result["rollout_name"]
    said = (attempt / "verifier" / "test-stdout.txt").read_text()
    assert "FAILED" not in said and said.count("ok: ") == 7, said
    # the collect hook ran in the agent's sandbox before the artifacts were copied out
    assert (attempt / "artifacts" / "state.txt").read_text() == "snapshot\n"
    assert "(exit 0)" in (attempt / "agent" / "collect.txt").read_text()
    # and the agent's sandbox was stopped before the verifier's container started
    events = container_events(docker_client, job, since)
    name = result["rollout_name"]
    assert events.index(("die", name)) < events.index(("start", f"{name}-verifier")), events
    assert (
        docker_client.containers.list(
            all=True, filters={"label": f"benchflow.job_dir={job.resolve()}"}
        )
        == []
    )

    # when the job is regraded (no --save-outputs: the artifacts are the verifier's inputs)
    report = regrade_job(job, client=docker_client, emit=lambda _: None)
    [row] = report.rows
    assert (row.status, row.new_reward) == ("complete", 1.0), row
    # and again once the tests expect another answer: the current verifier, rebuilt, says 0
    test_sh = tmp_path / "tasks" / TASK.name / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace("grep -qx 42", "grep -qx 43"))
    [row] = regrade_job(job, client=docker_client, emit=lambda _: None).rows
    assert (row.status, row.original_reward, row.new_reward) == ("complete", 1.0, 0.0), row
    assert json.loads((attempt / "result.json").read_text())["rewards"] == {"reward": 1.0}


def test_an_agent_that_does_nothing_scores_0_with_no_verifier_error(
    docker_client, bench_env, tmp_path
):
    proc, _job, result = run_on_task(tmp_path, bench_env, "nop")
    assert result["rewards"] == {"reward": 0.0}, proc.stdout + proc.stderr
    assert result["verifier_error"] is None and result["error"] is None
    assert result["verifier_environment_mode"] == "separate"


def test_a_verifier_image_that_does_not_build_is_a_verifier_error_and_no_agent_runs(
    docker_client, bench_env, tmp_path
):
    # given the task with a misspelt instruction in tests/Dockerfile
    tasks = tmp_path / "tasks"
    shutil.copytree(TASK, tasks / TASK.name)
    dockerfile = tasks / TASK.name / "tests" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("RUN echo", "RUNN echo"))
    proc, job, result = run_on_task(tmp_path, bench_env, "oracle")
    # then the trial is the verifier's error, named, the agent's record clean: it never ran
    assert result["verifier_error_category"] == "verifier_image_build", result
    assert result["verifier_error"].startswith(
        "image build failed for the verifier of task separate-verifier ("
    )
    assert "tests/Dockerfile, line 2)" in result["verifier_error"]
    assert result["error"] is None and result["rewards"] is None
    assert result["agent_exit_code"] is None
    assert (job / "builds" / "separate-verifier.verifier.log").is_file()
    listing = run_bench(["results", str(job)], env=bench_env, cwd=tmp_path).stdout
    assert "the separate verifier's image did not build (setup problem)" in listing
    assert len(list(job.glob("separate-verifier__*"))) == 1  # not retried
    assert proc.returncode == 1
