"""Job caps end to end in real Docker sandboxes: each cap's example from the seed page, as a user sees it.

Script agents spend through the model proxy's offline `mock` provider, so cost and tokens are real
proxy accounting, deterministic and priced from proxy/prices.json.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from runs.jobs.console import USD_UNKNOWN_WARNING
from tests.conftest import (
    job_dirs,
    make_agent,
    only_result,
    results_of,
    run_args,
    run_bench,
    write_task,
)

pytestmark = pytest.mark.docker

PYTHON_IMAGE = "FROM python:3.11-slim\nWORKDIR /app\n"
PASSES = "echo 1 > /logs/verifier/reward.txt\n"
NOT_FAILURES = "(not counted as failures; resume the job to run them)"

# One chat completion through the proxy with a long prompt: about 2,000 tokens, about $0.002 at mock prices.
SPEND = """#!/bin/bash
python3 -c '
import json, os, urllib.request
body = json.dumps({"model": os.environ["BENCHFLOW_MODEL"],
                   "messages": [{"role": "user", "content": "x" * 8000}]}).encode()
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body,
                             headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                                      "Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=60).read().decode())
'
"""


def owned_containers(client, job: Path) -> list:
    return client.containers.list(all=True, filters={"label": f"benchflow.job_dir={job.resolve()}"})


def make_tasks(tmp_path: Path, names: list[str], dockerfile: str = PYTHON_IMAGE) -> None:
    for name in names:
        write_task(tmp_path / "tasks", name, dockerfile=dockerfile, test_sh=PASSES)


def summary_of(job: Path) -> dict:
    return json.loads((job / "summary.json").read_text())


def attempt_folders(job: Path, task: str) -> list[Path]:
    return sorted(job.glob(f"{task}__*"))


def cancelled_by_cap(job: Path) -> list[dict]:
    """The timing.json of every attempt a job cap cancelled; such an attempt has no result.json."""
    records = [json.loads(p.read_text()) for p in sorted(job.glob("*__*/timing.json"))]
    return [r for r in records if r.get("cancelled_by")]


def index_of(lines: list[str], prefix: str) -> int:
    found = [i for i, line in enumerate(lines) if line.startswith(prefix)]
    assert found, f"no line starts with {prefix!r}:\n" + "\n".join(lines)
    return found[0]


def script_args(agent: Path, *flags: str, tasks: str = "tasks") -> list[str]:
    """`bench run` of the script agent `agent` on the folder `tasks`, into ./jobs, with `flags`."""
    return run_args(f"script:{agent}", *flags, tasks=tasks)


def spend_run(tmp_path: Path, bench_env: dict, *caps: str, fresh: bool = False):
    agent = tmp_path / "spend.sh"
    args = script_args(agent, "-m", "mock/oracle", "-j", "1", *caps)
    return run_bench(args + (["--fresh"] if fresh else []), env=bench_env, cwd=tmp_path)


def assert_one_of_two_ran(
    proc, job: Path, reached: str, cap_key: str, cap: float
) -> tuple[dict, str]:
    """The seed's first example: the cap stops the job after one trial of two; returns (result, other task)."""
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    result = only_result(job)
    ran = result["task_name"]
    [other] = {"alpha", "beta"} - {ran}
    assert attempt_folders(job, other) == []
    # the cap line comes before the trial's own line, as in the seed's output
    line = f"{reached}; stopping: no new rollouts, 0 running trial(s) cancelled"
    assert out.count(line) == 1, proc.stdout
    assert out.index(line) < index_of(out, f"[PASS] {ran} (reward=1.00, tools=0)")
    assert index_of(
        out, "Job complete: 1/1 (100.0%) run, 1/2 (50.0%) of the plan, mean_reward=1.00, errors=0, "
    )
    assert (
        "• Score: 1/1 run (100.0%), mean reward 1.00, errors=0; 1 of 2 planned tasks not run (budget), "
        "so 1/2 (50.0%) of the plan"
    ) in out
    assert f"Budget: {reached}; 0 running trial(s) cancelled, 1 not started {NOT_FAILURES}" in out
    assert "Outcomes: 1 scored (1 passed, 0 failed), 0 unscored, 0 errored" in out
    # summary.json: the budget block, and the trial kept from running is no failure
    summary = summary_of(job)
    budget = summary["budget"]
    assert budget["caps"] == {
        "max_cost_usd": None,
        "max_sandbox_seconds": None,
        "max_tokens": None,
        "max_rollouts": None,
        cap_key: cap,
    }
    usage = result["agent_result"]
    assert budget["spent"]["cost_usd"] == round(usage["cost_usd"], 6)
    assert budget["spent"]["tokens"] == usage["total_tokens"]
    assert budget["spent"]["rollouts"] == 1
    assert budget["stopped"] is True and budget["reason"] == reached
    assert budget["cancelled"] == [] and budget["not_started"] == [other]
    assert (summary["total"], summary["passed"], summary["failed"], summary["errored"]) == (
        1,
        1,
        0,
        0,
    )
    assert summary["planned"] == 2 and summary["not_run"] == [other]
    return result, other


