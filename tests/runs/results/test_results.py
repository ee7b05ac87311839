"""Reading job folders: attempts, the best-attempt rule, denominators, pass@k, exports."""

from __future__ import annotations

import csv
import io
import json
import math
import os

import pytest

from runs.results import load as results
from runs.results import render
from runs.results.attempts import best_attempt, outcome_of, read_attempts
from runs.results.load import load_job
from runs.results.stats import mean_stderr, pass_at_k, pass_at_k_estimate, reward_stats


def write_attempt(
    job,
    task,
    hex8,
    *,
    reward=None,
    error=None,
    verifier_error=None,
    finished="2026-11-29T11:00:00",
    trial_name=None,
    trial_index=0,
    **extra,
):
    folder = job / f"{task}__{hex8}"
    folder.mkdir(parents=True)
    result = {
        "task_name": task,
        "rollout_name": folder.name,
        "trial_name": trial_name or task,
        "trial_index": trial_index,
        "rewards": None if reward is None else {"reward": reward},
        "agent": "claude",
        "model": "mock/oracle",
        "n_tool_calls": 3,
        "error": error,
        "verifier_error": verifier_error,
        "started_at": "2026-11-29T10:59:00",
        "finished_at": finished,
        "agent_result": {"total_tokens": 100, "cost_usd": 0.01},
        **extra,
    }
    (folder / "result.json").write_text(json.dumps(result))
    return folder


def write_plan(job, plan, **settings):
    job.mkdir(parents=True, exist_ok=True)
    body = {"plan": plan, "trials": 1, "agent": "claude", "model": "mock/oracle", **settings}
    (job / "evaluation.json").write_text(json.dumps(body))


@pytest.mark.parametrize(
    ("result", "outcome"),
    [
        ({"rewards": {"reward": 1.0}}, "passed"),
        ({"rewards": {"reward": 1}}, "passed"),
        ({"rewards": {"reward": 0.5}, "error": "Agent timed out"}, "failed"),
        ({"rewards": {"reward": float("nan")}, "error": "x"}, "errored"),
        ({"rewards": {"reward": True}, "verifier_error": "v"}, "verifier_errored"),
        ({"rewards": None, "error": "x", "verifier_error": "v"}, "errored"),
        ({"rewards": None, "verifier_error": "verifier timed out"}, "verifier_errored"),
        ({"rewards": None}, "errored"),
        (None, "interrupted"),
    ],
)
def test_outcome_a_reward_wins_over_an_error(result, outcome):
    assert outcome_of(result) == outcome


def test_read_attempts_reads_every_attempt_folder_and_skips_the_rest(tmp_path):
    write_attempt(tmp_path, "a", "00000001", reward=1.0)
    (tmp_path / "b__00000002").mkdir()  # interrupted: no result.json
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "notes").mkdir()
    write_attempt(tmp_path, "c", "00000003", reward=1.0, purpose="reviewer")
    attempts = read_attempts(tmp_path)
    assert [(a.task, a.result is None) for a in attempts] == [("a", False), ("b", True)]
    assert attempts[1].outcome == "interrupted"


def test_interrupted_attempt_takes_its_trial_from_config_json(tmp_path):
    folder = tmp_path / "t__0000000a"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"task_name": "t", "trial_name": "t#1", "trial_index": 1})
    )
    (attempt,) = read_attempts(tmp_path)
    assert (attempt.trial_name, attempt.trial_index) == ("t#1", 1)


@pytest.mark.parametrize(
    ("attempts", "best"),
    [
        # (folder, reward, finished_at) oldest first in time
        ([("a1", None, "10:00"), ("a2", 0.0, "10:01"), ("a3", None, "10:02")], "a2"),
        ([("a1", 0.0, "10:00"), ("a2", 1.0, "10:01")], "a2"),
        ([("a1", 1.0, "10:02"), ("a2", 0.0, "10:01")], "a1"),
        ([("a1", None, "10:00"), ("a2", None, "10:05")], "a2"),
        ([("a2", None, "10:05"), ("a1", None, "10:00")], "a2"),
    ],
)
def test_best_attempt_is_the_newest_scored_else_the_newest(tmp_path, attempts, best):
    for hex8, reward, at in attempts:
        write_attempt(
            tmp_path,
            "t",
            hex8.ljust(8, "0"),
            reward=reward,
            error=None if reward is not None else "Connection reset",
            finished=f"2026-11-29T{at}:00",
        )
    chosen = best_attempt(read_attempts(tmp_path))
    assert chosen.folder == f"t__{best.ljust(8, '0')}"


def test_time_ties_are_broken_by_folder_mtime_then_name(tmp_path):
    older = write_attempt(tmp_path, "t", "bbbbbbbb", error="Connection reset")
    newer = write_attempt(tmp_path, "t", "aaaaaaaa", error="Connection reset")
    os.utime(older, (1000, 1000))
    os.utime(newer, (2000, 2000))
    assert best_attempt(read_attempts(tmp_path)).folder == newer.name


