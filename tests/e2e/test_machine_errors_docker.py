"""A full disk is a clean stop, not a crash: running trials stopped and their sandboxes removed,
one line naming the folder, the space to free and the resume command, a partial summary when it
fits; a resume after space is freed finishes the job. The jobs folder is a tmpfs of 3 MiB."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import job_dirs, results_of, run_args, run_bench, write_task

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


# --- on the worker fleet: a worker whose machine fails it ------------------------------------------

WORKERS_PAGE = """
from benchflow_site.django_setup import setup_django
setup_django()
from django.contrib.auth.models import User
from django.test import Client
user, _ = User.objects.get_or_create(username="looker")
client = Client(HTTP_HOST="127.0.0.1")
client.force_login(user)
print(client.get("/workers/").content.decode())
"""


def workers_page(cluster) -> str:
    """The dashboard's workers page as a logged-in viewer gets it (its HTML)."""
    shown = subprocess.run(
        [sys.executable, "-c", WORKERS_PAGE],
        cwd=cluster.cwd,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    return shown.stdout


def problem_of(cluster, worker: str) -> str:
    rows = cluster.lease_query("SELECT problem FROM runs_worker WHERE name = %s", worker)
    return rows[0][0] if rows else ""


def test_workers_whose_disk_fills_or_goes_read_only_stop_and_the_job_finishes_elsewhere(
    docker_client, cluster, tmp_path
):
    from tests.e2e.scaleout import Machine, wait_for
    from tests.e2e.test_heal_docker import containers_of, coordination

    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("a machine's own mounts need root")
        pytest.skip("a machine's own mounts need root")
    # given eight tasks whose agents wait 3 s and then print 2 MiB
    names = [f"big{i}" for i in range(1, 9)]
    for name in names:
        write_task(
            tmp_path / "tasks",
            name,
            test_sh=PASSES,
            solve_sh="sleep 3; head -c 2M /dev/zero | tr '\\0' x; echo\n",
        )
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    area = tmp_path / "full-disk"
    area.mkdir()
    # a machine whose view of the shared jobs folder writes to a disk of 1 MiB of its own (an
    # overlay: it reads what the others wrote), and one where the jobs folder is read-only
    full = Machine(
        cluster,
        "m-full",
        setup=f"mount -t tmpfs -o size=1m tmpfs {area} && mkdir {area}/up {area}/work && "
        f"mount -t overlay overlay -o lowerdir={jobs},upperdir={area}/up,workdir={area}/work "
        f"{jobs}",
    )
    read_only = Machine(
        cluster, "m-ro", setup=f"mount --bind {jobs} {jobs} && mount -o remount,bind,ro {jobs}"
    )
    good = Machine(cluster, "m-one", slots=1)
    try:
        # the job is handed to the fleet and coordinated on the machine that is well
        good.start()
        detached = cluster.bench(*run_args("oracle", "-j", "3", "--detach"), timeout=120)
        assert detached.returncode == 0, detached.stdout + detached.stderr
        [job] = job_dirs(jobs)
        wait_for(lambda: coordination(cluster, job)[1] == "m-one", 60, "m-one to take it")
        # when the machine with the small disk takes attempts: its disk fills
        full.start()
        wait_for(lambda: problem_of(cluster, "m-full-worker"), 180, "m-full to be in trouble")
        # when the read-only machine takes attempts
        read_only.start()
        wait_for(lambda: problem_of(cluster, "m-ro-worker"), 180, "m-ro to be in trouble")
        # then the job finishes on the machine that is well, and no container is left
        wait_for(lambda: coordination(cluster, job)[0] == "ended", 300, "the job to end")
        wait_for(lambda: containers_of(docker_client, job) == [], 60, "no container of the job")
        page = workers_page(cluster)
    finally:
        for machine in (full, read_only, good):
            machine.kill()
    # each failing worker says why on the workers page, and serves no queue
    assert "takes no attempt: no space left on the device" in problem_of(cluster, "m-full-worker")
    assert "takes no attempt: the file system is read-only" in problem_of(cluster, "m-ro-worker")
    assert "takes no attempt: no space left on the device" in page
    assert "takes no attempt: the file system is read-only" in page
    served = dict(cluster.lease_query("SELECT name, queues FROM runs_worker"))
    for sick in ("m-full-worker", "m-ro-worker"):
        assert served[sick] in ([], "[]"), served
    # their attempts ran again on m-one: every trial counted once
    assert sorted(r["trial_name"] for r in results_of(job)) == names
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["total"], summary["passed"], summary["n_attempts"]) == (8, 8, 8), summary
    lost = " ".join(lost for *_rest, lost in cluster.leases(job))
    assert "m-full-worker" in lost and "m-ro-worker" in lost, lost


