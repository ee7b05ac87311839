"""Task shapes of public task sets (tests/tasksets/), each run for real in Docker with the oracle."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, job_dirs, only_result, results_of, run_args, run_bench

pytestmark = pytest.mark.docker

SHAPES = REPO / "tests" / "tasksets"


def oracle_on(shape: str, tmp_path: Path, bench_env: dict, *flags: str):
    tasks = tmp_path / "tasks"
    shutil.copytree(SHAPES / shape, tasks / shape)
    proc = run_bench(run_args("oracle", *flags), env=bench_env, cwd=tmp_path)
    [job] = job_dirs(tmp_path / "jobs")
    return proc, job, results_of(job)


def test_a_task_asking_for_more_cpus_than_the_machine_has_runs_with_what_there_is(
    docker_client, bench_env, tmp_path
):
    host_cpus = float(docker_client.info()["NCPU"])
    assert host_cpus < 4, "this test needs a machine with fewer than 4 CPUs"
    # when the oracle runs a task asking for 4 CPUs
    proc, job, [result] = oracle_on("cpu-request", tmp_path, bench_env)
    # then it passed once (no retry), with a warning line and both figures in result.json
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["rewards"] == {"reward": 1.0} and result["error"] is None
    assert result["sandbox_resources"] == {
        "cpus": host_cpus,
        "memory_mb": 1024,
        "requested_cpus": 4.0,
        "requested_memory_mb": 1024,
        "reduced": True,
    }
    assert (
        f"warning: task cpu-request asks for 4 CPUs (this machine has {host_cpus:g}): it runs "
        "with what there is" in proc.stderr
    )
    assert len(list(job.glob("cpu-request__*"))) == 1


def test_a_solve_sh_exiting_127_is_graded_not_an_install_failure(
    docker_client, bench_env, tmp_path
):
    # when the oracle's solve.sh does its work and then runs a command that does not exist
    proc, _job, [result] = oracle_on("solve-127", tmp_path, bench_env)
    # then the verifier graded what it left; no install failure, no retry
    assert result["agent_exit_code"] == 127
    assert result["error"] is None and result["error_category"] is None
    assert result["rewards"] == {"reward": 1.0}
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_verifier_that_cannot_reach_its_host_says_so(docker_client, bench_env, tmp_path):
    # when the tests fetch their checker from a host that does not resolve
    proc, job, [result] = oracle_on("verifier-unreachable", tmp_path, bench_env)
    # then the trial has no reward, and the error names the host problem, not the task's
    assert result["rewards"] is None
    assert result["verifier_error_category"] == "verifier_unreachable"
    assert result["verifier_error"].startswith("verifier could not reach a host: ")
    assert "name or service not known" in result["verifier_error"].lower()
    listing = run_bench(["results", str(job)], env=bench_env, cwd=tmp_path).stdout
    assert "the tests could not reach a host (setup problem)" in listing
    assert len(list(job.glob("verifier-unreachable__*"))) == 1  # not retried


def test_heredocs_cache_mounts_and_copy_from_an_image_build_offline(
    docker_client, bench_env, tmp_path
):
    # given a Dockerfile with a `# syntax=` line (whose frontend image no registry here serves),
    # RUN and COPY heredocs, RUN --mount=type=cache and COPY --from=<image>
    proc, _job, [result] = oracle_on("dockerfile-features", tmp_path, bench_env)
    # then it built with BuildKit's own frontend and the oracle passed
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["rewards"] == {"reward": 1.0}, result


def test_a_build_error_names_the_dockerfile_line(docker_client, bench_env, tmp_path):
    proc, job, [result] = oracle_on("build-error", tmp_path, bench_env)
    assert proc.returncode == 1
    assert result["error_category"] == "image_build"
    error = result["error"]
    assert "build-error/environment/Dockerfile, line 3)" in error
    assert "unknown instruction: RUNN" in error
    assert (job / "builds" / "build-error.log").is_file()


def test_setup_commands_a_healthcheck_and_declared_artifacts_are_honoured(
    docker_client, bench_env, tmp_path
):
    # given setup commands (one starts a server that outlives it), a healthcheck that passes once
    # the server answers, and artifacts declared by path (one a folder with an exclude)
    proc, job, [result] = oracle_on("setup-keys", tmp_path, bench_env)
    # then the oracle found what the setup made, and the artifacts were copied out
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["rewards"] == {"reward": 1.0}, result
    attempt = job / result["rollout_name"]
    assert (attempt / "agent" / "setup.txt").read_text() == "set up the site\n"
    artifacts = attempt / "artifacts"
    assert (artifacts / "app" / "report.txt").read_text() == "seeded\n"
    assert (artifacts / "out" / "notes" / "a.txt").read_text() == "kept\n"
    assert not (artifacts / "out" / "b.tmp").exists()
    manifest = json.loads((artifacts / "manifest.json").read_text())
    assert [(m["source"], m["type"], m["files"]) for m in manifest] == [
        ("/app/report.txt", "file", 1),
        ("/app/out", "folder", 1),
    ]
    # and the oracle, which takes no skills, was said to run without them
    assert "environment.skills_dir: -a oracle takes no skills" in proc.stderr


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            ("retries = 3", 'retries = 2\ncommand = "exit 3"'),
            "environment setup failed: the task's healthcheck 'exit 3' failed 2 time(s) in a row",
        ),
        (
            ('"mkdir -p', '"exit 5", "mkdir -p'),
            "environment setup failed: the task's setup command 'exit 5' exited 5",
        ),
    ],
)
def test_an_environment_that_never_gets_ready_is_an_error_naming_the_command(
    docker_client, bench_env, tmp_path, change, said
):
    tasks = tmp_path / "tasks"
    shutil.copytree(SHAPES / "setup-keys", tasks / "setup-keys")
    toml = tasks / "setup-keys" / "task.toml"
    text = toml.read_text()
    if change[0] == "retries = 3":  # the healthcheck's own command replaced
        text = text.replace('\ncommand = "python3', '\n# command = "python3')
    toml.write_text(text.replace(*change))
    proc = run_bench(run_args("oracle", "--retry-attempts", "0"), env=bench_env, cwd=tmp_path)
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["error_category"] == "environment_setup", result
    assert result["error"].startswith(said), result["error"]
    assert result["rewards"] is None
    assert "task problem" in run_bench(["results", str(job)], env=bench_env, cwd=tmp_path).stdout
    assert proc.returncode == 1
