"""The database index (Job, Trial, Attempt) is written as the job runs and matches the job folder."""

from __future__ import annotations

import io
import json
from decimal import Decimal
from pathlib import Path

import pytest

from runs import events as ev
from runs.index import Index, outcome_of
from runs.jobs.console import Reporter
from runs.models import Attempt, AttemptState, Job, JobState, Trial
from runs.spec import RunSpec

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tasks"


def result(
    task: str, rollout: str, reward: float | None, attempt: int = 1, error: str | None = None
) -> ev.AttemptFinished:
    return finished(
        {
            "task_name": task,
            "trial_name": task,
            "trial_index": 0,
            "rollout_name": rollout,
            "attempt": attempt,
            "rewards": None if reward is None else {"reward": reward},
            "error": error,
            "error_category": "sandbox_setup" if error else None,
            "n_tool_calls": 2,
            "agent_result": {"total_tokens": 100, "cost_usd": 0.01},
            "timing": {"total": 1.5},
        }
    )


def finished(document: dict) -> ev.AttemptFinished:
    """The event of an attempt whose result.json is `document`."""
    from tests.conftest import trial_result

    res = trial_result(document["task_name"], **document)
    return ev.AttemptFinished(res.trial_name, res.rollout_name, res)


def started(job_dir: Path, settings: dict) -> ev.JobStarted:
    plan = settings.get("plan") or []
    return ev.JobStarted(job_dir.name, str(job_dir), settings, len(plan), 0, len(plan), 1, 0)


def attempt(task: str, rollout: str, number: int) -> ev.AttemptStarted:
    return ev.AttemptStarted(task, task, 0, number, rollout)


def ended(summary: dict, state: str, job_dir: Path) -> ev.JobFinished:
    return ev.JobFinished(
        job_dir.name,
        str(job_dir),
        str(job_dir.parent),
        summary,
        state,
        1.0,
        0,
        0,
        False,
        0,
        0,
        False,
    )


@pytest.mark.django_db(transaction=True)
def test_index_records_attempts_and_the_best_outcome_per_trial(tmp_path):
    # given
    index = Index()
    job_dir = tmp_path / "2026-01-01__00-00-00"
    index(started(job_dir, {"tasks_dir": "tasks", "agent": "oracle", "plan": ["a", "b"]}))
    index(attempt("a", "a__00000001", 1))
    index(result("a", "a__00000001", None, error="sandbox startup failed: boom"))
    index(attempt("a", "a__00000002", 2))
    index(result("a", "a__00000002", 1.0, attempt=2))
    index(attempt("b", "b__00000003", 1))
    index(result("b", "b__00000003", 0.0))
    summary = {"passed": 1, "failed": 1, "errored": 0, "verifier_errored": 0}
    index(ended(summary, JobState.FINISHED, job_dir))
    index.close()
    # then
    job = Job.objects.get()
    assert (job.agent, job.state, job.passed, job.failed, job.n_trials) == (
        "oracle",
        "finished",
        1,
        1,
        2,
    )
    a = Trial.objects.get(job=job, name="a")
    assert (a.outcome, a.reward, a.n_attempts) == ("passed", 1.0, 2)
    assert Trial.objects.get(job=job, name="b").outcome == "failed"
    first = Attempt.objects.get(rollout_name="a__00000001")
    assert first.state == AttemptState.FINISHED and first.error_category == "sandbox_setup"
    assert (
        first.cost_usd == Decimal("0.01") and first.total_tokens == 100 and first.duration_s == 1.5
    )


@pytest.mark.django_db(transaction=True)
def test_while_a_job_runs_its_counts_and_caps_spend_follow_its_attempts(tmp_path):
    # given a job with a cap on each measure, two attempts finished and one running
    from runs.models import Budget

    index = Index()
    caps = {"max_cost_usd": 1.0, "max_tokens": 1000, "max_sandbox_seconds": 60, "max_rollouts": 9}
    job_dir = tmp_path / "2026-01-01__00-00-00"
    settings = {"tasks_dir": "tasks", "agent": "oracle", "plan": ["a", "b", "c"], "budget": caps}
    index(started(job_dir, settings))
    index(attempt("a", "a__00000001", 1))
    index(result("a", "a__00000001", 1.0))
    index(attempt("b", "b__00000002", 1))
    index(result("b", "b__00000002", None, error="sandbox startup failed"))
    index(attempt("c", "c__00000003", 1))
    index.flush()  # the writer caught up; the job still runs
    # then the job's row counts them, and each cap's row says what was spent against it
    job = Job.objects.get()
    assert (job.n_done, job.n_running, job.passed, job.errored, job.unscored) == (2, 1, 1, 1, 1)
    assert (job.mean_reward, job.n_attempts, job.total_tokens) == (1.0, 3, 200)
    assert job.cost_usd == Decimal("0.02")
    spent = dict(Budget.objects.filter(job=job, trial=None).values_list("measure", "spent"))
    assert spent == {
        "cost_usd": pytest.approx(0.02),
        "tokens": 200,
        "sandbox_seconds": 3.0,
        "rollouts": 3,
    }
    # and once it ended, summary.json's budget block has the last word
    block = {"caps": caps, "spent": {"tokens": 250}, "stopped": False}
    index(ended({"passed": 1, "budget": block}, JobState.FINISHED, job_dir))
    index.close()
    assert Budget.objects.get(job=job, trial=None, measure="tokens").spent == 250


