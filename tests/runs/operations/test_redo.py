"""--redo: trials run again though they have a reward, the request recorded in evaluation.json so
a later resume finishes it once and never redoes it twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runs.jobs.plan import plan_job, record_redo, set_aside
from runs.jobs.preflight import check_run, resume_spec
from runs.spec import RunSpec
from runs.tasks.load import load_task
from tests.conftest import EXAMPLES, write_task


def _attempt(job: Path, folder: str, trial: str, reward: float | None, when: str) -> None:
    path = job / folder
    path.mkdir(parents=True)
    (path / "result.json").write_text(
        json.dumps(
            {
                "task_name": trial,
                "trial_name": trial,
                "trial_index": 0,
                "rewards": None if reward is None else {"reward": reward},
                "error": None if reward is not None else "agent crashed",
                "finished_at": when,
            }
        )
    )


@pytest.fixture
def job(tmp_path):
    job = tmp_path / "jobs" / "j"
    job.mkdir(parents=True)
    (job / "evaluation.json").write_text(
        json.dumps({"agent": "oracle", "tasks_dir": "tasks", "plan": ["alpha", "beta"]})
    )
    _attempt(job, "alpha__00000001", "alpha", 1.0, "2026-11-29T11:00:00")
    _attempt(job, "beta__00000002", "beta", 0.0, "2026-11-29T11:00:01")
    return job


@pytest.fixture
def tasks(tmp_path):
    return [
        load_task(write_task(tmp_path / "tasks", name, test_sh="true\n"))
        for name in ("alpha", "beta")
    ]


def test_a_scored_trial_is_kept_by_a_plain_resume(job, tasks):
    plan = plan_job(job, tasks, 1, set_aside(json.loads((job / "evaluation.json").read_text())))
    assert sorted(plan.done) == ["alpha", "beta"]
    assert plan.to_run == 0


def test_a_redo_request_runs_the_named_trial_again_and_keeps_the_others(job, tasks):
    # when beta is asked to be redone
    record_redo(job, ["beta"], by="ann")
    recorded = json.loads((job / "evaluation.json").read_text())
    plan = plan_job(job, tasks, 1, set_aside(recorded))
    # then the request is recorded with the attempts it set aside, and only beta runs again
    [request] = recorded["redo"]
    assert request["trials"] == {"beta": ["beta__00000002"]}
    assert request["by"] == "ann"
    assert list(plan.done) == ["alpha"]
    [[again]] = plan.waves
    assert (again.trial_name, again.finished_before) == ("beta", True)
    # its earlier attempt stays on disk: nothing is deleted
    assert (job / "beta__00000002" / "result.json").is_file()


def test_a_redone_trial_is_not_redone_by_the_next_resume(job, tasks):
    record_redo(job, ["beta"])
    # the redo ran: a new scored attempt of beta
    _attempt(job, "beta__00000003", "beta", 1.0, "2026-11-29T12:00:00")
    plan = plan_job(job, tasks, 1, set_aside(json.loads((job / "evaluation.json").read_text())))
    assert sorted(plan.done) == ["alpha", "beta"]
    assert plan.done["beta"]["rewards"] == {"reward": 1.0}


def test_a_redo_cut_short_is_finished_by_the_next_resume(job, tasks):
    record_redo(job, ["beta"])
    # the redo's attempt was stopped before it was scored (errored)
    _attempt(job, "beta__00000003", "beta", None, "2026-11-29T12:00:00")
    plan = plan_job(job, tasks, 1, set_aside(json.loads((job / "evaluation.json").read_text())))
    assert list(plan.done) == ["alpha"]
    [[again]] = plan.waves
    assert again.trial_name == "beta"


def test_redo_names_a_trial_of_the_plan(tmp_path):
    spec = RunSpec(tasks_dir=EXAMPLES, agent="oracle", include=["hello-world"], redo=["nope"])
    spec.jobs_dir = tmp_path / "jobs"
    problems = check_run(spec).problems
    assert [(p.field, p.text.split(":")[0]) for p in problems] == [("redo", "--redo nope")]


def test_resume_takes_the_trials_to_redo(job):
    spec = resume_spec(job, {}, None, ["beta"])
    assert spec.redo == ["beta"] and spec.job == "j"
    assert "redo" not in spec.recorded()
