"""Scale-out end to end: two real `bench worker` processes on a real Redis, real Docker sandboxes,
and the faults: a worker killed with kill -9 mid-attempt, Redis restarted mid-job, the coordinator
killed and the job resumed. Script agents spend through the offline `mock` model, so tokens are
real proxy accounting (each worker serves the proxy for the attempts it runs)."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest

from tests.conftest import job_dirs, make_agent, only_result, results_of, run_args, write_task
from tests.e2e.scaleout import Cluster, PrivateRedis, wait_for, worker_name

pytestmark = [pytest.mark.docker, pytest.mark.database]

SLIM = "FROM debian:bookworm-slim\nWORKDIR /app\n"
PYTHON = "FROM python:3.11-slim\nWORKDIR /app\n"
PASSES = "echo 1 > /logs/verifier/reward.txt\n"
FOUR = ["alpha", "beta", "gamma", "delta"]

# One chat completion through the worker's proxy (about 2,000 tokens), then `sleep $1`-ish.
SPEND_THEN_SLEEP = """#!/bin/bash
python3 -c '
import json, os, urllib.request
body = json.dumps({"model": os.environ["BENCHFLOW_MODEL"],
                   "messages": [{"role": "user", "content": "x" * 8000}]}).encode()
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body,
                             headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                                      "Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=60).read().decode()[:80])
'
sleep SECONDS
"""

# Four calls of about 2,000 tokens each, until the proxy refuses one (a per-trial budget).
SPEND_FOUR_TIMES = """#!/bin/bash
python3 -c '
import json, os, urllib.error, urllib.request
body = json.dumps({"model": os.environ["BENCHFLOW_MODEL"],
                   "messages": [{"role": "user", "content": "x" * 8000}]}).encode()
for n in range(4):
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body,
                                 headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                                          "Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=60).read()
        print("call", n, "answered")
    except urllib.error.HTTPError as exc:
        print("call", n, "refused", exc.code)
        break
'
"""


def sleepers(root: Path, names: list[str], seconds: float) -> None:
    for name in names:
        write_task(
            root / "tasks", name, dockerfile=SLIM, test_sh=PASSES, solve_sh=f"sleep {seconds}\n"
        )


def spenders(root: Path, names: list[str]) -> None:
    for name in names:
        write_task(root / "tasks", name, dockerfile=PYTHON, test_sh=PASSES)


def spend_agent(root: Path, sleep_s: float) -> Path:
    return make_agent(root, "spend.sh", SPEND_THEN_SLEEP.replace("SECONDS", str(sleep_s)))


def summary_of(job: Path) -> dict:
    return json.loads((job / "summary.json").read_text())


def trial_lines(out: str) -> list[str]:
    return sorted(
        line for line in out.splitlines() if line.startswith(("[PASS]", "[FAIL]", "[ERR"))
    )


def files_of(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def attempt_folders(job: Path) -> list[Path]:
    return sorted(p for p in job.iterdir() if p.is_dir() and "__" in p.name)


def containers_of(docker_client, job: Path) -> list:
    label = f"benchflow.job_dir={job.resolve()}"
    # sparse: no inspect of each one listed, which fails when one is removed meanwhile
    return docker_client.containers.list(all=True, filters={"label": label}, sparse=True)


def attempt_rows(cluster: Cluster, job: Path) -> dict[str, int]:
    """Attempts per trial in the dashboard's index."""
    rows = cluster.query(
        "SELECT t.name, COUNT(a.id) FROM runs_trial t JOIN runs_job j ON j.id = t.job_id "
        "LEFT JOIN runs_attempt a ON a.trial_id = t.id WHERE j.path = %s GROUP BY t.name",
        str(job.resolve()),
    )
    return {name: n for name, n in rows}


SAME_SUMMARY_KEYS = (
    "total",
    "passed",
    "failed",
    "errored",
    "verifier_errored",
    "score",
    "mean_reward",
    "planned",
    "total_tokens",
    "agent",
    "model",
    "environment",
)


