"""The job page's controls follow the job's state even when the state changes while the page is
still loading: a hint that arrives before htmx has processed the page must not be lost."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.runs.operations.server import Served

pytestmark = [pytest.mark.browser, pytest.mark.database]

JOB = "2026-12-02__12-00-00"

# The index's writer as `bench run` drives it: a running job of one trial that ends (as a cancel
# ends it) when a line comes on stdin.
WRITER = """
import sys
from pathlib import Path
from benchflow_site.django_setup import setup_django
setup_django()
from runs import events as ev
from runs.index import Index
index = Index()
job = Path(sys.argv[1])
index(ev.JobStarted(job.name, str(job), {"agent": "oracle", "plan": ["alpha"], "trials": 1}, 1, 0, 1, 1, 0))
index.flush()
print("ready", flush=True)
sys.stdin.readline()
index(ev.JobFinished(job.name, str(job), str(job.parent), {}, "interrupted", 1.0, 1, 0, False, 0, 1, False))
index.flush()
print("ended", flush=True)
index.close()
"""


@pytest.fixture
def served(tmp_path, bench_env):
    s = Served(tmp_path, bench_env)
    yield s
    s.stop()


def test_a_job_that_ends_while_its_page_loads_shows_the_resume_control(chromium, served):
    job = served.jobs / JOB
    job.mkdir()
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(job)],
        env=served.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdin is not None and writer.stdout is not None
    try:
        assert writer.stdout.readline().strip() == "ready"
        page = served.login(chromium, "operator")

        # the page's last deferred script is held back (DOMContentLoaded with it), and the job
        # ends meanwhile: its hint reaches a page whose socket may already be open
        def held(route):
            time.sleep(1.0)  # the scripts before it have run
            writer.stdin.write("end\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == "ended"
            time.sleep(1.0)  # the hint has gone out
            route.continue_()

        page.route("**/static/viewer/chart.js", held)
        page.goto(f"{served.base}/jobs/{JOB}/")
        page.wait_for_selector("#resume", timeout=15_000)
        assert page.locator("#cancel").count() == 0
        page.wait_for_selector("#progress b.interrupted")
        assert page.csp == []
    finally:
        writer.communicate(timeout=60)
