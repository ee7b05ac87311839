"""Hole 6 of issue 28: an agent writing into /logs (a bind mount on the attempt folder) is stopped
once the attempt folder passes --max-attempt-mb, with an error class of its own, not retried."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES, job_dirs, make_agent, results_of, run_args, run_bench

pytestmark = pytest.mark.docker

# 1 MB at a time, up to 300 MB over some 15 s: stopped early only by the cap
FILLER = """#!/bin/sh
i=0
while [ $i -lt 300 ]; do
  head -c 1048576 /dev/zero >> /logs/agent/fill.bin
  i=$((i+1))
  sleep 0.05
done
"""


def test_an_agent_filling_its_folder_is_stopped_at_the_cap_and_not_retried(
    docker_client, bench_env, tmp_path
):
    # given a script agent that writes 300 MB into /logs, and a cap of 8 MB
    agent = make_agent(tmp_path, "filler.sh", FILLER)
    # when it runs (two retries allowed)
    done = run_bench(
        run_args(
            f"script:{agent}",
            "--max-attempt-mb",
            "8",
            "--retry-attempts",
            "2",
            tasks=EXAMPLES,
            include=["hello-world"],
        ),
        env=bench_env,
        cwd=tmp_path,
    )
    # then its one attempt failed as attempt_disk, ungraded, well before the 300 MB
    (job,) = job_dirs(tmp_path / "jobs")
    results = results_of(job)
    assert len(results) == 1, (done.stdout, done.stderr)
    (result,) = results
    assert result["error_category"] == "attempt_disk", result.get("error")
    assert "--max-attempt-mb 8" in result["error"] and result["rewards"] is None
    filled = (job / result["rollout_name"] / "agent" / "fill.bin").stat().st_size
    assert 8 << 20 < filled < 300 << 20
    assert not docker_client.containers.list(
        all=True, filters={"label": f"benchflow.job={job.name}"}
    )
