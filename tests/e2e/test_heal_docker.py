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
