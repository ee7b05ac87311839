"""bench regrade: the change table, the append-only regrade.json, refusals, and real regrades in Docker."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchflow_site import regrade_cli
from runs.jobfolder import write_json
from runs.problems import UserError
from runs.regrade.regrade import MULTI_STEP, NO_OUTPUTS, append_regrade, regrade_job
from runs.regrade.report import RegradeReport, TrialRow, change_of, regrade_line
from runs.trials.workspace import build_manifest
from tests.conftest import REPO, job_dirs, results_of, run_bench, write_task

# ---------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    "original, new, status, change",
    [
        (1.0, 1.0, "complete", "same"),
        (0.0, 0.0, "complete", "same"),
        (0.5, 0.5 + 1e-12, "complete", "same"),
        (None, None, "complete", "same"),
        (1.0, 0.0, "complete", "pass->fail"),
        (1.0, 0.5, "complete", "pass->fail"),
        (0.0, 1.0, "complete", "fail->pass"),
        (0.5, 1.0, "complete", "fail->pass"),
        (0.5, 0.75, "complete", "reward 0.5 -> 0.75"),
        (0.0, 0.25, "complete", "reward 0 -> 0.25"),
        (None, 0.0, "complete", "scored"),
        (None, 1.0, "complete", "scored"),
        (1.0, None, "complete", "unscored"),
        (0.0, None, "complete", "unscored"),
        (1.0, 0.0, "failed", None),
        (1.0, None, "interrupted", None),
    ],
)
def test_change_compares_the_new_reward_with_the_original(original, new, status, change):
    assert change_of(original, new, status) == change


def test_append_regrade_keeps_the_first_original_and_every_regrade():
    # given a first regrade
    first = append_regrade(None, {"reward": 1.0}, {"id": "a", "change": "pass->fail"})
    assert first == {
        "original": {"reward": 1.0},
        "regrades": [{"id": "a", "change": "pass->fail"}],
        "latest": {"id": "a", "change": "pass->fail"},
    }
    # when a second one comes, with whatever the caller now thinks the original is
    second = append_regrade(
        {**first, "note": "kept"}, {"reward": 0.0}, {"id": "b", "change": "same"}
    )
    # then nothing is overwritten: the original stays, the regrade is appended and is the latest
    assert second["original"] == {"reward": 1.0}
    assert [r["id"] for r in second["regrades"]] == ["a", "b"]
    assert second["latest"] == {"id": "b", "change": "same"}
    assert second["note"] == "kept"
    assert first["regrades"] == [{"id": "a", "change": "pass->fail"}]  # the input is not mutated


def test_report_lines_and_exit_codes():
    report = RegradeReport(Path("jobs/j"), "id", "now", None)
    report.rows.append(TrialRow("x", "x", "x__1", "refused", message=NO_OUTPUTS))
    assert report.exit_code == 2  # nothing regradable is a usage error
    report.rows.append(
        TrialRow("half-life", "half-life", "h__1", "complete", "pass->fail", 1.0, 0.0)
    )
    assert report.rows[-1].line() == "[REGRADE] half-life: pass->fail (reward 1.00 -> 0.00)"
    assert report.exit_code == 0
    report.rows.append(
        TrialRow("y", "y", "y__1", "failed", message="sandbox creation failed: boom")
    )
    assert report.rows[-1].line() == "[REGRADE] y: failed (sandbox creation failed: boom)"
    assert report.exit_code == 1
    assert report.closing == "Regraded 1 trial(s) (1 pass->fail), 1 refused, 1 failed."
    report.interrupted = True
    assert report.exit_code == 130


def test_help_says_the_run_needs_saved_outputs():
    import argparse

    parser = argparse.ArgumentParser(prog="bench")
    regrade_cli.add_parser(parser.add_subparsers(dest="command"))
    text = parser._subparsers._group_actions[0].choices["regrade"].format_help()  # type: ignore[union-attr]
    assert "--save-outputs" in text and "--freeze-workspace" in text
    for flag in ("--tasks-dir", "--reason", "--concurrency", "--json"):
        assert flag in text
    args = parser.parse_args(["regrade", "jobs/x", "-j", "2"])
    assert (args.command, args.job, args.concurrency, args.handler) == (
        "regrade",
        Path("jobs/x"),
        2,
        regrade_cli.run,
    )


# ---------------------------------------------------------------- refusals (no sandbox needed)


def fake_attempt(
    job: Path,
    task: Path,
    *,
    reward: float | None = 1.0,
    saved: dict[str, str] | None = None,
    steps: bool = False,
    folder: str | None = None,
) -> Path:
    """An attempt folder as bench run writes it; `saved` files become evidence/workspace + manifest."""
    attempt = job / (folder or f"{task.name}__0000abcd")
    attempt.mkdir(parents=True)
    write_json(
        attempt / "config.json",
        {"task_path": str(task), "task_name": task.name, "trial_name": task.name},
    )
    result = {
        "task_name": task.name,
        "trial_name": task.name,
        "rewards": None if reward is None else {"reward": reward},
        "error": None,
        "verifier_error": None,
        "started_at": "2026-11-04T18:48:30.000",
        "finished_at": "2026-11-04T18:48:40.000",
    }
    if steps:
        result["steps"] = [{"name": "one", "rewards": {"reward": 1.0}}]
    write_json(attempt / "result.json", result)
    if saved is not None:
        root = attempt / "evidence" / "workspace"
        root.mkdir(parents=True)
        for rel, text in saved.items():
            (root / rel).write_text(text)
        write_json(
            attempt / "evidence" / "manifest.json",
            {"workdir": "/app", "files": build_manifest(root)},
        )
    return attempt


def test_a_job_with_nothing_regradable_refuses_each_trial_and_writes_nothing(tmp_path):
    # given trials, each not regradable for its own reason
    tasks = tmp_path / "tasks"
    plain = write_task(tasks, "plain", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    stepped = write_task(tasks, "stepped", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    gone = write_task(tasks, "gone", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    tampered = write_task(tasks, "tampered", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    forged = write_task(tasks, "forged", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    garbled = write_task(tasks, "garbled", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    job = tmp_path / "jobs" / "2026-11-04__18-48-30"
    write_json(job / "evaluation.json", {"tasks_dir": str(tasks), "agent": "oracle"})
    fake_attempt(job, plain, saved=None)
    fake_attempt(job, stepped, saved={"a.txt": "a"}, steps=True)
    fake_attempt(job, gone, saved={"a.txt": "a"})
    t = fake_attempt(job, tampered, saved={"answer.txt": "42\n"})
    (t / "evidence" / "workspace" / "answer.txt").write_text("43\n")
    f = fake_attempt(job, forged, saved={"answer.txt": "42\n"})
    manifest = json.loads((f / "evidence" / "manifest.json").read_text())
    manifest["files"][0]["sha256"] = "0" * 64  # the manifest itself edited
    write_json(f / "evidence" / "manifest.json", manifest)
    g = fake_attempt(job, garbled, saved={"answer.txt": "42\n"})
    (g / "evidence" / "manifest.json").write_text("{not json")
    import shutil

    shutil.rmtree(gone)
    before = sorted(p.relative_to(job) for p in job.rglob("*"))
    events: list = []
    # when
    report = regrade_job(job, emit=events.append)
    lines = [regrade_line(e) for e in events if e.kind == "regraded"]
    # then
    assert report.exit_code == 2
    assert f"[REFUSED] plain: {NO_OUTPUTS}" in lines
    assert (
        "plain: no saved outputs; rerun with bench run --save-outputs to make it regradable"
        in report.render()
    )
    assert f"[REFUSED] stepped: {MULTI_STEP}" in lines
    assert any(line.startswith("[REFUSED] gone: task folder no longer exists") for line in lines)
    for name in ("tampered", "forged", "garbled"):
        assert any(
            line.startswith(f"[REFUSED] {name}: saved outputs do not match their manifest")
            for line in lines
        )
    assert "Nothing to regrade" in report.closing
    assert sorted(p.relative_to(job) for p in job.rglob("*")) == before  # nothing written


def test_a_task_that_became_multi_step_is_refused(tmp_path):
    tasks = tmp_path / "tasks"
    task = write_task(tasks, "grown", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    job = tmp_path / "job"
    fake_attempt(job, task, saved={"a.txt": "a"})
    (task / "task.toml").write_text('version = "1.0"\n[[steps]]\nname = "one"\n')
    (task / "steps" / "one").mkdir(parents=True)
    (task / "steps" / "one" / "instruction.md").write_text("Step one.\n")
    report = regrade_job(job, emit=lambda _: None)
    assert [(r.trial, r.status, r.message) for r in report.rows] == [
        ("grown", "refused", MULTI_STEP)
    ]


def test_a_file_not_in_the_manifest_is_a_mismatch(tmp_path):
    task = write_task(tmp_path / "tasks", "extra", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    job = tmp_path / "job"
    attempt = fake_attempt(job, task, saved={"a.txt": "a"})
    (attempt / "evidence" / "workspace" / "planted.py").write_text("print('hi')\n")
    report = regrade_job(job, emit=lambda _: None)
    assert "planted.py is not in the manifest" in (report.rows[0].message or "")


def test_a_folder_without_attempts_is_a_usage_error(tmp_path):
    with pytest.raises(UserError, match="is not a job folder"):
        regrade_job(tmp_path, emit=lambda _: None)
    with pytest.raises(UserError, match="is not a job folder"):
        regrade_job(tmp_path / "missing", emit=lambda _: None)


def test_a_job_being_run_is_not_regraded(tmp_path):
    from runs.jobfolder import JobLock

    task = write_task(tmp_path / "tasks", "busy", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    job = tmp_path / "job"
    attempt = fake_attempt(job, task, saved={"a.txt": "a"})
    lock = JobLock(job)
    lock.acquire()  # as a live bench run holds it
    try:
        with pytest.raises(UserError, match="is being run by pid"):
            regrade_job(job, client=object(), emit=lambda _: None)
    finally:
        lock.release()
    assert not (attempt / "regrade.json").exists() and not (job / "regrade-summary.json").exists()


# ---------------------------------------------------------------- real regrades in Docker

WRONG_VERIFIER = "echo 1 > /logs/verifier/reward.txt\n"  # passes everything
FIXED_VERIFIER = 'if [ "$(cat /app/answer.txt)" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
# the image's /app has stale.txt; the oracle deletes it and leaves an executable script
TIDY_DOCKERFILE = "FROM debian:bookworm-slim\nWORKDIR /app\nRUN echo old > /app/stale.txt\n"
TIDY_SOLVE = (
    "rm /app/stale.txt\nprintf '#!/bin/sh\\necho hi\\n' > /app/run.sh\nchmod 755 /app/run.sh\n"
)
TIDY_FIXED = (
    'if [ -x /app/run.sh ] && [ ! -e /app/stale.txt ] && [ "$(/app/run.sh)" = hi ]; '
    "then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
)


def containers_of(client, job: Path) -> list:
    return client.containers.list(all=True, filters={"label": f"benchflow.job_dir={job.resolve()}"})


def run_job(tmp_path: Path, env: dict, *extra: str) -> Path:
    proc = run_bench(
        ["run", "tasks", "-a", "oracle", "--jobs-dir", "jobs", *extra], env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    return job


def attempt_of(job: Path, task: str) -> Path:
    [attempt] = [p for p in job.iterdir() if p.name.startswith(f"{task}__")]
    return attempt


@pytest.mark.docker
def test_regrade_rescores_saved_work_with_the_fixed_verifier_and_appends(
    docker_client, bench_env, tmp_path
):
    # given a job whose verifiers were wrong: one passed a wrong answer, one failed a right one
    tasks = tmp_path / "tasks"
    half = write_task(
        tasks, "half-life", test_sh=WRONG_VERIFIER, solve_sh="echo 41 > /app/answer.txt\n"
    )
    tidy = write_task(
        tasks,
        "tidy",
        test_sh="echo 0 > /logs/verifier/reward.txt\n",
        solve_sh=TIDY_SOLVE,
        dockerfile=TIDY_DOCKERFILE,
    )
    job = run_job(tmp_path, bench_env, "--save-outputs")
    assert {r["task_name"]: r["rewards"]["reward"] for r in results_of(job)} == {
        "half-life": 1.0,
        "tidy": 0.0,
    }
    half_dir, tidy_dir = attempt_of(job, "half-life"), attempt_of(job, "tidy")
    result_bytes = {d: (d / "result.json").read_bytes() for d in (half_dir, tidy_dir)}
    # when the verifiers are fixed and the job regraded
    (half / "tests" / "test.sh").write_text("#!/bin/bash\n" + FIXED_VERIFIER)
    (tidy / "tests" / "test.sh").write_text("#!/bin/bash\n" + TIDY_FIXED)
    events: list = []
    report = regrade_job(
        job, reason="test.sh accepted any answer", client=docker_client, emit=events.append
    )
    lines = [regrade_line(e) for e in events if e.kind == "regraded"]
    # then each trial flips, and result.json stays byte for byte
    assert report.exit_code == 0, report.render()
    assert "[REGRADE] half-life: pass->fail (reward 1.00 -> 0.00)" in lines
    assert "[REGRADE] tidy: fail->pass (reward 0.00 -> 1.00)" in lines
    assert report.closing.startswith(
        "Regraded 2 trial(s) (1 fail->pass, 1 pass->fail), 0 refused, 0 failed"
    )
    for d, data in result_bytes.items():
        assert (d / "result.json").read_bytes() == data
    doc = json.loads((half_dir / "regrade.json").read_text())
    assert set(doc) == {"original", "regrades", "latest"}
    assert doc["original"]["reward"] == 1.0 and doc["original"]["attempt"] == half_dir.name
    [block] = doc["regrades"]
    assert block == doc["latest"]
    assert block["id"] == report.regrade_id and block["reason"] == "test.sh accepted any answer"
    assert (block["status"], block["change"], block["original_reward"], block["new_reward"]) == (
        "complete",
        "pass->fail",
        1.0,
        0.0,
    )
    assert block["new_rewards"] == {"reward": 0.0} and block["verifier_error"] is None
    assert block["task_dir"] == str(half.resolve()) and block["task_digest"].startswith("sha256:")
    assert block["verifier_digest"].startswith("sha256:") and block["sandbox"]["sandbox_id"]
    out = half_dir / "regrade" / report.regrade_id / "verifier"
    assert (out / "reward.txt").read_text().strip() == "0"
    assert (
        half_dir / "verifier" / "reward.txt"
    ).read_text().strip() == "1"  # the original's output stays
    summary = json.loads((job / "regrade-summary.json").read_text())
    assert summary["counts"] == {"pass->fail": 1, "fail->pass": 1}
    assert summary["trials"] == {"regraded": 2, "refused": 0, "failed": 0, "interrupted": 0}
    assert summary["reason"] == "test.sh accepted any answer" and summary["job"] == job.name
    assert containers_of(docker_client, job) == []
    # when regraded again, the history grows and nothing is overwritten
    again = regrade_job(job, client=docker_client, emit=lambda _: None)
    doc2 = json.loads((half_dir / "regrade.json").read_text())
    assert [b["id"] for b in doc2["regrades"]] == [report.regrade_id, again.regrade_id]
    assert doc2["regrades"][0] == block and doc2["original"] == doc["original"]
    assert doc2["latest"]["id"] == again.regrade_id and doc2["latest"]["change"] == "pass->fail"
    assert (half_dir / "regrade" / report.regrade_id).is_dir() and (
        half_dir / "regrade" / again.regrade_id
    ).is_dir()
    assert (half_dir / "result.json").read_bytes() == result_bytes[half_dir]
    assert containers_of(docker_client, job) == []


@pytest.mark.docker
def test_a_run_without_saved_outputs_is_refused(docker_client, bench_env, tmp_path):
    write_task(
        tmp_path / "tasks",
        "half-life",
        test_sh=WRONG_VERIFIER,
        solve_sh="echo 41 > /app/answer.txt\n",
    )
    job = run_job(tmp_path, bench_env)
    before = sorted(p.relative_to(job) for p in job.rglob("*"))
    # when, through the command line
    proc = subprocess.run(
        [sys.executable, "-m", "benchflow_site.cli", "regrade", str(job)],
        cwd=tmp_path,
        env={**bench_env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    # then
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "half-life: no saved outputs; rerun with bench run --save-outputs to make it regradable"
        in proc.stdout
    )
    assert "Nothing to regrade" in proc.stderr
    assert sorted(p.relative_to(job) for p in job.rglob("*")) == before
    assert containers_of(docker_client, job) == []


@pytest.mark.docker
def test_a_tampered_workspace_is_refused_and_the_rest_regraded(docker_client, bench_env, tmp_path):
    tasks = tmp_path / "tasks"
    write_task(tasks, "half-life", test_sh=FIXED_VERIFIER, solve_sh="echo 42 > /app/answer.txt\n")
    write_task(tasks, "other", test_sh=FIXED_VERIFIER, solve_sh="echo 42 > /app/answer.txt\n")
    job = run_job(tmp_path, bench_env, "--save-outputs")
    tampered = attempt_of(job, "half-life")
    (tampered / "evidence" / "workspace" / "answer.txt").write_text("41\n")
    # when
    events: list = []
    report = regrade_job(job, tasks_dir=tasks, client=docker_client, emit=events.append)
    lines = [regrade_line(e) for e in events if e.kind == "regraded"]
    # then
    assert report.exit_code == 0
    assert any(
        line.startswith("[REFUSED] half-life: saved outputs do not match their manifest")
        and "answer.txt does not match its manifest" in line
        for line in lines
    )
    assert "[REGRADE] other: same (reward 1.00 -> 1.00)" in lines
    assert not (tampered / "regrade.json").exists() and not (tampered / "regrade").exists()
    summary = json.loads((job / "regrade-summary.json").read_text())
    assert (summary["trials"]["regraded"], summary["trials"]["refused"]) == (1, 1)
    assert containers_of(docker_client, job) == []


@pytest.mark.docker
def test_a_sandbox_that_cannot_start_is_recorded_as_failed(docker_client, bench_env, tmp_path):
    # given a job whose task's image no longer builds
    task = write_task(tmp_path / "tasks", "broken", test_sh=WRONG_VERIFIER)
    job = run_job(tmp_path, bench_env, "--save-outputs")
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN exit 3\n")
    attempt = attempt_of(job, "broken")
    result_bytes = (attempt / "result.json").read_bytes()
    # when
    report = regrade_job(job, client=docker_client, emit=lambda _: None)
    # then
    assert report.exit_code == 1
    [row] = report.rows
    assert row.status == "failed" and "ImageBuildError: image build failed" in (row.message or "")
    latest = json.loads((attempt / "regrade.json").read_text())["latest"]
    assert (latest["status"], latest["change"], latest["new_reward"]) == ("failed", None, None)
    assert "image build failed" in latest["error"]
    assert (attempt / "result.json").read_bytes() == result_bytes
    assert containers_of(docker_client, job) == []


@pytest.mark.docker
def test_ctrl_c_records_an_interrupted_regrade_and_removes_the_sandbox(
    docker_client, bench_env, tmp_path
):
    task = write_task(tmp_path / "tasks", "slow", test_sh=WRONG_VERIFIER)
    job = run_job(tmp_path, bench_env, "--save-outputs")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\nsleep 120\necho 1 > /logs/verifier/reward.txt\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchflow_site.cli", "regrade", str(job)],
        cwd=tmp_path,
        env={**bench_env, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        attempt = attempt_of(job, "slow")
        # the verifier is running
        while not list(attempt.glob("regrade/*/verifier/test-stdout.txt")):
            if time.monotonic() > deadline or proc.poll() is not None:
                if proc.poll() is None:
                    proc.kill()
                out, err = proc.communicate(timeout=60)
                regrades = attempt / "regrade.json"
                latest = json.loads(regrades.read_text())["latest"] if regrades.exists() else None
                pytest.fail(f"the verifier never started\n{out}\n{err}\nlatest: {latest}")
            time.sleep(0.2)
        # when
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # then
    assert proc.returncode == 130, out + err
    latest = json.loads((attempt / "regrade.json").read_text())["latest"]
    assert (latest["status"], latest["change"]) == ("interrupted", None)
    assert containers_of(docker_client, job) == []
    assert json.loads((job / "regrade-summary.json").read_text())["interrupted"] is True


@pytest.mark.docker
def test_the_secrets_of_the_tasks_env_do_not_reach_the_regrades_output(
    docker_client, bench_env, tmp_path, monkeypatch
):
    # given a task whose tests get a token from the host, and print it
    token = "tok-" + "Zx8Cv7Bn6" * 4
    monkeypatch.setenv("HOST_TEST_TOKEN", token)
    write_task(
        tmp_path / "tasks",
        "t",
        toml='[verifier]\nenv = { CHECK_TOKEN = "${HOST_TEST_TOKEN}" }\n',
        test_sh='echo "token $CHECK_TOKEN"\necho 1 > /logs/verifier/reward.txt\n',
    )
    job = run_job(
        tmp_path,
        {**bench_env, "HOST_TEST_TOKEN": token},
        "--save-outputs",
        "--allow-env",
        "HOST_TEST_TOKEN",
    )
    # when it is regraded
    report = regrade_job(job, client=docker_client, emit=lambda _: None)
    # then the tests ran with it, and their output in the job folder has it replaced
    assert report.exit_code == 0, report.render()
    out = attempt_of(job, "t") / "regrade" / report.regrade_id / "verifier" / "test-stdout.txt"
    assert out.read_text() == "token [REDACTED]\n"
    assert not [p for p in job.rglob("*") if p.is_file() and token.encode() in p.read_bytes()]


@pytest.mark.docker
def test_a_regrade_runs_the_tasks_setup_commands_and_healthcheck_first(
    docker_client, bench_env, tmp_path
):
    # given a task whose tests read what its setup commands made (a server, a seeded file)
    import shutil

    shutil.copytree(REPO / "tests" / "tasksets" / "setup-keys", tmp_path / "tasks" / "setup-keys")
    job = run_job(tmp_path, bench_env, "--save-outputs")
    # when it is regraded in a fresh sandbox
    report = regrade_job(job, reason="recheck", client=docker_client, emit=lambda _e: None)
    # then the setup ran before the tests there too, and they passed again
    assert report.exit_code == 0, report.render()
    doc = json.loads((attempt_of(job, "setup-keys") / "regrade.json").read_text())
    assert (doc["latest"]["status"], doc["latest"]["new_reward"]) == ("complete", 1.0)
    assert containers_of(docker_client, job) == []
