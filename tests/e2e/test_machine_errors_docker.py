"""A full disk is a clean stop, not a crash: running trials stopped and their sandboxes removed,
one line naming the folder, the space to free and the resume command, a partial summary when it
fits; a resume after space is freed finishes the job. The jobs folder is a tmpfs of 3 MiB."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import job_dirs, results_of, run_bench, write_task

pytestmark = pytest.mark.docker

PASSES = "echo 1 > /logs/verifier/reward.txt\n"


@pytest.fixture
def small_disk(tmp_path):
    """A file system of 3 MiB for the jobs folder (a tmpfs: mounting needs root)."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("mounting a small tmpfs needs root")
        pytest.skip("mounting a small tmpfs needs root")
    where = tmp_path / "small"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)], check=True)
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_stops_the_job_cleanly_and_a_resume_finishes_it(
    docker_client, bench_env, tmp_path, small_disk
):
    # given four tasks whose agents print 2 MiB each (their logs fill a 3 MiB disk)
    for name in ("big1", "big2", "big3", "big4"):
        write_task(
            tmp_path / "tasks",
            name,
            test_sh=PASSES,
            solve_sh="head -c 2M /dev/zero | tr '\\0' x; echo\n",
        )
    # when the job runs with its folder on that disk
    ran = run_bench(
        ["run", "tasks", "-a", "oracle", "-j", "2", "--jobs-dir", str(small_disk)],
        env=bench_env,
        cwd=tmp_path,
    )
    # then it stops with one line: the folder, the space to free, the resume command
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "unexpected error" not in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
    [job] = job_dirs(small_disk)
    [line] = [x for x in ran.stderr.splitlines() if x.startswith("bench: stopped ")]
    assert "no space left on the device" in line and str(job) in line, line
    assert "free at least " in line and f"bench eval resume {job}" in line, line
    assert "running trials were stopped and their sandboxes removed" in line
    containers = docker_client.containers.list(
        all=True, filters={"label": f"benchflow.job_dir={job.resolve()}"}, sparse=True
    )
    assert containers == []
    partial = json.loads((job / "summary.json").read_text())
    assert partial["passed"] < 4
    # when space is freed, a resume finishes the job, every trial counted once
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    resumed = run_bench(["eval", "resume", str(job)], env=bench_env, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert sorted(r["trial_name"] for r in results_of(job)) == ["big1", "big2", "big3", "big4"]
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["total"], summary["passed"]) == (4, 4)