def test_an_attempt_without_timestamps_is_placed_by_folder_mtime(tmp_path):
    write_attempt(
        tmp_path, "t", "00000001", error="Connection reset", finished="2026-11-29T11:00:00"
    )
    folder = tmp_path / "t__00000002"
    folder.mkdir()
    os.utime(folder, (4_000_000_000, 4_000_000_000))
    assert best_attempt(read_attempts(tmp_path)).result is None


def test_load_job_orders_trials_by_plan_and_keeps_attempts_oldest_first(tmp_path):
    write_plan(tmp_path, ["zeta", "alpha"])
    write_attempt(tmp_path, "alpha", "00000001", reward=1.0)
    write_attempt(
        tmp_path, "zeta", "00000002", error="Agent install failed", finished="2026-11-29T11:00:00"
    )
    write_attempt(tmp_path, "zeta", "00000003", reward=0.0, finished="2026-11-29T11:05:00")
    job = load_job(tmp_path)
    assert [t.task for t in job.trials] == ["zeta", "alpha"]
    zeta = job.trials[0]
    assert [a.folder for a in zeta.attempts] == ["zeta__00000002", "zeta__00000003"]
    assert (zeta.reward, zeta.outcome, zeta.retried) == (0.0, "failed", True)
    assert (zeta.agent, zeta.model, zeta.cost_usd, zeta.total_tokens) == (
        "claude",
        "mock/oracle",
        0.01,
        100,
    )


def test_load_job_attempts_all_lists_every_attempt(tmp_path):
    write_attempt(
        tmp_path, "t", "00000001", error="Agent install failed", finished="2026-11-29T11:00:00"
    )
    write_attempt(tmp_path, "t", "00000002", reward=1.0, finished="2026-11-29T11:05:00")
    job = load_job(tmp_path, attempts="all")
    assert [(t.outcome, len(t.attempts)) for t in job.trials] == [("errored", 2), ("passed", 2)]
    records = render.records(job)
    assert [(r["attempt"], r["best"]) for r in records] == [(1, False), (2, True)]
    with pytest.raises(ValueError):
        load_job(tmp_path, attempts="some")


def make_mixed_job(job):
    write_attempt(job, "pass", "00000001", reward=1.0)
    write_attempt(job, "fail", "00000002", reward=0.0)
    write_attempt(job, "late", "00000003", reward=1.0, error="Agent timed out after 900s")
    write_attempt(job, "verr", "00000004", verifier_error="verifier crashed: exit 2")
    write_attempt(job, "err", "00000005", error="ACP error: Invalid API key (HTTP 401)")
    (job / "gone__00000006").mkdir()
    write_attempt(job, "ctl__o", "00000007", reward=1.0)


def test_denominators_keep_errors_out_of_scored_and_controls_out_of_attempted(tmp_path):
    make_mixed_job(tmp_path)
    job = load_job(tmp_path)
    assert job.denominators() == {
        "attempted": 6,
        "scored": 3,
        "assessment_errors": 1,
        "unscored": 2,
        "execution_errors": 3,
        "passed": 2,
        "mean_reward": pytest.approx(2 / 3),
        "clean_scored": 2,
        "clean_passed": 1,
        "controls_excluded": 1,
        "budget_cancelled": 0,
        "budget_not_started": 0,
    }
    assert job.pass_rate_scored == pytest.approx(2 / 3)
    assert job.pass_rate_attempted == pytest.approx(2 / 6)
    assert job.denominators(include_controls=True)["attempted"] == 7


