"""Jobs that heal themselves: a job handed to the worker fleet (`bench run --detach`) goes on when
a machine of the deployment dies. Each machine is a PID and UTS namespace of its own (tests/e2e/
scaleout.py: Machine), so a kill takes everything on it at once. The job finishes with no person
acting, every trial counted once, and no container left."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import job_dirs, results_of, run_args, write_task
from tests.e2e.scaleout import Cluster, Machine, wait_for
from tests.runs.operations.server import Served
from tests.security.served import Operator

pytestmark = [pytest.mark.docker, pytest.mark.database]

SLIM = "FROM debian:bookworm-slim\nWORKDIR /app\n"
PASSES = "echo 1 > /logs/verifier/reward.txt\n"
FOUR = ["alpha", "beta", "gamma", "delta"]


def sleepers(root: Path, names: list[str], seconds: float) -> None:
    for name in names:
        write_task(
            root / "tasks", name, dockerfile=SLIM, test_sh=PASSES, solve_sh=f"sleep {seconds}\n"
        )


def coordination(cluster: Cluster, job: Path) -> tuple[str, str, int, list]:
    """(state, host, fence, handovers) of the job's coordination row."""
    rows = cluster.lease_query(
        "SELECT state, host, fence, handovers FROM runs_coordination WHERE job_path = %s",
        str(job.resolve()),
    )
    if not rows:
        return ("", "", 0, [])
    state, host, fence, handovers = rows[0]
    return state, host, fence, handovers if isinstance(handovers, list) else json.loads(handovers)


def containers_of(docker_client, job: Path) -> list:
    label = f"benchflow.job_dir={job.resolve()}"
    return docker_client.containers.list(all=True, filters={"label": label}, sparse=True)


def test_the_coordinators_machine_dies_and_another_worker_adopts_the_job(
    docker_client, cluster, tmp_path
):
    # given two machines, each with a worker, and four tasks of 8 s handed to the fleet at -j 2
    sleepers(tmp_path, FOUR, 8)
    machines = {m.name: m for m in (Machine(cluster, "m-one"), Machine(cluster, "m-two"))}
    try:
        for machine in machines.values():
            machine.start()
        detached = cluster.bench(*run_args("oracle", "-j", "2", "--detach"), timeout=120)
        assert detached.returncode == 0, detached.stdout + detached.stderr
        assert "handed to the worker fleet" in detached.stdout
        [job] = job_dirs(tmp_path / "jobs")
        wait_for(lambda: coordination(cluster, job)[0] == "running", 60, "a worker to take it")
        wait_for(lambda: sum(len(m.started()) for m in machines.values()) >= 2, 120, "two attempts")
        # when the coordinator's machine dies (its worker and its attempts with it)
        _state, lost_host, fence, _ = coordination(cluster, job)
        machines[lost_host].kill()
        survivor = next(m for name, m in machines.items() if name != lost_host)
        # then the other machine adopts the job and finishes it, no person acting
        wait_for(lambda: coordination(cluster, job)[2] > fence, 60, "another worker to adopt it")
        wait_for(lambda: coordination(cluster, job)[0] == "ended", 300, "the job to end")
        # the lost machine comes back: its worker sweeps the containers its dead processes left
        machines[lost_host].start()
        wait_for(lambda: containers_of(docker_client, job) == [], 60, "no container of the job")
        shown = cluster.bench("results", str(job))
    finally:
        for machine in machines.values():
            machine.kill()
    state, host, _fence, handovers = coordination(cluster, job)
    assert host == survivor.name
    [handover] = handovers
    assert (handover["from"], handover["to"], handover["why"]) == (lost_host, survivor.name, "lost")
    # every trial counted once: in the results, the summary and its rollout count
    assert sorted(r["trial_name"] for r in results_of(job)) == sorted(FOUR)
    counted = Counter(r["trial_name"] for r in results_of(job))
    assert set(counted.values()) == {1}
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["total"], summary["passed"]) == (4, 4)
    # where it was coordinated, and the handover, as `bench results` says them
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"coordinator on {lost_host} lost at " in shown.stdout, shown.stdout
    assert f"adopted by {survivor.name} at " in shown.stdout, shown.stdout