@pytest.mark.parametrize(
    ("res", "outcome"),
    [
        (None, "interrupted"),
        ({"rewards": {"reward": 1.0}}, "passed"),
        ({"rewards": {"reward": 0.5}}, "failed"),
        ({"rewards": {"reward": 0.0}, "error": "x"}, "failed"),
        ({"rewards": None, "error": "x"}, "errored"),
        ({"rewards": None, "verifier_error": "x"}, "verifier_errored"),
    ],
)
def test_outcome_of(res, outcome):
    assert outcome_of(res) == outcome


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_a_real_job_leaves_an_index_matching_its_folder(docker_client, tmp_path, monkeypatch):
    # when a real job runs in this process (Docker sandboxes, the oracle)
    from runs.operations.run import run_job

    monkeypatch.chdir(tmp_path)
    spec = RunSpec(
        tasks_dir=EXAMPLES,
        agent="oracle",
        include=["hello-world", "partial-credit"],
        jobs_dir=tmp_path / "jobs",
        concurrency=2,
        quiet=True,
    )
    code = run_job(
        spec, setup_django=lambda: None, reporter=Reporter(quiet=True, stream=io.StringIO())
    )
    # then the index matches the folder
    assert code == 0
    [job_dir] = [p for p in (tmp_path / "jobs").iterdir() if p.is_dir()]
    job = Job.objects.get(path=str(job_dir.resolve()))
    assert job.state == JobState.FINISHED and job.passed == 2
    assert job.summary == json.loads((job_dir / "summary.json").read_text())
    folders = {p.parent.name for p in job_dir.glob("*/result.json")}
    assert (
        set(Attempt.objects.filter(trial__job=job).values_list("rollout_name", flat=True))
        == folders
    )
    for trial in Trial.objects.filter(job=job):
        [res] = [json.loads(p.read_text()) for p in job_dir.glob(f"{trial.name}__*/result.json")]
        assert trial.reward == res["rewards"]["reward"] and trial.outcome == "passed"


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_an_attempt_a_job_cap_cancels_is_cancelled_in_the_index(
    docker_client, tmp_path, monkeypatch
):
    # given an agent that sleeps and a sandbox-seconds cap it runs past
    from runs.operations.run import run_job
    from tests.conftest import write_task

    monkeypatch.chdir(tmp_path)
    write_task(tmp_path / "tasks", "sleepy", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    agent = tmp_path / "sleep.sh"
    agent.write_text("#!/bin/bash\nsleep 60\n")
    agent.chmod(0o755)
    spec = RunSpec(
        tasks_dir=tmp_path / "tasks",
        agent=f"script:{agent}",
        jobs_dir=tmp_path / "jobs",
        max_sandbox_seconds=3,
        quiet=True,
    )
    # when
    run_job(spec, setup_django=lambda: None, reporter=Reporter(quiet=True, stream=io.StringIO()))
    # then its row is cancelled, not left running
    [attempt] = Attempt.objects.all()
    assert attempt.state == AttemptState.CANCELLED and attempt.finished_at is not None


@pytest.mark.django_db(transaction=True)
def test_each_event_writes_its_row_and_trials_go_from_waiting_to_done(tmp_path):
    # given the index subscribed to a job's bus, and a job of two planned trials
    from runs import events as ev
    from runs.models import Event
    from tests.conftest import trial_result

    index = Index()
    bus = ev.Bus(index)
    job_dir = tmp_path / "2026-01-01__00-00-00"
    settings = {"agent": "oracle", "plan": ["a", "b"], "budget": {"max_tokens": 1000}}
    bus.emit(ev.JobStarted(job_dir.name, str(job_dir), settings, 2, 0, 2, 1, 0))
    bus.emit(ev.AttemptStarted("a", "a", 0, 1, "a__00000001"))
    index.flush()
    # then b waits while a runs
    assert dict(Trial.objects.values_list("name", "state")) == {"a": "running", "b": "waiting"}
    # when a's agent works, then a finishes, then the job ends
    bus.emit(ev.PhaseChanged("a", "a__00000001", "agent"))
    bus.emit(ev.ToolCalled("a", "a__00000001", "ls"))
    bus.emit(ev.ToolCalled("a", "a__00000001", "cat"))  # within a second: no row of its own
    bus.emit(ev.UsageCounted("a", "a__00000001", 900, 100, 0, 1000, 3, 0.01))
    index.flush()
    running = Attempt.objects.get()
    assert (running.phase, running.total_tokens, running.n_turns) == ("agent", 1000, 3)
    result = trial_result("a", rollout_name="a__00000001", rewards={"reward": 1.0})
    bus.emit(ev.AttemptFinished("a", "a__00000001", result))
    bus.emit(ev.UtilizationReported(120.0, 1, 0.2, 0.8, 0, True))
    bus.emit(
        ev.JobFinished(
            job_dir.name,
            str(job_dir),
            str(tmp_path),
            {"passed": 1},
            "finished",
            3.0,
            2,
            0,
            False,
            1,
            0,
            True,
        )
    )
    index.close()
    # then each event is one row with its kind and payload, the trials' rows say what happened
    assert dict(Trial.objects.values_list("name", "state")) == {"a": "done", "b": "not_run"}
    kinds = list(Event.objects.order_by("seq").values_list("seq", "kind", "trial_name"))
    assert kinds == [
        (1, "job_started", ""),
        (2, "attempt_started", "a"),
        (3, "phase_changed", "a"),
        (4, "tool_called", "a"),
        (5, "usage_counted", "a"),
        (6, "attempt_finished", "a"),
        (7, "utilization_reported", ""),
        (8, "job_finished", ""),
    ]
    finished = Event.objects.get(kind="attempt_finished").payload
    assert finished["result"]["rewards"] == {"reward": 1.0}
    assert finished["result"]["rollout_name"] == "a__00000001"
    assert Event.objects.get(kind="job_started").payload["settings"]["plan"] == ["a", "b"]
    assert Attempt.objects.get().reward == 1.0 and Job.objects.get().passed == 1
