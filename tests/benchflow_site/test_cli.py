"""The `bench` command's surface: help, usage errors (exit 2, no traceback), explain, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchflow_site.cli import build_parser, main


def test_run_help_names_every_flag_of_the_seed_pages(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--concurrency",
        "--warm-pool",
        "--trials",
        "--include",
        "--exclude",
        "--jobs-dir",
        "--job",
        "--fresh",
        "--agent-env",
        "--retry-attempts",
        "--save-outputs",
        "--freeze-workspace",
        "--quiet",
        "--max-cost-usd",
        "--max-tokens",
        "--max-sandbox-seconds",
        "--max-rollouts",
        "--token-budget",
        "--turn-budget",
        "--agent-idle-timeout",
    ):
        assert flag in out


def test_defaults_match_benchflow():
    args = build_parser().parse_args(["run", "tasks"])
    assert (args.concurrency, args.warm_pool, args.trials, args.retry_attempts) == (4, 1, 1, 2)
    assert str(args.jobs_dir) == "jobs" and args.agent == "claude"
    assert args.agent_idle_timeout == 600


@pytest.mark.parametrize(("value", "want"), [("0", None), ("none", None), ("90", 90.0)])
def test_agent_idle_timeout_off_or_seconds(value, want):
    assert (
        build_parser()
        .parse_args(["run", "tasks", "--agent-idle-timeout", value])
        .agent_idle_timeout
        == want
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "tasks", "-j", "0"],
        ["run", "tasks", "--agent-env", "NOEQUALS"],
        ["run", "tasks", "--max-cost-usd", "-1"],
        ["run", "tasks", "--trials", "two"],
        ["run"],
        ["results", "x", "--json", "--csv"],
        ["run", "tasks", "--agent-idle-timeout", "-5"],
        ["run", "tasks", "--agent-idle-timeout", "later"],
    ],
)
def test_usage_errors_exit_2_without_a_traceback(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_missing_tasks_folder_is_refused_with_the_path(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(tmp_path / "nowhere"), "-a", "oracle"]) == 2
    err = capsys.readouterr().err
    assert "nowhere" in err and "nothing was created" in err
    assert not (tmp_path / "jobs").exists()


def test_explain_lists_classes_and_explains_one(capsys):
    assert main(["explain"]) == 0
    assert "trial_budget" in capsys.readouterr().out
    assert main(["explain", "provider_rate_limit"]) == 0
    out = capsys.readouterr().out
    assert "Retried:       no" in out and "lower" in out.lower()


def test_explain_unknown_class_suggests_the_nearest(capsys):
    assert main(["explain", "trial_budgte"]) == 2
    assert "did you mean 'trial_budget'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "name",
    [
        "idle_timeout",
        "install_failure",
        "pipe_closed",
        "api_error",
        "provider_auth",
        "provider_rate_limit",
        "infra_failure",
        "sandbox_setup",
        "timeout",
        "usage_limit",
        "verifier_timeout",
        "verifier_infra",
        "trial_budget",
        "image_build",
    ],
)
def test_every_error_class_of_the_table_can_be_explained(name, capsys):
    assert main(["explain", name]) == 0
    out = capsys.readouterr().out
    assert out.startswith(name) and "Whose problem:" in out and "Retried:" in out


def test_an_unexpected_error_is_one_line_and_a_crash_log(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BENCHFLOW_LOG_DIR", str(tmp_path))

    def boom(_args):
        raise ZeroDivisionError("nope")

    monkeypatch.setattr("benchflow_site.cli.cmd_doctor", boom)
    assert main(["doctor"]) == 1
    err = capsys.readouterr().err
    assert "unexpected error (ZeroDivisionError: nope)" in err and "Traceback" not in err
    [log] = tmp_path.glob("crash-*.log")
    assert "ZeroDivisionError" in log.read_text()


def test_a_jobs_dir_that_is_a_file_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jobs").write_text("not a folder")
    tasks = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "tasks"
    assert main(["run", str(tasks), "-a", "oracle", "--jobs-dir", "jobs"]) == 2
    assert "--jobs-dir jobs: it is a file" in capsys.readouterr().err


def _task(root, name, toml="", dockerfile="FROM debian:bookworm-slim\n"):
    folder = root / name
    (folder / "environment").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "task.toml").write_text(toml)
    (folder / "instruction.md").write_text("Write hello.\n")
    (folder / "environment" / "Dockerfile").write_text(dockerfile)
    (folder / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return folder


def test_tasks_check_reports_each_task_with_file_field_and_fix(tmp_path, capsys, monkeypatch):
    # given two tasks, one with a bad field; the engine is not consulted here
    monkeypatch.setattr("runs.sandboxes.engine.engine_running", lambda: False)
    _task(tmp_path, "good")
    _task(tmp_path, "bad", toml='[agent]\ntimeout_sec = "soon"\n')
    # when
    code = main(["tasks", "check", str(tmp_path)])
    # then the bad one is named with its file, field and fix, the good one passes, exit 1
    out = capsys.readouterr().out
    assert code == 1
    assert "ok   good" in out and "FAIL bad" in out
    assert (
        f"{tmp_path}/bad/task.toml: agent.timeout_sec: must be a positive number" in out
        and "fix:" in out
    )
    assert "Checked 2 task(s): 1 ok, 1 with problems" in out
    assert "FROM images not checked" in out


def test_tasks_check_passes_the_examples(capsys, monkeypatch):
    monkeypatch.setattr("runs.sandboxes.engine.engine_running", lambda: False)
    assert main(["tasks", "check", "examples/tasks"]) == 0
    assert "Checked 8 task(s): 8 ok, 0 with problems" in capsys.readouterr().out


@pytest.mark.docker
def test_tasks_check_names_a_from_image_this_machine_cannot_have(tmp_path, capsys):
    dockerfile = "FROM ubuntu:20.04\nCOPY --from=ghcr.io/astral-sh/uv:0.5 /uv /bin/\nRUN true\n"
    _task(tmp_path, "ubuntu", dockerfile=dockerfile)
    assert main(["tasks", "check", str(tmp_path / "ubuntu")]) == 1
    out = capsys.readouterr().out
    assert (
        f"{tmp_path}/ubuntu/environment/Dockerfile: FROM (line 1), COPY --from (line 2): The "
        "images ubuntu:20.04, ghcr.io/astral-sh/uv:0.5 are not present" in out
    )
    assert "No stand-in is made for ubuntu:20.04" in out
    assert "Locally available stand-ins: " in out and "debian:bookworm" in out


HOLDER = """
import signal, sys, time
from pathlib import Path
from runs.jobfolder import JobLock
lock = JobLock(Path(sys.argv[1]))
lock.acquire()
def stop(signum, frame):
    Path(sys.argv[1], "stopped-by").write_text(signal.Signals(signum).name)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
print("holding", flush=True)
time.sleep(60)
"""


def test_bench_cancel_stops_the_run_holding_the_jobs_lock_as_sigterm(tmp_path, capsys):
    import os
    import signal
    import subprocess
    import sys

    # given a run holding a job's lock
    job = tmp_path / "2026-01-01__00-00-00"
    job.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(job)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        # when `bench cancel` names the job
        code = main(["cancel", str(job)])
        # then the run got SIGTERM (its own clean stop), and the command says so
        assert code == 0 and proc.wait(10) == 143
        assert (job / "stopped-by").read_text() == "SIGTERM"
        assert f"Stopping {job.name} (SIGTERM to pid {proc.pid})" in capsys.readouterr().out
        # and a job nothing runs is a user's mistake, said in one line
        assert main(["cancel", str(job)]) == 2
        assert "is not running; nothing to cancel" in capsys.readouterr().err
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)


def test_detach_with_no_worker_fleet_says_how_to_get_one(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BENCHFLOW_REDIS_URL", raising=False)
    assert main(["run", str(tmp_path), "-a", "oracle", "--detach"]) == 2
    err = capsys.readouterr().err
    assert "--detach hands the job to a bench worker" in err and "fix: start one" in err
    assert not (tmp_path / "jobs").exists()
