"""Rubric review with a real agent CLI (Claude Code) through the proxy to mock/oracle: `bench
review` answers every criterion in a sandbox and changes no reward; `bench run --reviewer-model`
reviews each rubric trial once verified and gates its reward. The reviewer's tokens and cost are
in its own run, never in the job's."""

from __future__ import annotations

import json

import pytest

from tests.conftest import EXAMPLES, run_args, run_bench

pytestmark = pytest.mark.docker

RUBRIC = {
    "criteria": [
        {
            "name": "wrote_it",
            "description": "hidden",
            "guidance": "file written?",
            "blocker": 1,
            "weight": 1,
        },
        {"name": "tidy", "description": "hidden", "guidance": "tidy?", "blocker": 0, "weight": 3},
    ]
}


def test_a_reviewer_agent_scores_a_trial_through_the_proxy_and_changes_no_reward(
    tmp_path, bench_env, docker_client
):
    # given a scored job that kept its outputs
    run = run_bench(
        run_args("oracle", "--save-outputs", "--quiet", tasks=EXAMPLES, include=["hello-world"]),
        env=bench_env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    job = next(p for p in (tmp_path / "jobs").iterdir() if p.is_dir())
    attempt = next(job.glob("hello-world__*"))
    result_before = (attempt / "result.json").read_bytes()
    summary_before = (job / "summary.json").read_bytes()
    (tmp_path / "rubric.json").write_text(json.dumps(RUBRIC))
    # when Claude Code reviews it against the rubric with mock/oracle
    review = run_bench(
        ["review", str(job), "-r", "rubric.json", "-a", "claude", "-m", "mock/oracle"],
        env=bench_env,
        cwd=tmp_path,
    )
    # then every criterion is answered and scored
    assert review.returncode == 0, review.stdout + review.stderr
    assert "hello-world: publishable (gated 1.00, raw 1.00; blockers pass)" in review.stdout
    answer = json.loads((attempt / "review.json").read_text())
    assert answer["complete"] and [c["verdict"] for c in answer["criteria"]] == ["pass", "pass"]
    report = json.loads((job / "review_report.json").read_text())
    assert report["reviews"][0]["band"] == "publishable"
    # the reviewer ran through the proxy, and its cost is its own run's
    usage = report["reviewer_usage"]
    assert usage["total_tokens"] > 0 and usage["cost_usd"] > 0
    run_dir = next((job / "review-runs").iterdir()) / "run"
    reviewer_attempt = next(run_dir.glob("hello-world__*"))
    assert (reviewer_attempt / "trajectory" / "llm_trajectory.jsonl").stat().st_size > 0
    assert f"review: ${usage['cost_usd']:.4f}" in review.stdout
    # and the reviewed trial's reward and the job's cost line are untouched
    assert (attempt / "result.json").read_bytes() == result_before
    assert (job / "summary.json").read_bytes() == summary_before


def test_bench_run_reviews_each_rubric_trial_once_verified_and_gates_its_reward(
    tmp_path, bench_env, docker_client
):
    # given two tasks shipping tests/rubric.json: hello-world (reward 1) and a copy whose tests
    # give half a reward (the gates need 1.0)
    import shutil

    tasks = tmp_path / "tasks"
    for name in ("hello-a", "hello-half"):
        shutil.copytree(EXAMPLES / "hello-world", tasks / name)
        (tasks / name / "tests" / "rubric.json").write_text(json.dumps(RUBRIC))
    (tasks / "hello-half" / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\necho 0.5 > /logs/verifier/reward.txt\n"
    )
    secret = "sk-ant-api03-" + "Q" * 40
    # when bench run is given a reviewer model, a reviewer timeout and a secret reviewer env
    run = run_bench(
        run_args(
            "oracle",
            "--quiet",
            "--reviewer-model",
            "mock/oracle",
            "--reviewer-agent",
            "claude",
            "--reviewer-timeout-sec",
            "300",
            "--reviewer-agent-env",
            f"REVIEW_NOTE={secret}",
            tasks=tasks,
        ),
        env=bench_env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    job = next(p for p in (tmp_path / "jobs").iterdir() if p.is_dir())
    # then each attempt keeps the solver's result, then its scoring, and its reward is gated
    rewards = {}
    for name, solver_reward, gated, band in (
        ("hello-a", 1.0, 1.0, "publishable"),
        ("hello-half", 0.5, 0.0, "not_publishable"),
    ):
        attempt = next(job.glob(f"{name}__*"))
        assert (
            json.loads((attempt / "solver.json").read_text())["rewards"]["reward"] == solver_reward
        )
        scoring = json.loads((attempt / "scoring" / f"{attempt.name}.json").read_text())
        assert (scoring["gated_quality"], scoring["band"]) == (gated, band)
        result = json.loads((attempt / "result.json").read_text())
        assert result["rewards"]["reward"] == gated
        assert result["scoring"]["solver_reward"] == solver_reward
        # the reviewer's rollout is its own, named as such, with its own cost
        reviewer = next((attempt / "scoring" / "run").glob(f"{name}__*"))
        reviewed = json.loads((reviewer / "result.json").read_text())
        assert (reviewed["purpose"], reviewed["parent_rollout"]) == ("reviewer", attempt.name)
        assert scoring["reviewer_usage"]["cost_usd"] > 0
        rewards[name] = gated
        # and the review happened before the job ended (its line before the job's last ones)
        assert run.stdout.index(f"[{name}] reviewed: {band}") < run.stdout.index("Job complete:")
    # the reviewer's timeout reached its task, and its secret reached no file
    toml = next(job.glob("hello-a__*/scoring/tasks/*/task.toml"))
    assert "timeout_sec = 300" in toml.read_text()
    evaluation = json.loads((job / "evaluation.json").read_text())
    assert evaluation["reviewer"]["agent_env_keys"] == ["REVIEW_NOTE"]
    leaks = [p for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert not leaks
    # the summary counts the two solver trials with their gated rewards, no reviewer cost
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["total"], summary["passed"], summary["failed"]) == (2, 1, 1)
    assert not summary.get("total_cost_usd")


def test_a_review_from_the_dashboard_runs_out_of_the_request(tmp_path, bench_env, docker_client):
    # given a scored job, and the request the job page's Review button hands the launcher
    import subprocess
    import sys

    from runs.operations.process import Request

    run = run_bench(
        run_args("oracle", "--quiet", tasks=EXAMPLES, include=["hello-world"]),
        env=bench_env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    job = next(p for p in (tmp_path / "jobs").iterdir() if p.is_dir())
    body = {"trials": ["hello-world"], "agent": "claude", "model": "mock/oracle", "rubric": RUBRIC}
    # when `bench _operate review` runs it
    done = subprocess.run(
        [sys.executable, "-m", "benchflow_site.cli", "_operate", "review"],
        input=Request("review", str(job), body, "olga").to_json(),
        env=bench_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # then the trial's Rubric tab has its review
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Reviewed 1 of 1 trials" in done.stdout
    attempt = next(job.glob("hello-world__*"))
    assert json.loads((attempt / "review.json").read_text())["band"] == "publishable"
