"""Harbor 0.26's job folders (tests/harborjobs/, as Harbor wrote them) read as Harbor graded them:
`bench results`, `--compare`, `bench index`."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runs.index.folder import index_path, job_folders
from runs.models import Attempt, Job, JobState, Trial
from runs.results.attempt_folder import job_attempts, read_attempt
from runs.results.load import load_job
from tests.conftest import run_bench
from tests.jobfolders import result_doc, write_attempt, write_job

HARBOR = Path(__file__).resolve().parents[2] / "harborjobs"
ORACLE = HARBOR / "2026-12-04__20-26-30"  # oracle: 3/3, partial-credit's four keys, multi-step
NOP = HARBOR / "2026-12-04__20-27-02"  # nop with openai/gpt-4o: 3 rewards of 0
NO_REWARD = HARBOR / "2026-12-04__20-27-32"  # RewardFileNotFoundError


@pytest.fixture
def harbor_jobs(tmp_path):
    """A copy (indexing and Harbor's own tools must not touch the kept data)."""
    root = tmp_path / "jobs"
    shutil.copytree(HARBOR, root, ignore=shutil.ignore_patterns("README.md"))
    return root


def test_a_harbor_trial_reads_with_every_reward_key_its_agent_model_and_phase_times():
    record = read_attempt(str(next(NOP.glob("partial-credit__*"))))
    result = record.result
    assert record.kind == "ok" and record.source == "harbor" and result is not None
    assert result.rewards == {"reward": 0.0, "files": 0.0, "content": 0.0, "perms": 0.0}
    assert (result.agent, result.agent_version, result.model) == ("nop", "1.0.0", "openai/gpt-4o")
    assert result.error is None and result.verifier_error is None
    timing = result.timing
    assert all(
        v is not None and v >= 0
        for v in (timing.environment_setup, timing.agent_setup, timing.agent_execution)
    )
    assert timing.verifier is not None and timing.total is not None and timing.total > 1
    assert result.started_at == "2026-12-04T20:27:05.834633Z"


def test_a_multi_step_harbor_trial_keeps_its_steps():
    result = read_attempt(str(next(ORACLE.glob("multi-step__*")))).result
    assert result is not None and result.steps is not None
    assert [(s.name, s.reward) for s in result.steps] == [("create", 1.0), ("append", 1.0)]
    assert result.rewards == {"reward": 1.0, "create": 1.0, "append": 1.0}  # as ours records them
    assert result.timing.agent_execution is not None  # the steps' agent time, summed


def test_a_harbor_exception_is_an_error_class_with_its_message():
    result = read_attempt(str(next(NO_REWARD.glob("no-reward__*")))).result
    assert result is not None and result.reward is None
    assert result.verifier_error_category == "verifier_no_reward"
    assert result.verifier_error is not None
    assert result.verifier_error.startswith("RewardFileNotFoundError: No reward file found at")


def test_bench_results_reads_a_harbor_job_as_harbor_graded_it():
    job = load_job(ORACLE)
    assert [(t.trial_name, t.reward, t.outcome, t.agent) for t in job.trials] == [
        ("hello-world", 1.0, "passed", "oracle"),
        ("multi-step", 1.0, "passed", "oracle"),
        ("partial-credit", 1.0, "passed", "oracle"),
    ]
    nop = load_job(NOP)
    assert {(t.reward, t.outcome, t.model) for t in nop.trials} == {
        (0.0, "failed", "openai/gpt-4o")
    }
    assert nop.settings["agent"] == "nop" and nop.settings["model"] == "openai/gpt-4o"
    errored = load_job(NO_REWARD).trials[0]
    assert errored.outcome == "verifier_errored"
    cause = errored.cause()
    assert cause is not None and cause.key == "verifier_no_reward" and cause.fault == "task"


def test_bench_results_and_compare_on_harbor_jobs(harbor_jobs, bench_env):
    out = run_bench(["results", str(harbor_jobs / NOP.name)], env=bench_env, cwd=harbor_jobs)
    assert out.returncode == 0, out.stderr
    assert "nop, model openai/gpt-4o" in out.stdout and "unscored" not in out.stdout
    assert out.stdout.count("failed") >= 3 and "errored" not in out.stdout
    # two Harbor jobs of the same tasks pair by task, whatever the folders' random suffixes
    pair = run_bench(
        ["results", "--compare", NOP.name, ORACLE.name, "--json"], env=bench_env, cwd=harbor_jobs
    )
    doc = json.loads(pair.stdout)
    assert doc["n_paired_scored"] == 3 and doc["only_in_a"] == doc["only_in_b"] == []
    assert doc["mean_diff"] == 1.0 and doc["mcnemar"]["only_b_passed"] == 3


def test_a_harbor_job_pairs_with_one_of_ours_on_the_same_tasks(tmp_path, harbor_jobs, bench_env):
    # given our job on the same three tasks: hello-world passed, the others failed
    ours = write_job(tmp_path, "ours", plan=["hello-world", "multi-step", "partial-credit"])
    for task, reward in (("hello-world", 1.0), ("multi-step", 0.0), ("partial-credit", 0.0)):
        write_attempt(ours, f"{task}__0000000a", result_doc(task, f"{task}__0000000a", reward))
    # when
    out = run_bench(
        ["results", "--compare", str(ours), str(harbor_jobs / ORACLE.name)],
        env=bench_env,
        cwd=tmp_path,
    )
    # then
    assert out.returncode == 0, out.stderr
    assert "over 3 paired trials" in out.stdout and "95% CI" in out.stdout
    assert "McNemar p=0.5" in out.stdout and "2 passed only in B" in out.stdout
    assert "unpaired" not in out.stdout


def test_harbor_trials_of_one_task_are_numbered_oldest_first(tmp_path):
    # given two Harbor trials of hello-world (n_attempts 2): the later-named one started first
    job = tmp_path / "job"
    job.mkdir()
    source = next(ORACLE.glob("hello-world__*"))
    for name, started in (
        ("hello-world__AAAAAAA", "20:30:00"),
        ("hello-world__ZZZZZZZ", "20:20:00"),
    ):
        shutil.copytree(source, job / name)
        doc = json.loads((job / name / "result.json").read_text())
        doc["trial_name"], doc["started_at"] = name, f"2026-12-04T{started}.000000Z"
        (job / name / "result.json").write_text(json.dumps(doc))
    # when
    records = sorted(job_attempts(job), key=lambda r: r.trial_index)
    # then
    assert [(r.name, r.trial_name, r.trial_index) for r in records] == [
        ("hello-world__ZZZZZZZ", "hello-world", 0),
        ("hello-world__AAAAAAA", "hello-world#1", 1),
    ]


@pytest.mark.django_db
def test_bench_index_of_a_harbor_job(harbor_jobs):
    # when
    index_path(harbor_jobs / ORACLE.name)
    index_path(harbor_jobs / NOP.name)
    # then the job as Harbor's result.json says: finished, 3 of 3, started when Harbor started
    job = Job.objects.get(name=ORACLE.name)
    assert job.state == JobState.FINISHED and (job.n_done, job.n_trials) == (3, 3)
    assert (job.passed, job.errored, job.unscored) == (3, 0, 0)
    assert job.agent == "oracle" and job.settings["tasks_dir"] == "tasks"
    started = datetime.fromisoformat("2026-12-04T20:26:31.100497").astimezone(UTC)
    assert job.started_at == started
    assert job.finished_at == datetime.fromisoformat("2026-12-04T20:26:48.513168").astimezone(UTC)
    nop = Job.objects.get(name=NOP.name)
    assert (nop.agent, nop.model, nop.failed) == ("nop", "openai/gpt-4o", 3)
    rows = {t.name: t for t in Trial.objects.filter(job=job)}
    assert set(rows) == {"hello-world", "multi-step", "partial-credit"}
    assert all(t.outcome == "passed" and t.error_category == "" for t in rows.values())
    partial = Attempt.objects.get(trial=rows["partial-credit"])
    assert partial.rewards == {"reward": 1.0, "files": 1.0, "content": 1.0, "perms": 1.0}
    assert partial.timing is not None and partial.timing["agent_execution"] > 0
    # and again: nothing doubles
    index_path(harbor_jobs / ORACLE.name)
    assert Attempt.objects.filter(trial__job=job).count() == 3


def test_a_jobs_folder_of_harbor_jobs_is_no_job_itself(harbor_jobs):
    # a Harbor job's own result.json sits where an attempt's would: `bench view jobs/` must still
    # see three jobs, not one job of three odd attempts
    assert sorted(p.name for p in job_folders(harbor_jobs)) == sorted(
        p.name for p in (ORACLE, NOP, NO_REWARD)
    )
