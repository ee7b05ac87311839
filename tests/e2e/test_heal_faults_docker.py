"""Jobs that heal themselves through a fault of Redis or PostgreSQL: a job handed to the worker
fleet finishes when Redis restarts or pauses, or PostgreSQL restarts, under it. Each test has a
Redis and a PostgreSQL of its own, which it may restart, so it runs on PostgreSQL in either half
of the suite: it is not marked `database` (the PostgreSQL half would run it again for nothing)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.scaleout import Cluster, Machine, PrivatePostgres, PrivateRedis, wait_for
from tests.e2e.test_heal_docker import (
    FOUR,
    containers_of,
    coordination,
    counted_once,
    detach,
    sleepers,
)

pytestmark = pytest.mark.docker


@pytest.fixture
def private(bench_env, tmp_path) -> Iterator[tuple[Cluster, PrivateRedis, PrivatePostgres]]:
    """A deployment of the test's own: its own Redis and PostgreSQL, which it may restart."""
    redis = PrivateRedis(tmp_path)
    redis.start()
    pg = PrivatePostgres(tmp_path / "pg")
    pg.start()
    env = {**bench_env, "DATABASE_URL": pg.url}
    cluster = Cluster(env, tmp_path, redis.url, pg.url)
    try:
        yield cluster, redis, pg
    finally:
        cluster.stop()
        redis.stop()
        pg.stop()


def pause_redis(redis: PrivateRedis) -> None:
    subprocess.run(
        ["redis-cli", "-p", str(redis.port), "CLIENT", "PAUSE", "30000", "ALL"],
        check=True,
        capture_output=True,
    )


FAULTS: dict[str, Callable[[PrivateRedis, PrivatePostgres], None]] = {
    "redis restarted": lambda redis, pg: (redis.stop(), time.sleep(2), redis.start()),
    "redis paused 30 s": lambda redis, pg: pause_redis(redis),
    "postgresql restarted": lambda redis, pg: pg.restart(),
}


@pytest.mark.parametrize("fault", [*FAULTS, "redis paused 30 s as the job starts"])
def test_the_job_finishes_through_a_fault_of_redis_or_postgresql(
    docker_client, private, tmp_path, fault
):
    # given two machines and four tasks of 8 s on the fleet, on a Redis and PostgreSQL of its own
    cluster, redis, pg = private
    sleepers(tmp_path, FOUR, 8)
    machines = [Machine(cluster, "m-one").start(), Machine(cluster, "m-two").start()]
    try:
        job = detach(cluster, tmp_path)
        if fault.endswith("as the job starts"):
            # when Redis is paused as a worker takes the job (its coordinator reads the job's
            # sealed values, and sends the first attempts)
            pause_redis(redis)
        else:
            wait_for(lambda: sum(len(m.started()) for m in machines) >= 2, 120, "two attempts")
            # when the fault happens mid-job
            FAULTS[fault](redis, pg)
        # then the job finishes with no person acting, each trial counted once, no container left
        wait_for(lambda: coordination(cluster, job)[0] == "ended", 300, "the job to end")
        wait_for(lambda: containers_of(docker_client, job) == [], 60, "no container of the job")
    finally:
        for machine in machines:
            machine.kill()
    counted_once(job)
    if fault.startswith("redis"):
        # one coordinator did it all: the coordinators' leases live in the database, not Redis
        assert coordination(cluster, job)[3] == []