def test_a_jobs_attempts_spread_over_two_workers_and_end_as_they_do_in_process(
    docker_client, cluster, tmp_path
):
    # given four tasks whose solution takes 3 s, and two workers of two slots each
    sleepers(tmp_path, FOUR, 3)
    first, second = cluster.start_worker(2), cluster.start_worker(2)
    # when the job runs at -j 4 (auto: workers are up)
    proc = cluster.bench(*run_args("oracle", "-j", "4"))
    # then the four ran at once, two on each worker, and each worker said where
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    assert "Attempts run on 2 worker(s)" in proc.stdout, proc.stdout
    on_first, on_second = cluster.started(first), cluster.started(second)
    assert len(on_first) == 2 and len(on_second) == 2, (on_first, on_second)
    assert sorted(on_first + on_second) == sorted(FOUR)
    for worker, trials in ((first, on_first), (second, on_second)):
        for trial in trials:
            assert f"ended {trial} (" in cluster.log(worker)
    leases = cluster.leases(job)
    assert sorted(t for t, *_ in leases) == sorted(FOUR)
    assert {s for _, s, _, _ in leases} == {"finished"}
    assert len({w for _, _, w, _ in leases}) == 2
    # and the job folder, console lines and summary are those of the same job in process
    local = cluster.bench(*run_args("oracle", "-j", "4", "--workers", "off", jobs_dir="local"))
    assert local.returncode == 0, local.stdout + local.stderr
    assert "Attempts run on" not in local.stdout
    [here] = job_dirs(tmp_path / "local")
    assert trial_lines(proc.stdout) == trial_lines(local.stdout)
    remote_summary, local_summary = summary_of(job), summary_of(here)
    for key in SAME_SUMMARY_KEYS:
        assert remote_summary.get(key) == local_summary.get(key), key
    assert sorted(remote_summary) == sorted(local_summary)
    remote_folders, local_folders = attempt_folders(job), attempt_folders(here)
    assert len(remote_folders) == len(local_folders) == 4
    for remote, local_folder in zip(remote_folders, local_folders, strict=True):
        assert files_of(remote) == files_of(local_folder)
        remote_result = json.loads((remote / "result.json").read_text())
        local_result = json.loads((local_folder / "result.json").read_text())
        assert sorted(remote_result) == sorted(local_result)
        assert remote_result["rewards"] == local_result["rewards"] == {"reward": 1.0}
    assert not (job / ".lost").exists()
    assert containers_of(docker_client, job) == []


def test_a_worker_prepares_ahead_within_j_and_hands_back_what_another_worker_could_start(
    docker_client, cluster, tmp_path
):
    # given three tasks of 10 s at -j 3 and one worker of one slot that prepares two ahead: it
    # takes all three, runs one and holds two prepared
    sleepers(tmp_path, ["one", "two", "three"], 10)
    first = cluster.start_worker(1, ahead=2)
    run = cluster.bench_in_background(*run_args("oracle", "-j", "3"))
    wait_for(lambda: cluster.log(first).count("] started ") == 1, 120, "one started")
    time.sleep(1.5)  # the other two are claimed and prepared meanwhile
    assert cluster.log(first).count("] started ") == 1  # one slot: one runs
    # when a second worker of one slot comes up
    second = cluster.start_worker(1, ahead=0)
    out, err = run.communicate(timeout=300)
    # then the first gave back one it held prepared, and the second started it at once
    assert run.returncode == 0, out + err
    assert "given back to the queue before it started" in cluster.log(first), cluster.log(first)
    on_first, on_second = cluster.started(first), cluster.started(second)
    assert len(on_second) >= 1 and sorted(on_first + on_second) == ["one", "three", "two"]
    [job] = job_dirs(tmp_path / "jobs")
    assert len(attempt_folders(job)) == 3  # the prepared sandbox given back left no folder
    summary = summary_of(job)
    assert (summary["passed"], summary["n_attempts"]) == (3, 3)
    # and a worker never ran more than its slot: its attempts' runs do not overlap
    spans = cluster.lease_query(
        "SELECT w.name, l.started_at, l.finished_at FROM runs_lease l JOIN runs_worker w "
        "ON w.id = l.worker_id WHERE l.job_path = %s AND l.state = 'finished'",
        str(job.resolve()),
    )
    by_worker: dict[str, list] = {}
    for name, a, b in spans:
        by_worker.setdefault(name, []).append((str(a), str(b)))
    for runs in by_worker.values():
        runs.sort()
        assert all(b1 <= a2 for (_, b1), (a2, _) in pairwise(runs)), runs
    wait_for(lambda: containers_of(docker_client, job) == [], 30, "no container of the job")


