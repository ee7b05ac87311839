"""A cancel from another machine reaches a real `bench run` through its job folder: the run stops
as for SIGTERM (its trial stopped, its sandbox removed, a partial summary), and a request left
over from an earlier run does not stop the next one."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.conftest import EXAMPLES, job_dirs, make_agent
from tests.runs.operations.server import containers_of

pytestmark = [pytest.mark.docker, pytest.mark.database]


def _start(tmp_path, env, agent):
    return subprocess.Popen(
        [sys.executable, "-m", "benchflow_site.cli", "run", str(EXAMPLES), "-a", f"script:{agent}"]
        + ["-i", "hello-world", "--jobs-dir", "jobs", "--quiet"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait(what, check, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_cancel_request_in_the_job_folder_stops_the_run_as_sigterm(
    tmp_path, bench_env, docker_client
):
    # given a run whose agent sleeps, its sandbox up
    agent = make_agent(tmp_path, "slow.sh", "#!/bin/bash\nsleep 120\n")
    run = _start(tmp_path, bench_env, agent)
    try:
        [job] = _wait("the job folder", lambda: job_dirs(tmp_path / "jobs"))
        _wait("its sandbox", lambda: containers_of(docker_client, job.name))
        # when a cancel from another machine writes the request into the job folder
        t0 = time.monotonic()
        (job / ".cancel-request").write_text("SIGTERM from elsewhere\n")
        out, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    # then the run stopped as for SIGTERM, within seconds, and left no sandbox
    assert run.returncode == 143, out
    assert time.monotonic() - t0 < 30
    assert "SIGTERM" in out
    assert containers_of(docker_client, job.name) == []
    summary = json.loads(
        (job / "summary.json").read_text()
    )  # the partial summary: nothing finished
    assert (summary["planned"], summary["total"]) == (1, 0)
    assert not (job / ".cancel-request").exists()


def test_a_request_left_from_an_earlier_run_does_not_stop_the_next(
    tmp_path, bench_env, docker_client
):
    # given a job folder holding a request no run saw (it came after its run ended)
    agent = make_agent(tmp_path, "quick.sh", "#!/bin/bash\nsleep 3\necho hello > /app/out.txt\n")
    first = _start(tmp_path, bench_env, agent)
    first.communicate(timeout=300)
    [job] = job_dirs(tmp_path / "jobs")
    (job / ".cancel-request").write_text("SIGTERM from elsewhere\n")
    # when the job is run again (hello-world redone: its agent takes 3 s, the watch looks each 1 s)
    again = subprocess.run(
        [sys.executable, "-m", "benchflow_site.cli", "eval", "resume", str(job)]
        + ["--redo", "hello-world"],
        cwd=tmp_path,
        env=bench_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # then it was not stopped: the stale request was dropped, and the trial ran again to its end
    assert again.returncode in (0, 1), again.stdout + again.stderr
    assert "SIGTERM" not in again.stdout
    assert not (job / ".cancel-request").exists()
    assert len(list(job.glob("hello-world__*/result.json"))) == 2