def assert_rerun_stops_at_once(proc, job: Path, reached: str, other: str) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == (
        f"Resuming into existing job directory: {job.name} (finished tasks are reused; pass a new "
        "job_name, or --fresh on the CLI, for a new run)"
    )
    assert (
        "Job: 2 tasks, 1 done, 1 to run (concurrency=1, warm pool: up to 0 prepared sandboxes)"
        in out
    )
    assert f"{reached}; stopping: no new rollouts, 0 running trial(s) cancelled" in out
    assert not any(line.startswith(("[PASS]", "[FAIL]", "[ERR]")) for line in out), proc.stdout
    assert any(
        line.endswith("1 of 2 planned tasks not run (budget), so 1/2 (50.0%) of the plan")
        for line in out
    )
    assert attempt_folders(job, other) == []
    assert len(results_of(job)) == 1
    assert summary_of(job)["budget"]["not_started"] == [other]


def assert_fresh_runs_both(proc, jobs: Path, first: Path) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "budget reached" not in proc.stdout
    [new] = [j for j in job_dirs(jobs) if j != first]
    assert sorted(r["task_name"] for r in results_of(new)) == ["alpha", "beta"]
    summary = summary_of(new)
    assert summary["total"] == 2 and summary["not_run"] == []
    assert summary["budget"]["stopped"] is False and summary["budget"]["not_started"] == []


def test_cost_cap_far_below_one_trial_stops_after_it_and_a_rerun_stops_at_once(
    docker_client, bench_env, tmp_path
):
    # given two tasks and an agent that spends about $0.002 each, under a $0.0001 cap at -j 1
    make_tasks(tmp_path, ["alpha", "beta"])
    make_agent(tmp_path, "spend.sh", SPEND)
    # when
    proc = spend_run(tmp_path, bench_env, "--max-cost-usd", "0.0001")
    # then exactly one trial ran: a job passes a cost cap by about one trial's cost at -j 1
    [job] = job_dirs(tmp_path / "jobs")
    cost = results_of(job)[0]["agent_result"]["cost_usd"]
    assert cost > 10 * 0.0001
    reached = f"budget reached: ${cost:.4f} USD spent of a $0.0001 cap"
    _, other = assert_one_of_two_ran(proc, job, reached, "max_cost_usd", 0.0001)
    assert USD_UNKNOWN_WARNING not in proc.stderr

    # when the same command runs again: it resumes, and the same cap stops it at once
    rerun = spend_run(tmp_path, bench_env, "--max-cost-usd", "0.0001")
    assert_rerun_stops_at_once(rerun, job, reached, other)

    # when a new job gets a cap that fits: it runs every task
    fresh = spend_run(tmp_path, bench_env, "--max-cost-usd", "1", fresh=True)
    assert_fresh_runs_both(fresh, tmp_path / "jobs", job)


