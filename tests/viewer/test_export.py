"""`bench view JOB [JOB...] --export out.html`: one self-contained file, redacted, that opens in
Chromium with every request refused and draws its grid, its charts and every trial."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import run_bench
from tests.e2e.browser import chromium  # noqa: F401 - a fixture for the browser test
from tests.jobfolders import result_doc, write_attempt, write_job, write_summary

pytestmark = pytest.mark.database  # bench view indexes the folders into the test's database

SECRET = "hunter2-very-secret-value"
SHAPED = "sk-live0123456789abcdefghij"  # a provider key that is in no environment


def _jobs(root: Path) -> list[Path]:
    jobs = []
    for name, rewards in (
        ("2026-11-29__01-00-00", [1.0, 0.0]),
        ("2026-11-29__02-00-00", [1.0, None]),
    ):
        job = write_job(root, name, plan=["x", "y"])
        for i, (task, reward) in enumerate(zip(["x", "y"], rewards, strict=True)):
            rollout = f"{task}__{name[-8:-6]}00000{i}"
            attempt = write_attempt(job, rollout, result_doc(task, rollout, reward))
            (attempt / "agent" / "opencode.txt").write_text(f"the key is {SECRET}; also {SHAPED}\n")
            call = {
                "request": {
                    "model": "m",
                    "messages": [{"role": "user", "content": f"use {SECRET}"}],
                },
                "response": {
                    "choices": [{"message": {"role": "assistant", "content": f"done {task}"}}]
                },
                "status": 200,
            }
            (attempt / "trajectory").mkdir()
            (attempt / "trajectory" / "llm_trajectory.jsonl").write_text(json.dumps(call) + "\n")
        write_summary(job)
        jobs.append(job)
    return jobs


@pytest.fixture
def exported(tmp_path, bench_env):
    jobs = _jobs(tmp_path / "jobs")
    env = {**bench_env, "MY_SERVICE_TOKEN": SECRET}
    out = run_bench(
        ["view", *[str(j) for j in jobs], "--export", "out.html"], env=env, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert "2 job(s), 4 trial(s)" in out.stdout and "[REDACTED]" in out.stdout
    return tmp_path / "out.html"


def test_the_export_holds_every_trial_and_no_secret_and_asks_nothing_of_a_server(exported):
    text = exported.read_text()
    assert SECRET not in text and SHAPED not in text and "[REDACTED]" in text
    # every trial, with its model calls
    for job in ("j0", "j1"):
        assert f'id="{job}-x"' in text and f'id="{job}-y"' in text
    assert "done x" in text and "done y" in text
    # nothing to fetch: no src, no stylesheet link, no URL but the page's own anchors
    assert not re.search(r"<(script|img|iframe)[^>]*\ssrc=", text)
    assert not re.search(r"<link[^>]*stylesheet", text)
    assert 'id="grid-data"' in text and 'id="pareto-data"' in text and "uPlot" in text


def test_export_names_a_bad_output_path(tmp_path, bench_env):
    jobs = _jobs(tmp_path / "jobs")
    out = run_bench(["view", str(jobs[0]), "--export", "out.txt"], env=bench_env, cwd=tmp_path)
    assert (
        out.returncode == 2 and "name an .html file" in out.stderr and "Traceback" not in out.stderr
    )


@pytest.mark.browser
def test_the_export_opens_in_chromium_with_the_network_refused(exported, chromium):  # noqa: F811
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    asked: list[str] = []

    def refuse(route):
        asked.append(route.request.url)
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            route.abort()

    context.route("**/*", refuse)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(exported.as_uri())
    page.wait_for_selector("#grid canvas[data-drawn='1'][data-passed='2']")
    page.wait_for_selector(".pareto canvas[data-points='2']")
    page.wait_for_selector("#chart-0 .uplot")
    # a trial's link opens its section, with its model calls
    page.click("a[href='#j1-y']")
    page.locator("#j1-y[open]").wait_for()
    assert "done y" in page.inner_text("#j1-y")
    assert [u for u in asked if not u.startswith("file:")] == [] and errors == []
    context.close()
