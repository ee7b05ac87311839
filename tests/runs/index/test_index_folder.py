"""`bench index PATH`: a job folder in, the rows out; and again, nothing doubles."""

from __future__ import annotations

import fcntl
import shutil
import sys
from pathlib import Path

import pytest

from runs.index.folder import index_path
from runs.models import Attempt, Budget, Event, Job, Trial
from runs.results.load import load_job
from tests.jobfolders import result_doc, write_attempt, write_job, write_summary

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

pytestmark = pytest.mark.django_db


def _counts() -> tuple[int, int, int, int]:
    return (
        Job.objects.count(),
        Trial.objects.count(),
        Attempt.objects.count(),
        Budget.objects.count(),
    )


def test_a_job_folder_becomes_rows_and_a_second_index_doubles_nothing(tmp_path):
    # given a finished job: a retried trial, a failed one, a per-trial budget, a job cap
    job = write_job(tmp_path, plan=["a", "b"], budget={"max_tokens": 10_000})
    write_attempt(
        job,
        "a__00000001",
        result_doc(
            "a",
            "a__00000001",
            None,
            error="Agent install failed (exit 1)",
            finished_at="2026-11-29T12:00:10.000",
        ),
    )
    write_attempt(job, "a__00000002", result_doc("a", "a__00000002", 1.0, attempt=2))
    budget = {
        "budget": {"tokens": 1000, "turns": None},
        "source": {"tokens": "run"},
        "used": {"tokens": 1500, "turns": 4},
        "stopped_by": "tokens",
        "stopped_at": 1500,
        "refused_calls": 1,
    }
    write_attempt(job, "b__00000003", result_doc("b", "b__00000003", 0.0, trial_budget=budget))
    write_summary(
        job,
        budget={
            "caps": {"max_tokens": 10_000},
            "spent": {"tokens": 4500},
            "stopped": False,
            "reason": None,
        },
        elapsed_sec=61.0,
    )
    # when
    index_path(tmp_path)
    first = _counts()
    index_path(tmp_path)
    # then
    assert _counts() == first == (1, 2, 3, 2)
    row = Job.objects.get()
    assert (row.state, row.passed, row.failed, row.n_done, row.n_attempts) == (
        "finished",
        1,
        1,
        2,
        3,
    )
    assert row.total_tokens == 4500 and row.duration_s == 61.0
    a = Trial.objects.get(name="a")
    assert (a.outcome, a.reward, a.n_attempts, a.best.rollout_name) == (
        "passed",
        1.0,
        2,
        "a__00000002",
    )
    assert (a.total_tokens, a.n_turns, a.n_tool_calls, a.duration_s) == (1500, 4, 3, 30.0)
    attempt = Attempt.objects.get(rollout_name="a__00000001")
    assert (attempt.error_category, attempt.n_input_tokens, attempt.n_cache_read_tokens) == (
        "install_failure",
        1200,
        400,
    )
    assert attempt.usage_source == "provider_response" and attempt.timing["verifier"] == 4.0
    cap = Budget.objects.get(trial=None)
    assert (cap.measure, cap.limit, cap.spent) == ("tokens", 10_000, 4500)
    per_trial = Budget.objects.get(trial__name="b")
    assert (per_trial.measure, per_trial.limit, per_trial.spent, per_trial.stopped) == (
        "tokens",
        1000,
        1500,
        True,
    )
    assert Attempt.objects.get(rollout_name="b__00000003").trial_budget == budget


def test_trial_rows_follow_the_best_attempt_rule_of_bench_results(tmp_path):
    # given a generated job with retries, interrupted attempts and repeats
    from results_bench import make_job

    job_dir = make_job(tmp_path / "2026-11-29__11-00-00", 400)
    # when
    index_path(job_dir)
    # then each trial's row is the trial load_job gives
    rows = {t.name: t for t in Trial.objects.select_related("best")}
    job = load_job(job_dir)
    assert len(job.trials) == len([t for t in rows.values() if t.n_attempts])
    for trial in job.trials:
        row = rows[trial.trial_name]
        assert (row.outcome, row.reward, row.best.rollout_name) == (
            trial.outcome,
            trial.reward,
            trial.chosen.folder,
        )
    assert Job.objects.get().passed == job.denominators(include_controls=True)["passed"]


def test_an_attempt_folder_removed_since_is_dropped(tmp_path):
    job = write_job(tmp_path, plan=["a"])
    write_attempt(job, "a__00000001", result_doc("a", "a__00000001", 0.0))
    write_attempt(
        job, "a__00000002", result_doc("a", "a__00000002", 1.0, finished_at="2026-11-29T12:01:00")
    )
    index_path(job)
    shutil.rmtree(job / "a__00000002")
    index_path(job)
    trial = Trial.objects.get()
    assert (trial.n_attempts, trial.outcome) == (1, "failed")


def test_a_corrupt_result_shows_as_corrupt_not_as_never_written(tmp_path):
    # given a half-written result.json
    job = write_job(tmp_path, plan=["a"])
    write_attempt(job, "a__00000001", '{"task_name": "a", "rewards": {"rew')
    write_summary(job)
    # when
    index_path(job)
    # then the index says so, and so does bench results
    attempt = Attempt.objects.get()
    assert (attempt.result_state, attempt.error_category) == ("corrupt", "corrupt_result")
    assert Trial.objects.get().error_category == "corrupt_result"
    [trial] = load_job(job).trials
    assert trial.error_category == "corrupt_result"
    assert "corrupt" in trial.cause().label and "never" not in trial.cause().label


def test_a_running_job_shows_running_and_waiting_trials(tmp_path):
    # given a job whose bench run holds the lock: one trial done, one running, one not started
    job = write_job(tmp_path, plan=["a", "b", "c"])
    write_attempt(job, "a__00000001", result_doc("a", "a__00000001", 1.0))
    write_attempt(job, "b__00000002", None)
    with open(job / ".evaluation.lock", "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        # when
        index_path(job)
    # then
    states = dict(Trial.objects.values_list("name", "state"))
    assert states == {"a": "done", "b": "running", "c": "waiting"}
    row = Job.objects.get()
    assert (row.state, row.n_running, row.n_done, row.n_trials) == ("running", 1, 1, 3)


def test_an_oracle_job_counts_its_passes_on_the_jobs_list(tmp_path):
    # the old list said "Passed 0" for an oracle job whose page said 8 of 8 (controls left out)
    job = write_job(tmp_path, agent="oracle", plan=["a", "b"])
    for i, task in enumerate("ab"):
        write_attempt(
            job, f"{task}__0000000{i}", result_doc(task, f"{task}__0000000{i}", 1.0, agent="oracle")
        )
    write_summary(job, passed=2)
    index_path(tmp_path)
    assert Job.objects.get().passed == 2


def test_each_index_writes_one_event_with_the_next_sequence_number(tmp_path):
    job = write_job(tmp_path, plan=["a"])
    write_attempt(job, "a__00000001", result_doc("a", "a__00000001", 1.0))
    index_path(job)
    index_path(job)
    assert list(Event.objects.order_by("seq").values_list("seq", "kind")) == [
        (1, "indexed"),
        (2, "indexed"),
    ]
    assert Job.objects.get().last_seq == 2