def test_token_cap_stops_after_one_trial_with_thousands_separators(
    docker_client, bench_env, tmp_path
):
    # given two tasks and an agent that spends about 2,000 tokens each, under a 1,000-token cap
    make_tasks(tmp_path, ["alpha", "beta"])
    make_agent(tmp_path, "spend.sh", SPEND)
    # when
    proc = spend_run(tmp_path, bench_env, "--max-tokens", "1000")
    # then
    [job] = job_dirs(tmp_path / "jobs")
    tokens = results_of(job)[0]["agent_result"]["total_tokens"]
    assert tokens > 1000
    reached = f"budget reached: {tokens:,} tokens spent of a 1,000 cap"
    assert re.fullmatch(r"budget reached: \d,\d{3} tokens spent of a 1,000 cap", reached)
    _, other = assert_one_of_two_ran(proc, job, reached, "max_tokens", 1000)

    rerun = spend_run(tmp_path, bench_env, "--max-tokens", "1000")
    assert_rerun_stops_at_once(rerun, job, reached, other)

    fresh = spend_run(tmp_path, bench_env, "--max-tokens", "1000000", fresh=True)
    assert_fresh_runs_both(fresh, tmp_path / "jobs", job)


SECONDS_LINE = re.compile(
    r"budget reached: (\d+\.\d) sandbox-seconds spent of a 10\.0 cap; "
    r"stopping: no new rollouts, (\d+) running trial\(s\) cancelled"
)