def test_a_worker_out_of_open_files_stops_taking_messages_and_takes_them_again_when_well(
    docker_client, cluster, tmp_path
):
    from tests.e2e.scaleout import Machine, wait_for
    from tests.e2e.test_heal_docker import containers_of, coordination

    # given six tasks of 3 s handed to the fleet, coordinated on a machine that is well
    names = [f"t{i}" for i in range(1, 7)]
    for name in names:
        write_task(tmp_path / "tasks", name, test_sh=PASSES, solve_sh="sleep 3\n")
    good = Machine(cluster, "m-one", slots=1)
    sick = Machine(cluster, "m-files")
    try:
        good.start()
        detached = cluster.bench(*run_args("oracle", "-j", "3", "--detach"), timeout=120)
        assert detached.returncode == 0, detached.stdout + detached.stderr
        [job] = job_dirs(tmp_path / "jobs")
        wait_for(lambda: coordination(cluster, job)[1] == "m-one", 60, "m-one to take it")
        # when a second machine's worker is up, its status thread has its connection, and then
        # its process can open no more files (its limit lowered to what it has open)
        sick.start()
        seen = last_seen(cluster, "m-files-worker")
        wait_for(lambda: last_seen(cluster, "m-files-worker") != seen, 30, "its status round")
        [pid] = [p for p, line in sick.processes().items() if "benchflow_site.cli worker" in line]
        held = len(os.listdir(f"/proc/{pid}/fd"))
        was = soft_limit(pid)
        limit(pid, held)
        # then it says why within a few seconds, serves no queue, and the job finishes on m-one
        wait_for(lambda: problem_of(cluster, "m-files-worker"), 30, "m-files to be in trouble")
        wait_for(lambda: coordination(cluster, job)[0] == "ended", 300, "the job to end")
        problem = problem_of(cluster, "m-files-worker")
        queues_while_sick = served(cluster, "m-files-worker")
        # when its limit is raised again, it is well: it removes the sandboxes of the attempts it
        # gave up (which it could not reach the engine to remove then), and serves its queue
        limit(pid, was)
        wait_for(lambda: not problem_of(cluster, "m-files-worker"), 30, "m-files to be well")
        wait_for(lambda: served(cluster, "m-files-worker") not in ([], "[]"), 30, "its queue")
        wait_for(lambda: containers_of(docker_client, job) == [], 60, "no container of the job")
        log = sick.log()
    finally:
        for machine in (sick, good):
            machine.kill()
    assert "takes no attempt: this process has too many open files" in problem, problem
    assert queues_while_sick in ([], "[]"), queues_while_sick
    assert "well again: takes attempts" in log, log[-3000:]
    # every trial counted once, all passed
    assert sorted(r["trial_name"] for r in results_of(job)) == names
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["total"], summary["passed"], summary["n_attempts"]) == (6, 6, 6), summary


def last_seen(cluster, worker: str) -> object:
    rows = cluster.lease_query("SELECT last_seen_at FROM runs_worker WHERE name = %s", worker)
    return rows[0][0] if rows else None


def served(cluster, worker: str) -> object:
    rows = cluster.lease_query("SELECT queues FROM runs_worker WHERE name = %s", worker)
    return rows[0][0] if rows else None


def limit(pid: int, files: int) -> None:
    """Set a running process's soft open-file limit (its hard limit left as it is, so that it may
    be raised again with no capability)."""
    subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={files}:"], check=True)


def soft_limit(pid: int) -> int:
    line = next(x for x in open(f"/proc/{pid}/limits") if x.startswith("Max open files"))
    return int(line.split()[3])
