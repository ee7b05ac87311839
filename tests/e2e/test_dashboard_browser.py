"""The dashboard in a real browser (Debian's chromium): a job started in another process appears
live, its trials finish on the page without a reload, a transcript reads, agent output is text."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, make_agent
from tests.e2e.browser import Viewer

pytestmark = pytest.mark.browser


@pytest.fixture
def viewer(tmp_path, bench_env):
    (tmp_path / "jobs").mkdir()
    v = Viewer(tmp_path, bench_env, ["jobs"])
    yield v
    v.stop()


def _bench_run(tmp_path, env, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "benchflow_site.cli", "run", str(EXAMPLES), *args]
        + ["--jobs-dir", "jobs", "--quiet"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.docker
def test_a_run_started_elsewhere_appears_and_its_trials_finish_live(
    chromium, viewer, tmp_path, bench_env, docker_client
):
    # given the dashboard open on an empty jobs folder
    page = chromium.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(viewer.base + "/")
    page.wait_for_selector("#live.on")
    assert "No job yet" in page.content()
    page.evaluate("window.__notReloaded = true")
    # when bench run starts in another process: an agent that takes its time and prints a tag
    agent = make_agent(
        tmp_path, "slow.sh", "#!/bin/bash\nsleep 3\necho '<script>alert(1)</script>'\n"
    )
    run = _bench_run(
        tmp_path,
        bench_env,
        "-a",
        f"script:{agent}",
        "-i",
        "hello-world",
        "-i",
        "count-words",
        "-j",
        "1",
    )
    try:
        # then the job appears on the list without a reload
        page.wait_for_selector('#jobs-table a[href^="/jobs/"]', timeout=60_000)
        assert page.evaluate("window.__notReloaded") is True
        # and on its page the trials tick over as they finish (a locator: htmx may swap the table)
        page.click('#jobs-table a[href^="/jobs/"]')
        page.wait_for_selector("#live.on")
        page.evaluate("window.__notReloaded = true")
        # (a locator, not wait_for_function: the pages' content security policy forbids eval)
        page.locator("#trials td.failed, #trials td.passed").nth(1).wait_for(timeout=120_000)
        assert page.evaluate("window.__notReloaded") is True
        page.wait_for_selector("#progress b.finished", timeout=60_000)
    finally:
        out, _ = run.communicate(timeout=300)
    # the agent's output is shown as text, never run
    page.click("#trials a:text('hello-world')")
    page.wait_for_selector("pre:has-text('<script>alert(1)</script>')")
    assert dialogs == []


@pytest.mark.docker
def test_a_trial_transcript_reads_as_messages_and_tool_calls(
    chromium, viewer, tmp_path, bench_env, docker_client
):
    # given a real Claude Code run against the offline mock model
    run = _bench_run(tmp_path, bench_env, "-a", "claude", "-m", "mock/oracle", "-i", "hello-world")
    out, _ = run.communicate(timeout=600)
    assert run.returncode == 0, out
    page = chromium.new_page()
    page.goto(viewer.base + "/")
    page.click('#jobs-table a[href^="/jobs/"]')
    page.click("#trials a:text('hello-world')")
    # then its model calls read as a transcript: the tool call, its result, tokens per call
    transcript = page.wait_for_selector("#transcript .call")
    assert transcript is not None
    text = page.inner_text("#transcript")
    assert "Bash" in text and "echo hello > /app/hello.txt" in text
    assert "Bash completed with no output" in text and " in (" in text and "Done." in text


def test_dot_dot_paths_are_refused_in_the_browser(chromium, viewer, tmp_path):
    (tmp_path / "jobs" / "config.json").write_text('{"secret": "above the jobs"}')
    page = chromium.new_page()
    for path in ("/jobs/..%2f/", "/jobs/x/..%2f..%2f/", "/jobs/%2e%2e/config.json"):
        response = page.goto(viewer.base + path)
        assert response is not None and response.status == 404, path
        assert "above the jobs" not in page.content()