def detach(cluster: Cluster, tmp_path: Path) -> Path:
    detached = cluster.bench(*run_args("oracle", "-j", "2", "--detach"), timeout=120)
    assert detached.returncode == 0, detached.stdout + detached.stderr
    [job] = job_dirs(tmp_path / "jobs")
    return job


def counted_once(job: Path) -> None:
    """Every trial once in the results and the summary, all passed."""
    names = [r["trial_name"] for r in results_of(job)]
    assert sorted(names) == sorted(FOUR), names
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["total"], summary["passed"], summary["n_attempts"]) == (4, 4, 4), summary


def test_a_workers_machine_dies_and_its_attempts_run_again_counted_once(
    docker_client, cluster, tmp_path
):
    # given two machines and four tasks of 8 s on the fleet
    sleepers(tmp_path, FOUR, 8)
    machines = {m.name: m for m in (Machine(cluster, "m-one"), Machine(cluster, "m-two"))}
    try:
        for machine in machines.values():
            machine.start()
        job = detach(cluster, tmp_path)
        wait_for(lambda: coordination(cluster, job)[0] == "running", 60, "a worker to take it")
        coordinator_host = coordination(cluster, job)[1]
        other = next(m for name, m in machines.items() if name != coordinator_host)
        wait_for(lambda: len(other.started()) >= 1, 120, "an attempt on the other machine")
        # when the machine that runs attempts but does not coordinate dies
        other.kill()
        # then the job finishes, the lost attempts run again elsewhere, counted once
        wait_for(lambda: coordination(cluster, job)[0] == "ended", 300, "the job to end")
        other.start()  # back: it sweeps what its dead processes left
        wait_for(lambda: containers_of(docker_client, job) == [], 60, "no container of the job")
    finally:
        for machine in machines.values():
            machine.kill()
    assert coordination(cluster, job)[3] == []  # its coordinator never changed
    counted_once(job)


def test_the_web_servers_machine_dies_after_a_launch_and_the_job_goes_on(
    docker_client, cluster, tmp_path
):
    # given a worker machine, and a web machine running `bench serve` on which an operator logs in
    # and launches a job from the form (over HTTP, as a browser posts it, CSRF token and all)
    worker = Machine(cluster, "m-one").start()
    served = Served(tmp_path, cluster.env, machine="web")
    operator = Operator(served)
    try:
        sleepers(served.tasks / "fleet", FOUR, 4)
        page = operator.launch(
            tasks_dir=str(served.tasks / "fleet" / "tasks"), agent="oracle", concurrency="2"
        )
        assert page.status_code == 303, page.text[-2000:]
        [job] = job_dirs(served.jobs)
        # when the web machine dies at once (the server holds no job state)
        served.kill()
        # then the job finishes on the fleet with no person acting
        wait_for(lambda: coordination(cluster, job)[0] == "ended", 300, "the job to end")
        wait_for(lambda: containers_of(docker_client, job) == [], 60, "no container of the job")
    finally:
        operator.close()
        served.kill()
        worker.kill()
    assert coordination(cluster, job)[1] == "m-one"
    counted_once(job)


def test_an_operator_drains_the_coordinators_machine_and_the_job_moves(
    docker_client, cluster, tmp_path
):
    # given two machines and four tasks of 8 s on the fleet
    sleepers(tmp_path, FOUR, 8)
    machines = [Machine(cluster, "m-one").start(), Machine(cluster, "m-two").start()]
    try:
        job = detach(cluster, tmp_path)
        wait_for(lambda: coordination(cluster, job)[0] == "running", 60, "a worker to take it")
        wait_for(lambda: sum(len(m.started()) for m in machines) >= 2, 120, "two attempts")
        host = coordination(cluster, job)[1]
        # when an operator drains that machine
        drained = cluster.bench("drain", host)
        assert drained.returncode == 0, drained.stdout + drained.stderr
        assert f"{job.name}: moves off {host}" in drained.stdout
        # then a worker elsewhere takes the job over, and it finishes, each trial counted once
        wait_for(lambda: coordination(cluster, job)[1] not in ("", host), 60, "the handover")
        wait_for(lambda: coordination(cluster, job)[0] == "ended", 300, "the job to end")
        wait_for(lambda: containers_of(docker_client, job) == [], 60, "no container of the job")
    finally:
        for machine in machines:
            machine.kill()
    [handover] = coordination(cluster, job)[3]
    assert (handover["from"], handover["why"]) == (host, "drained")
    counted_once(job)


