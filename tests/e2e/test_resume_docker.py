"""Resume, interrupts and fresh jobs, as the seed page "Resume a stopped job" shows them."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, job_dirs, only_result, results_of, run_bench, write_task

pytestmark = pytest.mark.docker

JOB = r"\d{4}-\d\d-\d\d__\d\d-\d\d-\d\d"


def five_tasks(root: Path) -> Path:
    for i in range(5):
        write_task(
            root / "skillsbench-tasks", f"task-{i}", test_sh="echo 0 > /logs/verifier/reward.txt\n"
        )
    return root / "skillsbench-tasks"


def slow_agent(root: Path, seconds: int = 4) -> Path:
    path = root / "slow.sh"
    path.write_text(f'#!/bin/bash\nsleep {seconds}\necho "worked for {seconds} seconds"\n')
    path.chmod(0o755)
    return path


def start_bench(args: list[str], env: dict, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "benchflow_site.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_results(jobs: Path, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(list(jobs.glob("*/*/result.json"))) >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"{n} results did not appear in {jobs}")


def owned(docker_client, job: Path) -> list:
    """The job's containers still there (by its folder: job names can clash with other runs')."""
    return docker_client.containers.list(
        all=True, filters={"label": f"benchflow.job_dir={job.resolve()}"}
    )


@pytest.mark.parametrize(
    ("sig", "word", "code"),
    [(signal.SIGTERM, "Terminated (SIGTERM)", 143), (signal.SIGINT, "Interrupted (SIGINT)", 130)],
)
def test_a_stopped_run_cleans_up_and_the_rerun_resumes_only_what_did_not_finish(
    docker_client, bench_env, tmp_path, sig, word, code
):
    # given five tasks and a script agent that only waits
    five_tasks(tmp_path)
    slow_agent(tmp_path)
    cmd = [
        "run",
        "skillsbench-tasks",
        "-a",
        "script:./slow.sh",
        "-j",
        "1",
        "--jobs-dir",
        "jobs/stop",
    ]
    proc = start_bench(cmd, bench_env, tmp_path)
    # when two trials have finished and the third runs, the run is stopped
    wait_for_results(tmp_path / "jobs" / "stop", 2)
    time.sleep(1.5)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    # then
    assert proc.returncode == code, out + err
    [job] = job_dirs(tmp_path / "jobs" / "stop")
    assert f"{word}: stopped 1 running trial and removed its sandbox." in out
    assert f"Partial summary (what finished): ./jobs/stop/{job.name}/summary.json" in out
    assert f"Resume with: bench eval resume ./jobs/stop/{job.name}" in out
    assert (job / "summary.json").is_file()
    assert owned(docker_client, job) == []
    assert len(results_of(job)) == 2

    # when the same command runs again
    again = run_bench(cmd, env=bench_env, cwd=tmp_path)
    lines = again.stdout.splitlines()
    assert lines[0] == (
        f"Resuming into existing job directory: {job.name} (finished tasks are reused; pass a new job_name, "
        "or --fresh on the CLI, for a new run)"
    )
    assert (
        lines[1]
        == "Job: 5 tasks, 2 done, 3 to run (concurrency=1, warm pool: up to 0 prepared sandboxes)"
    )
    assert len(results_of(job)) == 5  # the three that had not finished, and no other
    assert {r["task_name"] for r in results_of(job)} == {f"task-{i}" for i in range(5)}

    # and a finished job rerun runs nothing
    third = run_bench(cmd, env=bench_env, cwd=tmp_path)
    assert "Job: 5 tasks, 5 done, 0 to run" in third.stdout
    assert len(results_of(job)) == 5


def test_a_second_signal_during_clean_up_is_ignored(docker_client, bench_env, tmp_path):
    five_tasks(tmp_path)
    slow_agent(tmp_path, seconds=20)
    proc = start_bench(
        ["run", "skillsbench-tasks", "-a", "script:./slow.sh", "-j", "2", "--jobs-dir", "jobs"],
        bench_env,
        tmp_path,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list((tmp_path / "jobs").glob("*/*/config.json")):
        time.sleep(0.2)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, out + err
    assert "Resume with: bench eval resume" in out
    [job] = job_dirs(tmp_path / "jobs")
    assert owned(docker_client, job) == []


def test_kill_9_then_rerun_reaps_the_orphans_and_runs_no_finished_trial_again(
    docker_client, bench_env, tmp_path
):
    five_tasks(tmp_path)
    slow_agent(tmp_path, seconds=30)
    fast = tmp_path / "skillsbench-tasks"
    cmd = ["run", str(fast), "-a", "script:./slow.sh", "-j", "2", "--jobs-dir", "jobs"]
    # a first run finishes nothing: killed hard while two agents run
    proc = start_bench(cmd, bench_env, tmp_path)
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline and len(list((tmp_path / "jobs").glob("*/*/sandbox.json"))) < 2
    ):
        time.sleep(0.2)
    proc.kill()
    proc.communicate(timeout=30)
    [job] = job_dirs(tmp_path / "jobs")
    assert len(owned(docker_client, job)) >= 1  # left behind by kill -9
    # the rerun (with a quick agent) reaps them and resumes
    slow_agent(tmp_path, seconds=0)
    again = run_bench(cmd, env=bench_env, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[0].startswith(
        f"Resuming into existing job directory: {job.name}"
    )
    assert "Job: 5 tasks, 0 done, 5 to run" in again.stdout
    assert owned(docker_client, job) == []
    finished = {r["task_name"]: r for r in results_of(job)}
    assert set(finished) == {f"task-{i}" for i in range(5)}
    # a third run: every trial has a reward now, nothing runs again
    third = run_bench(cmd, env=bench_env, cwd=tmp_path)
    assert "Job: 5 tasks, 5 done, 0 to run" in third.stdout
    assert len(results_of(job)) == 5


def test_oracle_then_nop_into_one_jobs_folder_starts_a_job_of_its_own(
    docker_client, bench_env, tmp_path
):
    first = run_bench(
        ["run", str(EXAMPLES), "-i", "hello-world", "-a", "oracle"], env=bench_env, cwd=tmp_path
    )
    assert first.returncode == 0, first.stdout + first.stderr
    [oracle_job] = job_dirs(tmp_path / "jobs")
    second = run_bench(
        ["run", str(EXAMPLES), "-i", "hello-world", "-a", "nop"], env=bench_env, cwd=tmp_path
    )
    new = [j for j in job_dirs(tmp_path / "jobs") if j != oracle_job]
    assert len(new) == 1
    assert second.stdout.splitlines()[0] == (
        f"Starting a new job {new[0].name}: the latest job in jobs ({oracle_job.name}) ran agent='oracle' "
        f"(this run: 'nop'). Its results stay in their own job; bench eval resume jobs/{oracle_job.name} "
        "finishes it with its own settings."
    )
    third = run_bench(
        ["run", str(EXAMPLES), "-i", "hello-world", "-a", "nop"], env=bench_env, cwd=tmp_path
    )
    assert "Job: 1 task, 1 done, 0 to run" in third.stdout
    assert len(job_dirs(tmp_path / "jobs")) == 2


def test_fresh_always_starts_a_new_job_and_job_names_one(docker_client, bench_env, tmp_path):
    args = ["run", str(EXAMPLES), "-i", "hello-world", "-a", "nop"]
    run_bench(args, env=bench_env, cwd=tmp_path)
    run_bench([*args, "--fresh"], env=bench_env, cwd=tmp_path)
    assert len(job_dirs(tmp_path / "jobs")) == 2
    named = run_bench([*args, "--job", "baseline"], env=bench_env, cwd=tmp_path)
    assert named.returncode == 0 and (tmp_path / "jobs" / "baseline" / "summary.json").is_file()
    again = run_bench([*args, "--job", "baseline"], env=bench_env, cwd=tmp_path)
    assert again.stdout.splitlines()[0].startswith(
        "Resuming into existing job directory: baseline "
    )
    assert "Job: 1 task, 1 done, 0 to run" in again.stdout


def test_eval_resume_reads_the_recorded_settings_and_asks_for_secrets_by_name(
    docker_client, bench_env, tmp_path
):
    write_task(tmp_path / "tasks", "t1", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    write_task(tmp_path / "tasks", "t2", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    agent = tmp_path / "agent.sh"
    agent.write_text('#!/bin/bash\n[ -n "$SERVICE_TOKEN" ] || exit 3\n')
    agent.chmod(0o755)
    # a job that ran one of two tasks
    run_bench(
        [
            "run",
            "tasks",
            "-i",
            "t1",
            "-a",
            f"script:{agent}",
            "--agent-env",
            "SERVICE_TOKEN=abc123secret",
            "--agent-env",
            "MODE=fast",
            "--job",
            "j",
        ],
        env=bench_env,
        cwd=tmp_path,
    )
    job = tmp_path / "jobs" / "j"
    evaluation = json.loads((job / "evaluation.json").read_text())
    assert evaluation["agent_env"] == {"MODE": "fast"}
    assert "abc123secret" not in (job / "evaluation.json").read_text()
    # resume without the secret: refused, naming it
    refused = run_bench(["eval", "resume", "jobs/j"], env=bench_env, cwd=tmp_path)
    assert refused.returncode == 2
    assert "SERVICE_TOKEN" in refused.stderr and "Traceback" not in refused.stderr
    # with it: resumes the recorded job (tasks and agent from evaluation.json)
    ok = run_bench(
        ["eval", "resume", "jobs/j", "--agent-env", "SERVICE_TOKEN=abc123secret"],
        env=bench_env,
        cwd=tmp_path,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "Job: 1 task, 1 done, 0 to run" in ok.stdout


def test_a_second_live_run_on_the_same_job_is_refused(docker_client, bench_env, tmp_path):
    five_tasks(tmp_path)
    slow_agent(tmp_path, seconds=15)
    cmd = ["run", "skillsbench-tasks", "-a", "script:./slow.sh", "-j", "1", "--job", "busy"]
    first = start_bench(cmd, bench_env, tmp_path)
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline
        and not (tmp_path / "jobs" / "busy" / "evaluation.json").exists()
    ):
        time.sleep(0.2)
    second = run_bench(cmd, env=bench_env, cwd=tmp_path)
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=60)
    assert second.returncode == 1
    assert "refusing to run" in second.stderr and "busy" in second.stderr
    assert re.search(r"pid \d+", second.stderr)


def test_not_a_job_folder_is_a_usage_error(bench_env, tmp_path):
    proc = run_bench(["eval", "resume", str(tmp_path)], env=bench_env, cwd=tmp_path)
    assert proc.returncode == 2 and "not a job folder" in proc.stderr
    proc = run_bench(["results", str(tmp_path)], env=bench_env, cwd=tmp_path)
    assert proc.returncode == 2 and "not a job folder" in proc.stderr


def test_results_prints_denominators_and_one_row_per_trial(docker_client, bench_env, tmp_path):
    run_bench(
        [
            "run",
            str(EXAMPLES),
            "-i",
            "hello-world",
            "-i",
            "count-words",
            "-a",
            "oracle",
            "--job",
            "r",
        ],
        env=bench_env,
        cwd=tmp_path,
    )
    table = run_bench(["results", "jobs/r"], env=bench_env, cwd=tmp_path)
    assert table.returncode == 0
    assert "hello-world" in table.stdout and "count-words" in table.stdout
    as_json = json.loads(
        run_bench(["results", "jobs/r", "--json"], env=bench_env, cwd=tmp_path).stdout
    )
    assert len(as_json["trials"]) == 2
    csv = run_bench(
        ["results", "jobs/r", "--csv", "--attempts", "all"], env=bench_env, cwd=tmp_path
    ).stdout
    assert csv.splitlines()[0].startswith("task,") and len(csv.strip().splitlines()) == 3
    assert os.path.isdir(tmp_path / "jobs" / "r")


def test_a_trial_a_job_cap_cancelled_is_run_again_on_resume(docker_client, bench_env, tmp_path):
    # given a trial a 3 s sandbox-seconds cap cancelled while its agent ran: no result.json
    write_task(tmp_path / "tasks", "alpha", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    agent = slow_agent(tmp_path, seconds=8)
    base = ["run", "tasks", "-a", f"script:{agent}", "-j", "1", "--jobs-dir", "jobs"]
    first = run_bench([*base, "--max-sandbox-seconds", "3"], env=bench_env, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    [job] = job_dirs(tmp_path / "jobs")
    [cancelled] = sorted(job.glob("alpha__*"))
    assert not (cancelled / "result.json").exists()
    timing = json.loads((cancelled / "timing.json").read_text())
    assert timing["cancelled"] is True and timing["cancelled_by"].startswith("budget reached: ")
    listed = run_bench(["results", str(job)], env=bench_env, cwd=tmp_path).stdout
    assert (
        "Not run:   1 trials a job cap kept from running, not counted as failures: alpha (cancelled)"
        in listed
    )
    # when the job resumes with room to finish it
    rerun = run_bench([*base, "--max-sandbox-seconds", "600"], env=bench_env, cwd=tmp_path)
    # then the trial runs again and its finished attempt counts, never the cancelled one
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert rerun.stdout.splitlines()[0].startswith(
        f"Resuming into existing job directory: {job.name} "
    )
    assert "Job: 1 task, 0 done, 1 to run" in rerun.stdout, rerun.stdout
    result = only_result(job)
    assert result["rewards"]["reward"] == 1.0 and len(list(job.glob("alpha__*"))) == 2
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["total"], summary["passed"], summary["not_run"]) == (1, 1, [])
    shown = run_bench(["results", str(job)], env=bench_env, cwd=tmp_path).stdout
    assert "Not run:" not in shown and "0 interrupted" in shown, shown