def test_a_jobs_j_holds_across_workers_that_have_more_slots(docker_client, cluster, tmp_path):
    # given two workers of two slots each (and two prepared ahead), and five tasks of 2 s at -j 2
    names = ["a", "b", "c", "d", "e"]
    sleepers(tmp_path, names, 2)
    cluster.start_worker(2), cluster.start_worker(2)
    proc = cluster.bench(*run_args("oracle", "-j", "2"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    # then at no moment did more than two of the job's attempts run
    spans = cluster.lease_query(
        "SELECT l.started_at, l.finished_at FROM runs_lease l WHERE l.job_path = %s "
        "AND l.state = 'finished'",
        str(job.resolve()),
    )
    assert len(spans) == 5
    moments = sorted([(str(a), 1) for a, _ in spans] + [(str(b), -1) for _, b in spans])
    running = most = 0
    for _, step in moments:  # an end and a start at the same instant: the end first
        running += step
        most = max(most, running)
    assert most == 2, spans
    assert summary_of(job)["passed"] == 5


def test_ctrl_c_on_a_worker_lets_its_attempt_finish_and_takes_nothing_more(
    docker_client, cluster, tmp_path
):
    # given two workers of one slot each running a job of two 6 s tasks at -j 2
    sleepers(tmp_path, ["left", "right"], 6)
    first, second = cluster.start_worker(1, ahead=0), cluster.start_worker(1, ahead=0)
    run = cluster.bench_in_background(*run_args("oracle", "-j", "2"))
    wait_for(lambda: len(cluster.started(first) + cluster.started(second)) == 2, 120, "both")
    [mine] = cluster.started(first)
    # when the first worker gets Ctrl-C mid-attempt
    first.send_signal(signal.SIGINT)
    # then it serves no queue from then on, finishes its attempt and exits
    name = worker_name(cluster, first)
    wait_for(
        lambda: (
            cluster.lease_query("SELECT queues FROM runs_worker WHERE name = %s", name)[0][0]
            in ("[]", [])
        ),
        30,
        "the worker to take nothing more",
    )
    assert first.wait(60) == 0, cluster.log(first)
    assert f"ended {mine} (" in cluster.log(first) and "reward 1" in cluster.log(first)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, out + err
    [job] = job_dirs(tmp_path / "jobs")
    summary = summary_of(job)
    assert (summary["passed"], summary["n_attempts"]) == (2, 2)
    assert not (job / ".lost").exists()


def test_a_worker_killed_mid_attempt_its_attempts_run_once_more_elsewhere_and_count_once(
    docker_client, cluster, tmp_path
):
    # given four tasks whose agent spends about 2,000 tokens and then works 8 s, two workers, and
    # a token cap far above what the job spends (so the budget counts every rollout)
    spenders(tmp_path, FOUR)
    agent = spend_agent(tmp_path, 8)
    doomed, survivor = cluster.start_worker(2), cluster.start_worker(2)
    args = run_args(f"script:{agent}", "-m", "mock/oracle", "-j", "4", "--max-tokens", "1000000")
    run = cluster.bench_in_background(*args)
    # when one worker is killed with kill -9 while its two attempts run
    wait_for(lambda: len(cluster.started(doomed)) == 2, 120, "the first worker to start two")
    time.sleep(2)
    lost = cluster.started(doomed)
    doomed_name = worker_name(cluster, doomed)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(10)
    out, err = run.communicate(timeout=300)
    # then the job completes, every trial passed once
    assert run.returncode == 0, out + err
    [job] = job_dirs(tmp_path / "jobs")
    for trial in lost:
        assert (
            f"[{trial}] worker {doomed_name} stopped renewing its lease: the attempt runs again "
            "on another worker" in out
        ), out
    # the lost attempts ran again on the other worker, once each
    again = Counter(cluster.started(survivor))
    assert all(again[trial] == 1 for trial in lost), again
    results = results_of(job)
    assert sorted(r["trial_name"] for r in results) == sorted(FOUR)
    assert len(attempt_folders(job)) == 4
    assert sorted(p.name.split("__")[0] for p in (job / ".lost").iterdir()) == sorted(lost)
    # nothing counted twice: budget, usage and summary hold what the four results say
    summary = summary_of(job)
    assert (summary["total"], summary["passed"]) == (4, 4)
    tokens = sum(r["agent_result"]["total_tokens"] for r in results)
    assert tokens > 4 * 1000
    assert summary["total_tokens"] == tokens
    assert summary["budget"]["spent"]["tokens"] == tokens
    assert summary["budget"]["spent"]["rollouts"] == summary["n_attempts"] == 4
    assert attempt_rows(cluster, job) == dict.fromkeys(FOUR, 1)
    for trial, state, worker, lost_runs in cluster.leases(job):
        assert state == "finished"
        assert worker == worker_name(cluster, survivor) or trial not in lost
        assert (doomed_name in lost_runs) == (trial in lost)
    # and no container is left: the other worker's sweep removed the dead one's
    wait_for(lambda: containers_of(docker_client, job) == [], 60, "no container of the job")


def test_a_token_cap_holds_across_workers(docker_client, cluster, tmp_path):
    # given eight tasks whose agent spends about 2,000 tokens each, on two workers at -j 4, under
    # a 5,000-token cap
    names = [f"t{i}" for i in range(8)]
    spenders(tmp_path, names)
    agent = spend_agent(tmp_path, 3)
    first, second = cluster.start_worker(2), cluster.start_worker(2)
    # when
    proc = cluster.bench(
        *run_args(f"script:{agent}", "-m", "mock/oracle", "-j", "4", "--max-tokens", "5000")
    )
    # then the cap stopped the job, as in process: no new rollouts once it was reached
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    assert cluster.started(first) and cluster.started(second)
    budget = summary_of(job)["budget"]
    assert budget["stopped"] is True and budget["reason"].startswith("budget reached: ")
    assert budget["not_started"], budget
    assert f"{budget['reason']}; stopping: no new rollouts" in proc.stdout
    # and what every worker's attempts spent counts once: finished results, and what the cap
    # cancelled (their timing.json)
    finished = [r["agent_result"]["total_tokens"] for r in results_of(job)]
    cancelled = [
        json.loads(p.read_text())["agent_result"]["total_tokens"]
        for p in job.glob("*__*/timing.json")
        if "cancelled_by" in json.loads(p.read_text())
    ]
    assert budget["spent"]["tokens"] == sum(finished) + sum(cancelled)
    assert budget["spent"]["tokens"] >= 5000
    assert budget["spent"]["rollouts"] == len(finished) + len(cancelled) < len(names)
    # the cancelled attempts' sandboxes are removed by their workers, in the background (once in
    # CI one was still listed after 30 s: this says which, in what state, and what the workers said)
    try:
        wait_for(lambda: containers_of(docker_client, job) == [], 60, "no container of the job")
    except AssertionError:
        left = [
            (c.name, c.status, c.labels.get("benchflow.trial"))
            for c in docker_client.containers.list(
                all=True, filters={"label": f"benchflow.job_dir={job.resolve()}"}
            )
        ]
        logs = "\n".join(cluster.log(w)[-3000:] for w in (first, second))
        raise AssertionError(f"containers left: {left}\nworkers' logs (ends):\n{logs}") from None


def test_a_per_trial_budget_holds_on_a_worker_as_in_process(docker_client, cluster, tmp_path):
    # given a task whose agent calls the model four times, about 2,000 tokens each, under a
    # 3,000-token per-trial budget
    spenders(tmp_path, ["alpha"])
    agent = make_agent(tmp_path, "spend4.sh", SPEND_FOUR_TIMES)
    cluster.start_worker(1)
    args = ["-m", "mock/oracle", "--token-budget", "3000"]
    # when it runs on the worker, and in process
    remote = cluster.bench(*run_args(f"script:{agent}", *args))
    local = cluster.bench(*run_args(f"script:{agent}", *args, "--workers", "off", jobs_dir="local"))
    # then the worker's proxy refused the call past the budget, as the one in process did
    assert remote.returncode == local.returncode, remote.stdout + remote.stderr
    assert "Attempts run on 1 worker(s)" in remote.stdout
    on_worker = only_result(job_dirs(tmp_path / "jobs")[0])
    in_process = only_result(job_dirs(tmp_path / "local")[0])
    assert on_worker["error_category"] == in_process["error_category"] == "trial_budget"
    assert on_worker["trial_budget"]["stopped_by"] == "tokens"
    for key in ("budget", "used", "stopped_by", "stopped_at", "refused_calls"):
        assert on_worker["trial_budget"][key] == in_process["trial_budget"][key], key
    assert on_worker["trial_budget"]["used"]["tokens"] >= 3000
    assert on_worker["agent_result"]["total_tokens"] == in_process["agent_result"]["total_tokens"]
    assert trial_lines(remote.stdout) == trial_lines(local.stdout)


def test_the_job_goes_on_when_redis_restarts_mid_job(
    docker_client, bench_env, bench_database, tmp_path
):
    # given a Redis of the test's own, two workers on it, and six tasks of 4 s at -j 4
    redis = PrivateRedis(tmp_path)
    redis.start()
    cluster = Cluster(bench_env, tmp_path, redis.url, bench_database)
    names = [f"t{i}" for i in range(6)]
    try:
        sleepers(tmp_path, names, 4)
        first, second = cluster.start_worker(2), cluster.start_worker(2)
        run = cluster.bench_in_background(*run_args("oracle", "-j", "4"))
        wait_for(
            lambda: len(cluster.started(first) + cluster.started(second)) >= 2, 120, "attempts"
        )
        # when Redis dies (nothing saved) and comes back 3 s later on the same port
        redis.stop()
        time.sleep(3)
        redis.start()
        out, err = run.communicate(timeout=300)
    finally:
        cluster.stop()
        redis.stop()
    # then the job finished every trial, each once
    assert run.returncode == 0, out + err
    [job] = job_dirs(tmp_path / "jobs")
    assert sorted(r["trial_name"] for r in results_of(job)) == sorted(names)
    assert len(attempt_folders(job)) == 6
    assert sorted(cluster.started(first) + cluster.started(second)) == sorted(names)
    summary = summary_of(job)
    assert (summary["total"], summary["passed"]) == (6, 6)
    wait_for(lambda: containers_of(docker_client, job) == [], 30, "no container of the job")


def test_a_killed_coordinator_is_resumed_without_rerunning_or_doubling_an_attempt(
    docker_client, cluster, tmp_path
):
    # given four tasks of 10 s, two workers, and a job at -j 2 (with a rollout cap far above it:
    # the budget counts every rollout)
    sleepers(tmp_path, FOUR, 10)
    first, second = cluster.start_worker(2), cluster.start_worker(2)
    run = cluster.bench_in_background(*run_args("oracle", "-j", "2", "--max-rollouts", "100"))
    wait_for(lambda: len(cluster.started(first) + cluster.started(second)) == 2, 120, "two")
    running = sorted(cluster.started(first) + cluster.started(second))
    # when `bench run` is killed with kill -9 while two attempts run on the workers
    time.sleep(1)
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=30)
    [job] = job_dirs(tmp_path / "jobs")
    resumed = cluster.bench("eval", "resume", str(job.relative_to(tmp_path)))
    # then the resume took over the two still running, ran the other two, and each ran once
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert (
        f"Still running on workers from the earlier run (not run again): {', '.join(running)}"
        in resumed.stdout
    ), resumed.stdout
    started = Counter(cluster.started(first) + cluster.started(second))
    assert started == Counter(FOUR), started
    assert sorted(r["trial_name"] for r in results_of(job)) == sorted(FOUR)
    assert len(attempt_folders(job)) == 4
    summary = summary_of(job)
    assert (summary["total"], summary["passed"]) == (4, 4)
    assert summary["n_attempts"] == 4
    assert summary["budget"]["spent"]["rollouts"] == 4
    assert not (job / ".lost").exists()
    wait_for(lambda: containers_of(docker_client, job) == [], 30, "no container of the job")
