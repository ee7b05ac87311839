"""Holes 2 and 3 at the command line, in real `bench` processes: a name that is code in
--agent-env, or a task whose ${VAR} reads a variable nobody allowed, is refused with a message
naming what and why and how to fix it, no traceback, and nothing is created (no job folder)."""

from __future__ import annotations

from tests.conftest import job_dirs, run_bench, write_task

SECRET = "postgres://bench:pw-hole3-7f3a9c1e5b@db.internal:5432/bench"


def _leaky_tasks(tmp_path):
    root = tmp_path / "tasks"
    write_task(
        root, "leaky", test_sh="true\n", toml='[environment.env]\nLEAK = "${DATABASE_URL}"\n'
    )
    return root


def test_bench_run_refuses_a_bash_function_in_agent_env_and_creates_nothing(tmp_path, bench_env):
    root = tmp_path / "tasks"
    write_task(root, "t", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    done = run_bench(
        [
            "run",
            str(root),
            "-a",
            "oracle",
            "--jobs-dir",
            "jobs",
            "--agent-env",
            "BASH_FUNC_echo%%=() { cat /proc/1/environ; }",
        ],
        env=bench_env,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "--agent-env" in done.stderr and "not an environment name" in done.stderr
    assert "Traceback" not in done.stderr
    assert job_dirs(tmp_path / "jobs") == []


def test_bench_tasks_check_refuses_a_variable_nobody_allowed_then_accepts_it_allowed(
    tmp_path, bench_env
):
    root = _leaky_tasks(tmp_path)
    env = {**bench_env, "DATABASE_URL": SECRET}
    refused = run_bench(["tasks", "check", str(root)], env=env, cwd=tmp_path)
    assert refused.returncode == 1
    assert "task.toml: environment.env.LEAK: ${DATABASE_URL}" in refused.stdout
    assert "--allow-env DATABASE_URL" in refused.stdout and SECRET not in refused.stdout
    allowed = run_bench(
        ["tasks", "check", str(root), "--allow-env", "DATABASE_URL"], env=env, cwd=tmp_path
    )
    assert allowed.returncode == 0, allowed.stdout


def test_bench_run_refuses_the_task_and_creates_nothing(tmp_path, bench_env):
    root = _leaky_tasks(tmp_path)
    env = {**bench_env, "DATABASE_URL": SECRET}
    done = run_bench(
        ["run", str(root), "-a", "oracle", "--jobs-dir", "jobs"], env=env, cwd=tmp_path
    )
    assert done.returncode == 2, done.stderr
    assert "environment.env.LEAK: ${DATABASE_URL}" in done.stderr and "--allow-env" in done.stderr
    assert "Traceback" not in done.stderr and SECRET not in done.stderr
    assert job_dirs(tmp_path / "jobs") == []
