"""`bench run` end to end in real Docker sandboxes: the foundation's behaviour as a user sees it."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from tests.conftest import (
    EXAMPLES,
    job_dirs,
    make_agent,
    only_result,
    results_of,
    run_args,
    run_bench,
    write_task,
)

pytestmark = pytest.mark.docker

EXAMPLE_NAMES = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())


def owned_containers(client, job: Path) -> list:
    return client.containers.list(all=True, filters={"label": f"benchflow.job_dir={job.resolve()}"})


def test_oracle_passes_every_example_and_leaves_a_benchflow_job_folder(
    docker_client, bench_env, tmp_path
):
    # when
    proc = run_bench(run_args("oracle", "-j", "4", tasks=EXAMPLES), env=bench_env, cwd=tmp_path)
    # then
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    n = len(EXAMPLE_NAMES)
    assert (
        f"Job: {n} tasks, 0 done, {n} to run (concurrency=4, warm pool: up to 1 prepared sandboxes)"
        in out
    )
    for name in EXAMPLE_NAMES:
        assert f"[PASS] {name} (reward=1.00, tools=0)" in out
    assert f"Job complete: {n}/{n} (100.0%)" in out
    assert f"Score: {n}/{n} (100.0%), mean reward 1.00, errors=0" in out
    [job] = job_dirs(tmp_path / "jobs")
    datetime.strptime(job.name, "%Y-%m-%d__%H-%M-%S")
    assert f"Artifacts: jobs/{job.name}" in out or f"Artifacts: {job}" in out
    evaluation = json.loads((job / "evaluation.json").read_text())
    assert evaluation["agent"] == "oracle" and evaluation["concurrency"] == 4
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["total"], summary["passed"], summary["failed"], summary["errored"]) == (
        n,
        n,
        0,
        0,
    )
    assert json.loads((tmp_path / "jobs" / "summary.json").read_text()) == summary
    for result in results_of(job):
        folder = job / result["rollout_name"]
        assert (
            folder.name.startswith(result["task_name"] + "__")
            and len(folder.name.split("__")[1]) == 8
        )
        for name in ("config.json", "result.json", "timing.json"):
            assert (folder / name).is_file()
        assert (folder / "agent" / "oracle.txt").is_file()
        assert (folder / "verifier" / "test-stdout.txt").is_file()
        assert set(result["timing"]) >= {
            "environment_setup",
            "agent_execution",
            "verifier",
            "total",
        }
        assert result["rewards"]["reward"] == 1.0
    partial = next(r for r in results_of(job) if r["task_name"] == "partial-credit")
    assert set(partial["rewards"]) > {"reward"}
    assert owned_containers(docker_client, job) == []


def test_nop_fails_the_same_tasks_honestly(docker_client, bench_env, tmp_path):
    proc = run_bench(run_args("nop", tasks=EXAMPLES), env=bench_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # wrong answers are scored, not errors
    for name in EXAMPLE_NAMES:
        assert f"[FAIL] {name} (reward=0.00, tools=0)" in proc.stdout
    [job] = job_dirs(tmp_path / "jobs")
    summary = json.loads((job / "summary.json").read_text())
    assert (
        summary["passed"] == 0
        and summary["failed"] == len(EXAMPLE_NAMES)
        and summary["errored"] == 0
    )


def test_agent_timeout_is_stopped_graded_and_leaves_no_container(
    docker_client, bench_env, tmp_path
):
    # given a task with a 3 s agent limit and an agent that would run for 5 minutes
    write_task(
        tmp_path / "tasks",
        "slow",
        toml="[agent]\ntimeout_sec = 3\n",
        test_sh="echo 0 > /logs/verifier/reward.txt\n",
    )
    agent = make_agent(tmp_path, "sleepy.sh", "#!/bin/bash\nsleep 300 &\nsleep 300\n")
    # when
    proc = run_bench(run_args(f"script:{agent}"), env=bench_env, cwd=tmp_path)
    # then: scored 0, not errored, and not retried
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["rewards"] == {"reward": 0.0}
    assert result["error_category"] == "timeout"
    assert result["timing"]["agent_execution"] < 60
    assert "[FAIL] slow (reward=0.00, tools=0) (agent timed out after 3s" in proc.stdout
    assert owned_containers(docker_client, job) == []


def test_timeout_without_reward_counts_zero(docker_client, bench_env, tmp_path):
    write_task(
        tmp_path / "tasks", "slow-noreward", toml="[agent]\ntimeout_sec = 2\n", test_sh="exit 0\n"
    )
    agent = make_agent(tmp_path, "sleepy.sh", "#!/bin/bash\nsleep 60\n")
    proc = run_bench(run_args(f"script:{agent}"), env=bench_env, cwd=tmp_path)
    result = only_result(job_dirs(tmp_path / "jobs")[0])
    assert result["rewards"] == {"reward": 0.0} and result["verifier_error"] is None, proc.stdout


@pytest.mark.parametrize(
    ("_case", "test_sh", "says"),
    [
        ("no_reward", "exit 0\n", "No reward file found at /logs/verifier/reward.txt"),
        ("no_reward_nonzero", "exit 3\n", "verifier exited with rc=3; no reward file found"),
        (
            "unparsable",
            "echo yes > /logs/verifier/reward.txt\n",
            "reward.txt holds 'yes', not a number",
        ),
        ("nan", "echo nan > /logs/verifier/reward.txt\n", "is NaN"),
        ("out_of_range", "echo 2 > /logs/verifier/reward.txt\n", "outside the reward range"),
        (
            "disagree",
            "echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 0}' > /logs/verifier/reward.json\n",
            "they must agree",
        ),
    ],
)
def test_each_verifier_error_is_reported_as_such(
    docker_client, bench_env, tmp_path, _case, test_sh, says
):
    write_task(tmp_path / "tasks", "broken-verifier", test_sh=test_sh)
    proc = run_bench(run_args("oracle"), env=bench_env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a verifier error is an error
    [job] = job_dirs(tmp_path / "jobs")
    results = results_of(job)
    assert len(results) == 1  # our reward checks are not infrastructure: not retried
    assert results[0]["rewards"] is None
    assert says in results[0]["verifier_error"]
    summary = json.loads((job / "summary.json").read_text())
    assert summary["verifier_errored"] == 1 and summary["total"] == 1


def test_verifier_timeout_is_a_verifier_error(docker_client, bench_env, tmp_path):
    write_task(
        tmp_path / "tasks", "hangs", toml="[verifier]\ntimeout_sec = 2\n", test_sh="sleep 60\n"
    )
    proc = run_bench(run_args("oracle", "--retry-attempts", "0"), env=bench_env, cwd=tmp_path)
    assert proc.returncode == 1
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["verifier_error"] == "verifier timed out after 2s"
    assert result["verifier_error_category"] == "verifier_timeout"
    assert owned_containers(docker_client, job) == []


def test_malformed_task_is_refused_before_a_job_exists(bench_env, tmp_path):
    # given one good task and two broken ones
    write_task(tmp_path / "tasks", "good", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    write_task(tmp_path / "tasks", "typo", toml="[agent]\ntimeout_secs = 10\n", test_sh="true\n")
    write_task(
        tmp_path / "tasks", "badtype", toml='[verifier]\ntimeout_sec = "ten"\n', test_sh="true\n"
    )
    # when
    proc = run_bench(run_args("oracle"), env=bench_env, cwd=tmp_path)
    # then: exit 2, every problem named with its file, field and fix, and nothing created
    assert proc.returncode == 2
    err = proc.stderr
    assert "Traceback" not in err
    assert (
        "typo/task.toml" in err
        and "agent.timeout_secs" in err
        and "did you mean 'timeout_sec'" in err
    )
    assert "badtype/task.toml" in err and "verifier.timeout_sec" in err
    assert "fix:" in err
    assert not (tmp_path / "jobs").exists()


def test_unknown_agent_is_refused_with_a_did_you_mean(bench_env, tmp_path):
    proc = run_bench(run_args("oracel", tasks=EXAMPLES), env=bench_env, cwd=tmp_path)
    assert proc.returncode == 2
    assert "did you mean 'oracle'" in proc.stderr
    assert not (tmp_path / "jobs").exists()


def test_four_sleeping_tasks_run_at_once_with_j4(docker_client, bench_env, tmp_path):
    for i in range(4):
        write_task(
            tmp_path / "tasks",
            f"sleep-{i}",
            solve_sh="sleep 4\n",
            test_sh="echo 1 > /logs/verifier/reward.txt\n",
        )
    proc = run_bench(run_args("oracle", "-j", "4"), env=bench_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    spans = []
    for result in results_of(job):
        start = datetime.fromisoformat(result["started_at"]).timestamp()
        t = result["timing"]
        agent_start = start + t["environment_setup"]
        spans.append((agent_start, agent_start + t["agent_execution"]))
    # all four agents were sleeping at one same instant
    assert max(s for s, _ in spans) < min(e for _, e in spans)
    summary = json.loads((job / "summary.json").read_text())
    # well under four sleeps one after another (16 s) plus set-up
    assert summary["elapsed_sec"] < 2 * 4 + 8


def test_failed_build_is_an_error_that_names_the_image_and_leaves_no_container(
    docker_client, bench_env, tmp_path
):
    write_task(
        tmp_path / "tasks", "ubuntu-task", dockerfile="FROM ubuntu:20.04\n", test_sh="true\n"
    )
    proc = run_bench(run_args("oracle"), env=bench_env, cwd=tmp_path)
    assert proc.returncode == 1
    [job] = job_dirs(tmp_path / "jobs")
    results = results_of(job)
    assert len(results) == 1  # a build that fails the same way every time is not retried
    assert (
        "ubuntu:20.04" in results[0]["error"]
        and "no image registry is reachable" in results[0]["error"]
    )
    assert results[0]["error_category"] == "image_build"
    assert owned_containers(docker_client, job) == []


def test_second_run_builds_no_image(docker_client, bench_env, tmp_path):
    write_task(
        tmp_path / "tasks",
        "cached",
        dockerfile="FROM debian:bookworm-slim\nRUN echo built > /built\n",
        test_sh="echo 1 > /logs/verifier/reward.txt\n",
    )
    first = run_bench(run_args("oracle"), env=bench_env, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    images_before = {i.id for i in docker_client.images.list()}
    second = run_bench(run_args("oracle", "--fresh"), env=bench_env, cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    first_job, second_job = job_dirs(tmp_path / "jobs")
    assert {i.id for i in docker_client.images.list()} == images_before
    assert not (second_job / "builds").exists()  # a build writes its log there


def test_big_output_is_bounded_in_the_agent_log(docker_client, bench_env, tmp_path):
    write_task(
        tmp_path / "tasks",
        "chatty",
        solve_sh="head -c 20000000 /dev/zero | tr '\\0' x\n",
        test_sh="echo 1 > /logs/verifier/reward.txt\n",
    )
    proc = run_bench(run_args("oracle"), env=bench_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    log = job / result["rollout_name"] / "agent" / "oracle.txt"
    assert log.stat().st_size < 9 * 1024 * 1024
    assert "more bytes of output were not kept" in log.read_text()[-200:]


def test_no_network_task_has_only_loopback(docker_client, bench_env, tmp_path):
    proc = run_bench(
        run_args("oracle", tasks=EXAMPLES, include=["no-network"]), env=bench_env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[PASS] no-network" in proc.stdout


def test_reaper_removes_containers_of_a_dead_run(docker_client, bench_env, tmp_path):
    # given a container labelled as owned by a process that no longer exists
    orphan = docker_client.containers.create(
        "debian:bookworm-slim",
        command=["sleep", "infinity"],
        labels={
            "benchflow.owned": "process",
            "benchflow.host": __import__("socket").gethostname(),
            "benchflow.pid": "999999",
            "benchflow.pid_start": "1",
            "benchflow.job": "dead-job",
        },
    )
    # when any run starts
    write_task(tmp_path / "tasks", "t", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    run_bench(run_args("nop"), env=bench_env, cwd=tmp_path)
    # then
    assert docker_client.containers.list(all=True, filters={"id": orphan.id}) == []


def test_secret_agent_env_never_reaches_the_job_folder(docker_client, bench_env, tmp_path):
    # given a task whose tests print their own secret, and an agent that prints and saves the one it
    # was given everywhere it can: its output, /logs/agent and /logs/artifacts
    bench_env = {**bench_env, "HOST_TEST_TOKEN": "tok-" + "Qw3rTy9" * 6}
    write_task(
        tmp_path / "tasks",
        "t",
        toml='[verifier]\nenv = { CHECK_TOKEN = "${HOST_TEST_TOKEN}" }\n',
        test_sh='echo "token $CHECK_TOKEN"\necho 1 > /logs/verifier/reward.txt\n',
    )
    agent = make_agent(
        tmp_path,
        "agent.sh",
        '#!/bin/bash\necho ran\nenv | sort\necho "$MY_API_KEY" >&2\n'
        'echo "saved $MY_API_KEY" > /logs/agent/notes.txt\nmkdir -p /logs/artifacts\n'
        'echo "$MY_API_KEY" > /logs/artifacts/out.txt\n',
    )
    secret = "ghp_" + "A1b2C3d4E5" * 4  # a GitHub token: a shape no key pattern of the proxy knows
    # when it runs
    proc = run_bench(
        run_args(
            f"script:{agent}",
            "--agent-env",
            f"MY_API_KEY={secret}",
            "--agent-env",
            "PLAIN=visible",
            "--allow-env",
            "HOST_TEST_TOKEN",
        ),
        env=bench_env,
        cwd=tmp_path,
    )
    # then neither secret is in any file of the job, nor on the console; the rest of the output is
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = [p for p in (tmp_path / "jobs").rglob("*") if p.is_file()]
    everything = "".join(p.read_text(errors="replace") for p in files)
    # the database
    index = b"".join(p.read_bytes() for p in (tmp_path / "state").rglob("*") if p.is_file())
    for value in (secret, bench_env["HOST_TEST_TOKEN"]):
        assert value not in everything and value not in proc.stdout + proc.stderr
        assert value.encode() not in index
    assert "visible" in everything
    assert "MY_API_KEY=[REDACTED]" in everything and "saved [REDACTED]" in everything
    assert "token [REDACTED]" in everything  # the tests' output
    assert any(p.name == "out.txt" and p.read_text() == "[REDACTED]\n" for p in files)
    [job] = job_dirs(tmp_path / "jobs")
    evaluation = json.loads((job / "evaluation.json").read_text())
    assert (
        "MY_API_KEY" in evaluation["agent_env_keys"] and "MY_API_KEY" not in evaluation["agent_env"]
    )


def test_paths_in_job_folder_are_relative_names(tmp_path):
    # the folder helper is what every test above relies on
    assert isinstance(tmp_path, Path)


def test_files_the_agent_plants_for_the_verifier_are_gone_before_it_runs(
    docker_client, bench_env, tmp_path
):
    # given an agent that plants a reward and a file among the tests
    write_task(
        tmp_path / "tasks",
        "planted",
        test_sh="if [ -e /tests/planted ]; then echo 0 > /logs/verifier/reward.txt; fi\n",
    )
    agent = make_agent(
        tmp_path,
        "cheat.sh",
        "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\ntouch /tests/planted\n",
    )
    # when
    proc = run_bench(run_args(f"script:{agent}"), env=bench_env, cwd=tmp_path)
    # then: neither the planted reward nor the planted file survives; the verifier wrote nothing
    result = only_result(job_dirs(tmp_path / "jobs")[0])
    assert result["rewards"] is None, proc.stdout
    assert "No reward file found" in result["verifier_error"]


def test_an_agent_killed_for_lack_of_memory_is_named_with_the_fix(
    docker_client, bench_env, tmp_path
):
    # given a task with little memory and an agent that needs more
    write_task(
        tmp_path / "tasks",
        "small",
        test_sh="echo 0 > /logs/verifier/reward.txt\n",
        toml="[environment]\nmemory_mb = 64\n",
    )
    hog = make_agent(
        tmp_path,
        "hog.sh",
        "#!/bin/bash\nx=$(head -c 400000000 /dev/zero | tr '\\0' a)\necho survived\n",
    )
    # when
    proc = run_bench(run_args(f"script:{hog}"), env=bench_env, cwd=tmp_path)
    # then the trial is graded as usual, and the console and result.json say why the agent died
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["agent_exit_code"] == 137 and result["agent_oom_killed"] is True, result
    assert "[small] the agent was killed for lack of memory (memory_mb=64)" in proc.stdout
    assert "fix: raise memory_mb" in proc.stdout
    assert "[FAIL] small (reward=0.00, tools=0)" in proc.stdout


def test_an_agent_that_exits_137_by_itself_is_not_called_out_of_memory(
    docker_client, bench_env, tmp_path
):
    write_task(tmp_path / "tasks", "selfkill", test_sh="echo 0 > /logs/verifier/reward.txt\n")
    agent = make_agent(tmp_path, "selfkill.sh", "#!/bin/bash\nkill -9 $$\n")
    proc = run_bench(run_args(f"script:{agent}"), env=bench_env, cwd=tmp_path)
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["agent_exit_code"] == 137 and "agent_oom_killed" not in result, result
    assert "lack of memory" not in proc.stdout