def test_sandbox_seconds_cap_cancels_running_trials_and_leaves_no_container(
    docker_client, bench_env, tmp_path
):
    # given two agents that would sleep five minutes, side by side, under a 10 s cap
    write_task(tmp_path / "tasks", "alpha", test_sh=PASSES)
    write_task(tmp_path / "tasks", "beta", test_sh=PASSES)
    agent = make_agent(tmp_path, "sleepy.sh", "#!/bin/bash\nsleep 300\n")
    command = script_args(agent, "-j", "2", "--max-sandbox-seconds", "10")
    # when
    proc = run_bench(command, env=bench_env, cwd=tmp_path)
    # then the running trials are cancelled at the cap, checked as they run (long before 5 minutes)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    [job] = job_dirs(tmp_path / "jobs")
    matches = [m for line in out if (m := SECONDS_LINE.fullmatch(line))]
    assert len(matches) == 1, proc.stdout
    spent, running = float(matches[0][1]), int(matches[0][2])
    assert 10.0 <= spent < 60.0 and running == 2
    reason = matches[0][0].split("; stopping:")[0]
    assert not any(line.startswith(("[PASS]", "[FAIL]", "[ERR]")) for line in out), proc.stdout
    assert index_of(
        out, "Job complete: 0/0 (0.0%) run, 0/2 (0.0%) of the plan, mean_reward=n/a, errors=0, "
    )
    assert (
        "✗ Score: 0/0 run (0.0%), errors=0; 2 of 2 planned tasks not run (budget), so 0/2 (0.0%) of the plan"
        in out
    )
    assert f"Budget: {reason}; 2 running trial(s) cancelled, 0 not started {NOT_FAILURES}" in out
    # cancelled trials leave no result.json (as BenchFlow); their timing.json says why, they are
    # listed apart, and are no failures
    for task in ("alpha", "beta"):
        [folder] = attempt_folders(job, task)
        assert not (folder / "result.json").exists()
        timing = json.loads((folder / "timing.json").read_text())
        assert (timing["cancelled"], timing["cancelled_by"]) == (True, reason)
        assert timing["total"] > 0
    summary = summary_of(job)
    budget = summary["budget"]
    assert budget["caps"]["max_sandbox_seconds"] == 10.0
    assert budget["spent"]["sandbox_seconds"] == spent and budget["spent"]["rollouts"] == 2
    assert budget["stopped"] is True and budget["reason"] == reason
    assert sorted(budget["cancelled"]) == ["alpha", "beta"] and budget["not_started"] == []
    assert (summary["total"], summary["failed"], summary["errored"]) == (0, 0, 0)
    assert sorted(summary["not_run"]) == ["alpha", "beta"]
    assert owned_containers(docker_client, job) == []
    # bench results lists them apart too, not as attempted or errored
    shown = run_bench(["results", str(job)], env=bench_env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert (
        "Counted:   0 trials attempted, 0 scored (0 passed), 0 assessment errors, 0 unscored, "
        "0 execution errors"
    ) in shown.stdout
    assert re.search(
        r"Not run:   2 trials a job cap kept from running, not counted as failures: "
        r"(alpha|beta) \(cancelled\), (alpha|beta) \(cancelled\)",
        shown.stdout,
    ), shown.stdout
    assert (
        "(0 needed a retry, 0 interrupted)" in shown.stdout and "infrastructure" not in shown.stdout
    ), shown.stdout

    # when the same command runs again: it resumes, and with the same cap stops at once
    rerun = run_bench(command, env=bench_env, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    again = rerun.stdout.splitlines()
    assert again[0].startswith(f"Resuming into existing job directory: {job.name} ")
    assert [len(attempt_folders(job, t)) for t in ("alpha", "beta")] == [1, 1], (
        "the rerun started trials again"
    )
    [m] = [m for line in again if (m := SECONDS_LINE.fullmatch(line))]
    assert float(m[1]) >= 10.0 and m[2] == "0"
    assert summary_of(job)["budget"]["not_started"] == ["alpha", "beta"]
    assert owned_containers(docker_client, job) == []


def test_rollout_cap_lets_running_trials_finish_and_starts_no_more(
    docker_client, bench_env, tmp_path
):
    # given three tasks at -j 2 and a cap of two rollouts
    make_tasks(
        tmp_path, ["alpha", "beta", "gamma"], dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\n"
    )
    agent = make_agent(tmp_path, "brief.sh", "#!/bin/bash\nsleep 2\n")
    # when
    proc = run_bench(
        script_args(agent, "-j", "2", "--max-rollouts", "2"),
        env=bench_env,
        cwd=tmp_path,
    )
    # then the cap is met at the second start; both started trials finish and are scored
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    [job] = job_dirs(tmp_path / "jobs")
    results = results_of(job)
    ran = sorted(r["task_name"] for r in results)
    assert len(ran) == 2 and all(r["rewards"] == {"reward": 1.0} for r in results)
    [other] = {"alpha", "beta", "gamma"} - set(ran)
    assert attempt_folders(job, other) == []
    reached = "budget reached: 2 rollouts started of a 2 cap"
    line = f"{reached}; stopping: no new rollouts, 2 running trial(s) finish"
    assert out.count(line) == 1, proc.stdout
    for task in ran:
        assert out.index(line) < index_of(out, f"[PASS] {task} (reward=1.00, tools=0)")
    assert index_of(
        out, "Job complete: 2/2 (100.0%) run, 2/3 (66.7%) of the plan, mean_reward=1.00, errors=0, "
    )
    assert (
        "• Score: 2/2 run (100.0%), mean reward 1.00, errors=0; 1 of 3 planned tasks not run (budget), "
        "so 2/3 (66.7%) of the plan"
    ) in out
    assert f"Budget: {reached}; 0 running trial(s) cancelled, 1 not started {NOT_FAILURES}" in out
    assert "Outcomes: 2 scored (2 passed, 0 failed), 0 unscored, 0 errored" in out
    summary = summary_of(job)
    budget = summary["budget"]
    assert budget["caps"]["max_rollouts"] == 2 and budget["spent"]["rollouts"] == 2
    assert budget["stopped"] is True and budget["reason"] == reached
    assert budget["cancelled"] == [] and budget["not_started"] == [other]
    assert (summary["total"], summary["passed"], summary["errored"]) == (2, 2, 0)
    assert owned_containers(docker_client, job) == []


def test_a_rollout_without_a_usd_cost_warns_once_under_a_cost_cap(
    docker_client, bench_env, tmp_path
):
    # given one task that spends through the proxy and two whose image build fails, so their rollouts
    # end before the agent starts and report no cost
    make_tasks(tmp_path, ["good"])
    make_tasks(
        tmp_path,
        ["unbuildable-1", "unbuildable-2"],
        dockerfile="FROM debian:bookworm-slim\nRUN exit 3\n",
    )
    agent = make_agent(tmp_path, "spend.sh", SPEND)
    # when
    proc = run_bench(
        script_args(
            agent, "-m", "mock/oracle", "-j", "1", "--retry-attempts", "0", "--max-cost-usd", "1"
        ),
        env=bench_env,
        cwd=tmp_path,
    )
    # then
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the build errors are errors
    assert proc.stderr.count(USD_UNKNOWN_WARNING) == 1, proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    by_task = {r["task_name"]: r for r in results_of(job)}
    assert by_task["unbuildable-1"]["error_category"] == "image_build"
    assert by_task["unbuildable-1"]["agent_result"]["cost_usd"] is None
    assert by_task["unbuildable-2"]["agent_result"]["cost_usd"] is None
    budget = summary_of(job)["budget"]
    assert budget["spent"]["usd_unknown_trials"] == 2
    assert budget["spent"]["cost_usd"] == round(by_task["good"]["agent_result"]["cost_usd"], 6)
    assert budget["stopped"] is False and budget["not_started"] == []


def test_with_trials_each_repeat_is_a_job_with_its_own_cap(docker_client, bench_env, tmp_path):
    # given two tasks, two repeats, and a cost cap far below one trial's cost
    make_tasks(tmp_path, ["alpha", "beta"])
    agent = make_agent(tmp_path, "spend.sh", SPEND)
    # when
    proc = run_bench(
        script_args(
            agent, "-m", "mock/oracle", "-j", "1", "--trials", "2", "--max-cost-usd", "0.0001"
        ),
        env=bench_env,
        cwd=tmp_path,
    )
    # then each repeat reaches its own cap after one trial, rather than the first repeat's spend stopping the second
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    [job] = job_dirs(tmp_path / "jobs")
    results = results_of(job)
    assert sorted(r["trial_index"] for r in results) == [0, 1], proc.stdout
    reached = [line for line in out if line.startswith("budget reached: $")]
    assert len(reached) == 2, proc.stdout
    for line, result in zip(reached, sorted(results, key=lambda r: r["trial_index"]), strict=True):
        cost = result["agent_result"]["cost_usd"]
        assert line == (
            f"budget reached: ${cost:.4f} USD spent of a $0.0001 cap; "
            "stopping: no new rollouts, 0 running trial(s) cancelled"
        )
        assert out.index(line) < index_of(
            out, f"[PASS] {result['trial_name']} (reward=1.00, tools=0)"
        )
    ran = {r["trial_name"] for r in results}
    kept_out = sorted({"alpha", "beta", "alpha#1", "beta#1"} - ran)
    summary = summary_of(job)
    assert summary["total"] == 2 and summary["planned"] == 4
    assert sorted(summary["not_run"]) == kept_out
    assert sorted(summary["budget"]["not_started"]) == kept_out
    assert any(
        line.endswith("2 of 4 planned tasks not run (budget), so 2/4 (50.0%) of the plan")
        for line in out
    )


def test_an_errored_trial_whose_retry_the_rollout_cap_blocks_is_errored_not_not_started(
    docker_client, bench_env, tmp_path
):
    # given two tasks whose agent cannot run (exit 127, retried) and whose verifier writes no reward
    for name in ("a1", "b1"):
        write_task(tmp_path / "t2", name, test_sh="true\n")
    agent = make_agent(tmp_path, "fail127.sh", "#!/bin/bash\nexit 127\n")
    # when a cap of two rollouts runs out before their retries
    proc = run_bench(
        script_args(agent, "-j", "1", "--max-rollouts", "2", tasks="t2"),
        env=bench_env,
        cwd=tmp_path,
    )
    # then each ran once and counts as errored; neither is listed as not started
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    [job] = job_dirs(tmp_path / "jobs")
    assert sorted(r["trial_name"] for r in results_of(job)) == ["a1", "b1"]
    reached = "budget reached: 2 rollouts started of a 2 cap"
    assert (
        f"Budget: {reached}; 0 running trial(s) cancelled, 0 not started {NOT_FAILURES}; 2 errored trial(s) "
        "not retried (the cap stopped their retry; their last attempt counts)"
    ) in out
    assert "Outcomes: 0 scored (0 passed, 0 failed), 0 unscored, 2 errored" in out
    summary = summary_of(job)
    assert (summary["total"], summary["errored"], summary["not_run"]) == (2, 2, [])
    budget = summary["budget"]
    assert budget["not_started"] == [] and budget["cancelled"] == []
    assert sorted(budget["retries_stopped"]) == ["a1", "b1"]
    assert budget["spent"]["rollouts"] == 2


def started_folders(job: Path) -> list[Path]:
    return sorted(p for p in job.iterdir() if p.is_dir() and "__" in p.name)


def test_a_warm_pool_sandbox_that_never_ran_is_no_rollout_live_or_on_resume(
    docker_client, bench_env, tmp_path
):
    # given four tasks at -j 2 (one sandbox prepared ahead) and a cost cap of about one and a half trials
    names = ["alpha", "beta", "gamma", "delta"]
    make_tasks(tmp_path, names)
    agent = make_agent(tmp_path, "spend.sh", SPEND)
    base = script_args(agent, "-m", "mock/oracle", "-j", "2")
    # when
    proc = run_bench([*base, "--max-cost-usd", "0.003"], env=bench_env, cwd=tmp_path)
    # then every rollout counted is an attempt that started: a sandbox prepared and discarded leaves
    # no folder and no rollout
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    budget = summary_of(job)["budget"]
    assert budget["stopped"] is True, proc.stdout
    folders = started_folders(job)
    assert budget["spent"]["rollouts"] == len(folders), proc.stdout
    assert {f.name.split("__")[0] for f in folders}.isdisjoint(budget["not_started"])
    assert len(folders) + len(budget["not_started"]) == 4
    # bench results: the trials the cap kept from running are listed apart, not as errors
    shown = run_bench(["results", str(job)], env=bench_env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    kept = len(budget["cancelled"]) + len(budget["not_started"])
    ran = 4 - kept
    assert f"Counted:   {ran} trials attempted, {ran} scored ({ran} passed)" in shown.stdout, (
        shown.stdout
    )
    assert (
        "0 execution errors" in shown.stdout
        and f"100.0% of attempted ({ran}/{ran})" in shown.stdout
    )
    listed = shown.stdout.split("Not run:")[1].splitlines()[0]
    assert f" {kept} trials a job cap kept from running, not counted as failures: " in listed
    for name in budget["cancelled"]:
        assert f"{name} (cancelled)" in listed
    for name in budget["not_started"]:
        assert f"{name} (not started)" in listed

    # when it resumes with room for exactly one more rollout
    cap = budget["spent"]["rollouts"] + 1
    rerun = run_bench([*base, "--max-rollouts", str(cap)], env=bench_env, cwd=tmp_path)
    # then one more trial starts, and the job's rollouts are its attempt folders
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    again = summary_of(job)["budget"]
    assert len(started_folders(job)) == len(folders) + 1, rerun.stdout
    assert again["spent"]["rollouts"] == cap
    assert again["reason"] == f"budget reached: {cap} rollouts started of a {cap} cap"


def test_what_a_cancelled_trial_spent_counts_in_the_cap_the_cost_line_and_on_resume(
    docker_client, bench_env, tmp_path
):
    # given two agents that each call the model once and then work on, under a 10 s sandbox-seconds cap
    make_tasks(tmp_path, ["alpha", "beta"])
    agent = make_agent(tmp_path, "spend-then-sleep.sh", SPEND + "sleep 300\n")
    base = script_args(agent, "-m", "mock/oracle", "-j", "2")
    # when the cap cancels them both
    proc = run_bench([*base, "--max-sandbox-seconds", "10"], env=bench_env, cwd=tmp_path)
    # then no result.json; each timing.json records why and what the proxy counted for its agent, as
    # its trajectory does
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    assert results_of(job) == []
    records = cancelled_by_cap(job)
    assert len(records) == 2
    for task in ("alpha", "beta"):
        [folder] = attempt_folders(job, task)
        record = json.loads((folder / "timing.json").read_text())
        assert record["cancelled_by"].startswith("budget reached: ") and record["cancelled"] is True
        usage = record["agent_result"]
        assert usage["total_tokens"] > 1000 and usage["cost_usd"] > 0, record
        assert len((folder / "trajectory" / "llm_trajectory.jsonl").read_text().splitlines()) == 1
    tokens = sum(r["agent_result"]["total_tokens"] for r in records)
    cost = sum(r["agent_result"]["cost_usd"] for r in records)
    # the cap's spend and the Cost line count it
    summary = summary_of(job)
    assert summary["budget"]["spent"]["tokens"] == tokens
    assert summary["budget"]["spent"]["cost_usd"] == round(cost, 6)
    assert (summary["total"], summary["errored"]) == (0, 0)
    assert (summary["total_tokens"], summary["usage_coverage"]["budget_cancelled_attempts"]) == (
        tokens,
        2,
    )
    assert f"Cost:      ${cost:.2f}, {tokens:,} tokens" in proc.stdout.splitlines(), proc.stdout
    # bench results lists them apart, not as attempted, errored or interrupted
    shown = run_bench(["results", str(job)], env=bench_env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert (
        "Counted:   0 trials attempted" in shown.stdout and "0 execution errors" in shown.stdout
    ), shown.stdout
    assert re.search(
        r"Not run:   2 trials a job cap kept from running, not counted as failures: "
        r"(alpha|beta) \(cancelled\), (alpha|beta) \(cancelled\)",
        shown.stdout,
    ), shown.stdout
    assert "0 interrupted" in shown.stdout, shown.stdout

    # when it resumes under a token cap of exactly what they spent: it stops at once
    rerun = run_bench([*base, "--max-tokens", str(tokens)], env=bench_env, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    line = f"budget reached: {tokens:,} tokens spent of a {tokens:,} cap; stopping: no new rollouts, 0 running trial(s) cancelled"
    assert line in rerun.stdout.splitlines(), rerun.stdout
    assert len(started_folders(job)) == 2 and results_of(job) == []
    assert summary_of(job)["budget"]["spent"]["tokens"] == tokens


def test_a_warm_pool_trial_clock_leaves_out_its_wait_for_a_slot(docker_client, bench_env, tmp_path):
    # given three tasks at -j 2: the third's sandbox is prepared while the first two run for 4 s
    make_tasks(
        tmp_path, ["alpha", "beta", "gamma"], dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\n"
    )
    agent = make_agent(tmp_path, "slow.sh", "#!/bin/bash\nsleep 4\n")
    # when
    proc = run_bench(
        script_args(agent, "-j", "2", "--max-sandbox-seconds", "600"),
        env=bench_env,
        cwd=tmp_path,
    )
    # then each trial's timing.total is its set-up and its run, not the time its sandbox waited
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    results = results_of(job)
    assert len(results) == 3
    waits = []
    for result in results:
        timing = result["timing"]
        phases = sum(
            timing.get(k) or 0.0
            for k in ("environment_setup", "agent_setup", "agent_execution", "verifier")
        )
        assert timing["total"] < phases + 1.0, timing
        span = datetime.fromisoformat(result["finished_at"]) - datetime.fromisoformat(
            result["started_at"]
        )
        waits.append(span.total_seconds() - timing["total"])
    assert max(waits) >= 2.0, waits  # one sandbox was ready long before its slot
    # and the sandbox-seconds cap counts the same seconds
    assert summary_of(job)["budget"]["spent"]["sandbox_seconds"] == round(
        sum(r["timing"]["total"] for r in results), 1
    )