def test_an_oracle_job_is_a_control_run(tmp_path):
    write_attempt(tmp_path, "t", "00000001", reward=1.0, agent="oracle")
    d = load_job(tmp_path).denominators()
    assert (d["attempted"], d["controls_excluded"]) == (0, 1)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 0, 1, 0.0),
        (5, 5, 3, 1.0),
        (4, 1, 1, 0.25),
        (4, 1, 2, 0.5),
        (5, 2, 2, 0.7),
        (3, 2, 3, 1.0),
    ],
)
def test_pass_at_k_is_the_unbiased_estimator(n, c, k, expected):
    assert pass_at_k_estimate(n, c, k) == pytest.approx(expected)
    assert pass_at_k_estimate(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_pass_at_k_over_repeated_trials_leaves_errors_and_short_tasks_out(tmp_path):
    # "a": 3 scored trials, 1 passed, plus one errored; "b": 1 scored trial
    for i, (reward, error) in enumerate(
        [(1.0, None), (0.0, None), (0.0, None), (None, "Connection lost")]
    ):
        write_attempt(
            tmp_path,
            "a",
            f"0000000{i}",
            reward=reward,
            error=error,
            trial_name="a" if i == 0 else f"a#{i}",
            trial_index=i,
        )
    write_attempt(tmp_path, "b", "0000000b", reward=1.0)
    job = load_job(tmp_path)
    assert pass_at_k(job, 1) == pytest.approx((1 / 3 + 1.0) / 2)
    assert pass_at_k(job, 2) == pytest.approx(2 / 3)
    assert pass_at_k(job, 4) is None
    stats = reward_stats(job)
    assert stats["scored"]["n"] == 4 and stats["with_errors"]["n"] == 5
    assert stats["scored"]["mean"] == pytest.approx(0.5)
    doc = render.job_document(job)
    assert doc["pass_at_k"]["2"] == pytest.approx(2 / 3) and doc["pass_at_k"]["4"] is None


@pytest.mark.parametrize(
    ("values", "mean", "stderr"),
    [([], None, None), ([1.0], 1.0, None), ([0.0, 1.0], 0.5, 0.5), ([1.0, 1.0, 1.0], 1.0, 0.0)],
)
def test_mean_stderr_uses_the_sample_deviation(values, mean, stderr):
    got = mean_stderr(values)
    assert got["n"] == len(values) and got["mean"] == mean
    assert got["stderr"] == (None if stderr is None else pytest.approx(stderr))


def test_to_json_dict_is_strict_json(tmp_path):
    write_attempt(tmp_path, "t", "00000001", reward=1.0, agent_result={"cost_usd": float("nan")})
    doc = render.job_document(load_job(tmp_path))
    text = json.dumps(doc, allow_nan=False)
    assert doc["kind"] == "benchflow.job" and doc["trials"][0]["cost_usd"] is None
    assert json.loads(text)["denominators"]["passed"] == 1


def test_to_csv_has_a_header_and_one_row_per_trial(tmp_path):
    make_mixed_job(tmp_path)
    rows = list(csv.DictReader(io.StringIO(render.records_csv(render.records(load_job(tmp_path))))))
    assert len(rows) == 7
    assert {r["task"]: r["outcome"] for r in rows}["verr"] == "verifier_errored"


def test_render_results_prints_denominators_then_one_row_per_trial(tmp_path):
    make_mixed_job(tmp_path)
    text = render.render_results(load_job(tmp_path))
    head, table = text.split("\n\n", 1)
    assert "6 trials attempted, 3 scored (2 passed), 1 assessment errors, 2 unscored" in head
    assert "66.7% of scored (2/3), 33.3% of attempted (2/6)" in head
    assert (
        "Controls:  1 control runs (oracle): 1 passed; 100.0% of scored passed, left out of the rates above"
        in head
    )
    header, *rows = table.strip().splitlines()
    assert header.split() == [
        "Task",
        "Reward",
        "Outcome",
        "Attempts",
        "Agent",
        "Model",
        "Cost",
        "Tokens",
        "Cause",
    ]
    err = next(r for r in rows if r.startswith("err "))
    assert "the model provider refused the credential (setup problem)" in err
    gone = next(r for r in rows if r.startswith("gone "))
    assert "interrupted" in gone


def test_render_results_attempts_all_shows_each_attempt_and_the_best(tmp_path):
    write_attempt(
        tmp_path, "t", "00000001", error="Agent install failed", finished="2026-11-29T11:00:00"
    )
    write_attempt(tmp_path, "t", "00000002", reward=1.0, finished="2026-11-29T11:05:00")
    text = render.render_results(load_job(tmp_path), attempts="all")
    rows = text.split("\n\n", 1)[1].strip().splitlines()
    assert rows[0].split()[:4] == ["Task", "Attempt", "Folder", "Best"]
    assert rows[1].split()[:3] == ["t", "1", "t__00000001"]
    assert rows[2].split()[:4] == ["t", "2", "t__00000002", "*"]


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_render_results_json_and_csv(tmp_path, fmt):
    make_mixed_job(tmp_path)
    text = render.render_results(load_job(tmp_path), fmt=fmt)
    if fmt == "json":
        assert json.loads(text)["denominators"]["attempted"] == 6
    else:
        assert text.splitlines()[0].startswith("task,trial_name,trial_index")


REASON = "budget reached: $0.0041 USD spent of a $0.0030 cap"


def write_cancelled(job, task, hex8, *, trial_name=None, trial_index=0):
    """An attempt a job cap cancelled while it ran: config.json and timing.json, no result.json."""
    folder = job / f"{task}__{hex8}"
    folder.mkdir(parents=True)
    config = {
        "task_name": task,
        "trial_name": trial_name or task,
        "trial_index": trial_index,
        "rollout_name": folder.name,
        "started_at": "2026-11-29T10:59:00",
    }
    (folder / "config.json").write_text(json.dumps(config))
    timing = {
        "total": 3.0,
        "cancelled": True,
        "cancelled_by": REASON,
        "agent_result": {"total_tokens": 2021, "cost_usd": 0.002037},
    }
    (folder / "timing.json").write_text(json.dumps(timing))
    return folder


def test_trials_a_job_cap_kept_from_running_are_listed_apart_and_not_counted(tmp_path):
    # given a job its cost cap stopped: beta passed, delta was cancelled while it ran, gamma never started,
    # and eps errored before the cap cancelled its retry
    write_plan(tmp_path, ["beta", "delta", "gamma", "eps"])
    write_attempt(tmp_path, "beta", "00000001", reward=1.0)
    write_cancelled(tmp_path, "delta", "00000002")
    write_attempt(
        tmp_path,
        "eps",
        "00000003",
        error="install failed: exit 127",
        error_category="install_failure",
        finished="2026-11-29T11:00:00",
    )
    write_cancelled(tmp_path, "eps", "00000004")
    budget = {
        "stopped": True,
        "cancelled": ["delta"],
        "not_started": ["gamma"],
        "retries_stopped": ["eps"],
    }
    (tmp_path / "summary.json").write_text(json.dumps({"budget": budget}))
    # when
    job = load_job(tmp_path)
    out = render.render_results(job)
    # then delta and gamma are neither attempted nor errors; eps counts by its errored attempt
    d = job.denominators()
    assert (d["attempted"], d["execution_errors"], d["passed"]) == (2, 1, 1)
    assert (d["budget_cancelled"], d["budget_not_started"]) == (1, 1)
    assert [t.trial_name for t in job.trials] == ["beta", "eps"]
    eps = job.trials[1]
    assert (eps.outcome, eps.error_category, len(eps.attempts)) == ("errored", "install_failure", 2)
    assert (
        "Not run:   2 trials a job cap kept from running, not counted as failures: delta (cancelled), "
        "gamma (not started)"
    ) in out
    assert "1 execution errors" in out and "50.0% of attempted (1/2)" in out
    assert "(infrastructure problem)" not in out.split("Not run:")[1].split("\n")[0]
    assert job.interrupted == []  # a cap's cancel is no interrupted attempt
    doc = render.job_document(job)
    assert doc["not_run"] == [
        {"trial_name": "delta", "why": "cancelled", "rollout_names": ["delta__00000002"]},
        {"trial_name": "gamma", "why": "not started", "rollout_names": []},
    ]
    # the cancelled retry is an attempt of its own, counted apart, with its cause
    attempts = with_all(job)
    [cancelled] = [t for t in attempts.trials if t.outcome == "cancelled"]
    assert cancelled.cause().key == "budget_cancelled"
    assert (cancelled.execution, cancelled.error_category) == ("cancelled", "budget_cancelled")
    assert cancelled.error == f"cancelled by the job budget: {REASON}"
    # what the proxy counted
    assert (cancelled.total_tokens, cancelled.cost_usd) == (
        2021,
        0.002037,
    )
    assert attempts.denominators()["attempted"] == 2


def with_all(job):
    return results.with_mode(job, "all")


def test_a_budget_cancelled_attempt_is_never_the_best_beside_a_finished_one(tmp_path):
    old = write_attempt(
        tmp_path, "t", "00000001", error="install failed", finished="2026-11-29T11:00:00"
    )
    write_cancelled(tmp_path, "t", "00000002")
    attempts = read_attempts(tmp_path)
    assert best_attempt(attempts).folder == old.name
    assert [a.outcome for a in attempts] == ["errored", "cancelled"]
    assert not (tmp_path / "t__00000002" / "result.json").exists()


def test_an_attempt_a_signal_cancelled_stays_interrupted(tmp_path):
    folder = tmp_path / "t__00000001"
    folder.mkdir()
    (folder / "timing.json").write_text(json.dumps({"total": 4.0, "cancelled": True}))
    [attempt] = read_attempts(tmp_path)
    assert (attempt.outcome, attempt.budget_cancelled) == ("interrupted", False)
    assert outcome_of(None) == "interrupted"


def test_results_of_a_job_of_control_runs_only_says_what_the_controls_did(tmp_path):
    # given an oracle job: three passed, one failed, one errored
    for i, (reward, error) in enumerate([(1.0, None)] * 3 + [(0.0, None), (None, "boom")]):
        write_attempt(tmp_path, f"t{i}", f"0000000{i}", reward=reward, error=error, agent="oracle")
    # when
    head = render.render_results(load_job(tmp_path)).split("\n\n", 1)[0]
    # then the control line is the answer, not "0 trials attempted ... n/a"
    assert (
        "Controls:  5 control runs (oracle): 3 passed, 1 failed, 1 errored; 75.0% of scored "
        "passed (no agent was measured)"
    ) in head
    assert "0 trials attempted" not in head and "n/a" not in head
