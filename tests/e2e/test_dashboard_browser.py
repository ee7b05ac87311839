"""The dashboard in a real browser (Debian's chromium): a job started in another process appears
live, its trials finish on the page without a reload, a transcript reads, agent output is text."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, make_agent
from tests.e2e.browser import Viewer

pytestmark = [pytest.mark.browser, pytest.mark.database]


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
    [result] = [
        json.loads(p.read_text()) for p in tmp_path.glob("jobs/*/hello-world__*/result.json")
    ]
    assert result["rewards"] == {"reward": 1.0} and result["agent_result"]["n_calls"] > 0, out
    page = chromium.new_page()
    page.goto(viewer.base + "/")
    page.click('#jobs-table a[href^="/jobs/"]')
    page.click("#trials a:text('hello-world')")
    # then its model calls, in the Files tab, read as a transcript: the tool call, its result,
    # tokens per call
    page.click('#tabs button[data-tab="files"]')
    try:
        page.wait_for_selector("#transcript .call", timeout=60_000)
    except Exception as exc:  # noqa: BLE001 - say what the page showed
        raise AssertionError(
            f"no transcript: {exc}\n{page.url}\n{page.content()[-3000:]}"
        ) from None
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


# The index's writer as `bench run` drives it: a job of three trials, one started and finished
# each time a line comes on stdin.
WRITER = """
import sys
from datetime import datetime
from pathlib import Path
from benchflow_site.django_setup import setup_django
setup_django()
from runs import events as ev
from runs.index import Index
from runs.results.trial_result import TrialResult
index = Index()
names = ["alpha", "beta", "gamma"]
job = Path("jobs/2026-12-02__12-00-00")
index(ev.JobStarted(job.name, str(job), {"agent": "oracle", "plan": names, "trials": 1}, 3, 0, 3, 1, 0))
index.flush()
print("ready", flush=True)
for i, name in enumerate(names):
    sys.stdin.readline()
    rollout = f"{name}__{i:08x}"
    index(ev.AttemptStarted(name, name, 0, 1, rollout))
    now = datetime.now().isoformat()
    result = {"started_at": now, "finished_at": now,"task_name": name, "trial_name": name, "trial_index": 0, "rollout_name": rollout,
              "attempt": 1, "agent": "oracle", "agent_name": "oracle", "model": None,
              "rewards": {"reward": float(i % 2 == 0)}, "timing": {"total": 1.0}}
    index(ev.AttemptFinished(name, rollout, TrialResult.from_json(result)))
    index.flush()
index.close()
"""


def test_each_hint_updates_the_job_page_with_one_request(chromium, tmp_path, bench_env):
    (tmp_path / "jobs" / "2026-12-02__12-00-00").mkdir(parents=True)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER],
        cwd=tmp_path,
        env=bench_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdin is not None and writer.stdout is not None
    assert writer.stdout.readline().strip() == "ready"
    viewer = Viewer(tmp_path, bench_env, ["jobs"])
    try:
        page = chromium.new_page()
        asked: list[str] = []
        page.goto(viewer.base + "/jobs/2026-12-02__12-00-00/")
        page.wait_for_selector("#live.on")
        page.wait_for_selector("#grid canvas[data-drawn='1']")
        page.evaluate("window.__notReloaded = true")
        page.on("request", lambda r: asked.append(r.url))
        # when the first trial finishes (passed), the progress, the trials and the grid change
        writer.stdin.write("next\n")
        writer.stdin.flush()
        page.locator("#progress", has_text="1 / 3").wait_for(timeout=30_000)
        page.locator("#grid canvas[data-passed='1']").wait_for(timeout=30_000)
        page.locator("#trials td.passed").first.wait_for(timeout=30_000)
        # and with the trials filtered to the failed ones, the next hints keep that filter
        page.click("#trials .filters a:text('failed')")
        page.locator("#trials", has_text="0 trial(s)").wait_for(timeout=30_000)
        writer.stdin.write("next\n")
        writer.stdin.flush()
        page.locator("#progress", has_text="2 / 3").wait_for(timeout=30_000)
        page.locator("#trials td.failed", has_text="failed").first.wait_for(timeout=30_000)
        assert page.locator("#trials tbody tr").count() == 1
        writer.stdin.write("next\n")
        writer.stdin.flush()
        page.locator("#progress", has_text="3 / 3").wait_for(timeout=30_000)
        page.locator("#grid canvas[data-passed='2']").wait_for(timeout=30_000)
        assert page.evaluate("window.__notReloaded") is True
        # and the chart is drawn from the series the last finish brought
        assert "uplot" in (page.get_attribute("#chart > div", "class") or "")
    finally:
        writer.communicate(timeout=60)
        viewer.stop()
    # one request per hint at most (two hints a trial: started, finished), and nothing per part
    live = [u for u in asked if "/live/" in u]
    parts = [u for u in asked if any(p in u for p in ("/grid/", "/chart.json", "/progress/"))]
    assert parts == [] and 3 <= len(live) <= 6, asked
    assert any("parts=finished" in u for u in live)
    after_filter = [u for u in live[live.index(next(u for u in live if "show=failed" in u)) :]]
    assert all("show=failed" in u for u in after_filter), live