def console(job: Path) -> str:
    path = job / "console.log"
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_frozen_coordinators_job_finishes_without_it_and_it_wakes_up_fenced(
    docker_client, cluster, tmp_path
):
    # given two machines and four tasks of 8 s on the fleet
    sleepers(tmp_path, FOUR, 8)
    machines = {m.name: m for m in (Machine(cluster, "m-one"), Machine(cluster, "m-two"))}
    try:
        for machine in machines.values():
            machine.start()
        job = detach(cluster, tmp_path)
        wait_for(lambda: coordination(cluster, job)[0] == "running", 60, "a worker to take it")
        wait_for(lambda: sum(len(m.started()) for m in machines.values()) >= 2, 120, "two attempts")
        _state, frozen_host, fence, _ = coordination(cluster, job)
        frozen = machines[frozen_host]
        survivor = next(m for name, m in machines.items() if name != frozen_host)
        [old] = [pid for pid, cmd in frozen.processes().items() if " _coordinate " in cmd]
        # when the coordinator's machine freezes (every process on it stopped) past its lease
        frozen.freeze()
        # then the other machine's worker takes the job over, waits a lease's length for the
        # frozen coordinator's lock on the job folder, replaces it and goes on (a database
        # transaction the frozen one had open may still hold its rows until it wakes)
        wait_for(lambda: coordination(cluster, job)[2] > fence, 60, "another worker to adopt it")
        wait_for(lambda: "going on without it" in console(job), 60, "the adopter to go on")
        assert Path(f"/proc/{old}").exists()  # still frozen
        # when the frozen machine wakes up
        frozen.thaw()
        # then its coordinator finds its fence moved on and stops, writing nothing, the job
        # finishes once, and the woken worker removes the containers of the attempts it lost
        wait_for(lambda: not Path(f"/proc/{old}").exists(), 60, "the woken coordinator to stop")
        wait_for(lambda: coordination(cluster, job)[0] == "ended", 300, "the job to end")
        wait_for(lambda: containers_of(docker_client, job) == [], 60, "no container of the job")
    finally:
        for machine in machines.values():
            machine.thaw()
            machine.kill()
    state, host, _fence, handovers = coordination(cluster, job)
    assert host == survivor.name
    [handover] = handovers
    assert (handover["from"], handover["to"], handover["why"]) == (
        frozen_host,
        survivor.name,
        "lost",
    )
    said = console(job)
    assert "stops here" in said, said[-3000:]
    counted_once(job)
    # the job finished once: one JobFinished in the index, from the coordinator that took over
    finished = cluster.query(
        "SELECT COUNT(*) FROM runs_event e JOIN runs_job j ON j.id = e.job_id "
        "WHERE j.path = %s AND e.kind = %s",
        str(job.resolve()),
        "job_finished",
    )
    assert finished == [(1,)], finished


def test_a_job_cancelled_before_any_worker_took_it_never_runs(docker_client, cluster, tmp_path):
    import os
    import signal

    # given the fleet's one worker, frozen: it looks up, and takes nothing
    sleepers(tmp_path, ["alpha"], 0)
    worker = cluster.start_worker()
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        job = detach(cluster, tmp_path)
        assert coordination(cluster, job)[:3] == ("queued", "", 0)
        # when it is cancelled before any worker took it
        cancelled = cluster.bench("cancel", str(job))
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert "no worker had taken it, and none will start it" in cancelled.stdout
        # then the worker, awake (its queue held the job's message), and a job run after it,
        # never start it
        os.kill(worker.pid, signal.SIGCONT)
        later = cluster.bench(*run_args("oracle", "--detach", jobs_dir="later"), timeout=120)
        assert later.returncode == 0, later.stdout + later.stderr
        [other] = job_dirs(tmp_path / "later")
        wait_for(lambda: coordination(cluster, other)[0] == "ended", 180, "the later job to end")
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    assert coordination(cluster, job)[:3] == ("ended", "", 0)
    assert not (job / "evaluation.json").exists()
    assert cluster.leases(job) == []
    [(state,)] = cluster.query("SELECT state FROM runs_job WHERE path = %s", str(job.resolve()))
    assert state == "interrupted"
