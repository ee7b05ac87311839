"""Operating from the browser, in Debian's chromium against `bench serve`: an operator launches,
watches and regrades; cancels a slow job and resumes it; a viewer has no control; an admin reruns
errored trials from the admin panel. Every page runs under the content security policy."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import run_bench
from tests.jobfolders import name_in
from tests.runs.operations.server import Served, containers_of

pytestmark = [pytest.mark.browser, pytest.mark.docker, pytest.mark.database]


@pytest.fixture
def served(tmp_path, bench_env):
    s = Served(tmp_path, bench_env)
    yield s
    s.stop()


def _launch(
    page, served, *, agent="oracle", include=(), save_outputs=False, concurrency="1", tasks=None
):
    page.click("#nav-launch")
    page.select_option("#id_tasks_dir", str(tasks or served.tasks / "examples"))
    page.fill("#id_agent", agent)
    page.fill("#id_concurrency", concurrency)
    if include or save_outputs:  # typed patterns and the workspace: under "Advanced"
        page.evaluate("document.querySelector('#group-advanced details').open = true")
    if include:
        page.fill("#id_include", "\n".join(include))
    if save_outputs:
        page.check("#id_save_outputs")
    page.click("#launch")
    page.wait_for_url(served.base + "/jobs/*/")
    page.wait_for_selector("#live.on")
    page.evaluate("window.__notReloaded = true")
    return name_in(page.url)


def _finished(page, job: Path, timeout_s: float = 300) -> None:
    """The job's page shows it finished; else fail with what its console log says."""
    try:
        page.wait_for_selector("#progress b.finished", timeout=timeout_s * 1000)
    except Exception as exc:  # noqa: BLE001 - say why, not only that it timed out
        log = job / "console.log"
        said = log.read_text()[-3000:] if log.is_file() else "(no console.log)"
        raise AssertionError(
            f"{job.name} not shown finished: {exc}\nconsole.log:\n{said}"
        ) from None


def _shows(page, selector: str, job: Path, timeout_s: float = 60) -> None:
    """The page shows `selector`; else fail with what the page, the index and the run say (this
    wait failed once under load, its cause not recorded)."""
    try:
        page.wait_for_selector(selector, timeout=timeout_s * 1000)
    except Exception as exc:  # noqa: BLE001 - say why, not only that it timed out
        log = job / "console.log"
        said = log.read_text()[-3000:] if log.is_file() else "(no console.log)"
        controls = (
            page.locator("#job-controls").inner_html()
            if page.locator("#job-controls").count()
            else "(none)"
        )
        state = page.evaluate(
            "document.getElementById('live') && document.getElementById('live').textContent"
        )
        events = page.evaluate(
            "fetch(location.pathname + 'events.json?after=0').then(r => r.text())"
        )
        raise AssertionError(
            f"{selector} not shown on {page.url}: {exc}\nlive badge: {state}\n"
            f"controls: {controls[:1500]}\nevents.json: {events[-3000:]}\nconsole.log:\n{said}"
        ) from None


def _attempts(job: Path) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for result in job.glob("*__*/result.json"):
        doc = json.loads(result.read_text())
        found.setdefault(doc["trial_name"], []).append(doc)
    return found


def test_an_operator_launches_the_oracle_watches_it_finish_and_regrades_a_trial(
    chromium, served, docker_client
):
    page = served.login(chromium, "operator")
    # when an operator launches the oracle on three examples, keeping outputs for a regrade
    name = _launch(
        page, served, include=["hello-world", "count-words", "partial-credit"], save_outputs=True
    )
    # then its page follows it to the end without a reload
    job = served.jobs / name
    _finished(page, job)
    page.locator("#trials td.passed").nth(1).wait_for(timeout=60_000)
    assert page.evaluate("window.__notReloaded") is True
    # the same job folder, summary and console log as `bench run` writes and prints
    assert (job / "evaluation.json").is_file() and (job / "summary.json").is_file()
    console = (job / "console.log").read_text()
    assert "[PASS] hello-world" in console and "Score:" in console
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["total"], summary["agent"], summary["job_name"]) == (3, "oracle", name)
    # when the verifier is changed and the operator regrades hello-world with a reason
    test_sh = served.tasks / "examples" / "hello-world" / "tests" / "test.sh"
    test_sh.write_text("#!/bin/bash\nmkdir -p /logs/verifier\necho 0 > /logs/verifier/reward.txt\n")
    page.click("#trials a:text('hello-world')")
    page.wait_for_selector("#regrade")
    page.fill("#regrade-reason", "the check was too lenient")
    page.click("#regrade")
    page.wait_for_selector("#live.on")
    page.evaluate("window.__notReloaded = true")
    # then the change appears on the open page: before and after, with the reason
    row = page.locator("#regrades tr:has-text('the check was too lenient')")
    row.wait_for(timeout=120_000)
    assert "pass->fail" in row.inner_text()
    assert page.evaluate("window.__notReloaded") is True
    [attempt] = [p for p in job.glob("hello-world__*") if (p / "regrade.json").is_file()]
    regrade = json.loads((attempt / "regrade.json").read_text())
    assert regrade["latest"]["reason"] == "the check was too lenient"
    assert regrade["latest"]["by"] == "operator" and regrade["latest"]["new_reward"] == 0.0
    # and the job's page lists it with its before and after
    page.goto(f"{served.base}/jobs/{name}/")
    page.wait_for_selector("#job-regrades td:has-text('pass->fail')")
    # when the operator ticks two trials in the table and reruns them
    page.check("#trials input[value='hello-world']")
    page.check("#trials input[value='count-words']")
    t0 = time.time()
    page.click("#rerun")
    # then those two run again (hello-world now fails its stricter check), the third does not
    summary = job / "summary.json"
    deadline = time.time() + 300
    while time.time() < deadline and summary.stat().st_mtime < t0:
        time.sleep(1)  # the rerun writes the job's summary when it ends
    attempts = _attempts(job)
    assert [len(attempts[t]) for t in ("hello-world", "count-words", "partial-credit")] == [2, 2, 1]
    _finished(page, job)
    assert page.csp == []


def test_a_slow_job_is_cancelled_leaves_no_container_and_resumes_without_rerunning(
    chromium, served, docker_client
):
    slow = served.tasks / "slow.sh"
    slow.write_text("#!/bin/bash\nsleep 8\necho waited\n")
    slow.chmod(0o755)
    page = served.login(chromium, "operator")
    name = _launch(
        page,
        served,
        agent=f"script:{slow}",
        include=["hello-world", "count-words", "partial-credit", "python-pytest"],
    )
    job = served.jobs / name
    # when the first trial has finished and the second is running, the operator cancels
    page.locator("#trials td.failed, #trials td.passed").first.wait_for(timeout=120_000)
    page.wait_for_selector("#cancel")
    page.click("#cancel")
    _shows(page, "#resume", job)  # the job ended: the controls changed live
    # then no container of the job is left, and a partial summary was written
    deadline = time.monotonic() + 10
    while containers_of(docker_client, name) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert containers_of(docker_client, name) == []
    assert (job / "summary.json").is_file()
    finished_before = {t: len(a) for t, a in _attempts(job).items()}
    assert 1 <= len(finished_before) < 4
    assert "Terminated (SIGTERM)" in (job / "console.log").read_text()
    # when it is resumed, it finishes, and no trial that had finished ran again
    page.click("#resume")
    page.wait_for_selector("#live.on")
    page.locator("#trials td.failed, #trials td.passed").nth(3).wait_for(timeout=240_000)
    page.wait_for_selector("#progress b.finished", timeout=60_000)
    after = _attempts(job)
    assert sorted(after) == ["count-words", "hello-world", "partial-credit", "python-pytest"]
    for trial, count in finished_before.items():
        assert len(after[trial]) == count, trial
    assert page.csp == []


def test_a_viewer_sees_no_control_and_is_refused_the_post(
    chromium, served, tmp_path, docker_client
):
    done = run_bench(
        [
            "run",
            str(served.tasks / "examples"),
            "-a",
            "oracle",
            "-i",
            "hello-world",
            "--jobs-dir",
            str(served.jobs),
            "--quiet",
        ],
        env=served.env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    [job] = [p for p in served.jobs.iterdir() if p.is_dir()]
    page = served.login(chromium, "viewer")
    page.goto(f"{served.base}/jobs/{job.name}/")
    page.wait_for_selector("#trials")
    for control in ("#nav-launch", "#cancel", "#resume", "#rerun", "#regrade-job", "#pick-trials"):
        assert page.locator(control).count() == 0
    assert not page.locator("#trials input[value='hello-world']").is_visible()
    page.goto(f"{served.base}/jobs/{job.name}/hello-world/")
    assert page.locator("#regrade").count() == 0
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    for verb in ("resume", "regrade", "cancel"):
        response = page.request.post(
            f"{served.base}/jobs/{job.name}/{verb}/",
            form={"trials": "hello-world"},
            headers={"X-CSRFToken": token, "Referer": served.base + "/"},
        )
        assert response.status == 403, verb
    assert page.request.get(f"{served.base}/launch/").status == 403
    assert page.csp == []


def test_an_admin_reruns_errored_trials_from_the_admin_panel(chromium, served, docker_client):
    # given a job whose count-words verifier wrote no reward (an errored, unscored trial)
    grade = served.tasks / "examples" / "count-words" / "tests" / "test.sh"
    fixed = grade.read_text()
    grade.write_text("#!/bin/bash\nexit 0\n")
    page = served.login(chromium, "admin")
    name = _launch(page, served, include=["hello-world", "count-words"])
    job = served.jobs / name
    _finished(page, job)
    before = _attempts(job)
    assert before["count-words"][0]["rewards"] is None
    # when the verifier is fixed and the admin resumes the job from the admin panel
    grade.write_text(fixed)
    page.goto(f"{served.base}/admin/runs/job/")
    page.check(f"tr:has-text('{name}') input.action-select")
    page.select_option("select[name=action]", "resume_jobs")
    page.click("button[name=index]")
    page.wait_for_selector("li.success")
    # then the job runs again (shown running at once) and finishes
    page.goto(f"{served.base}/jobs/{name}/")
    _finished(page, job)
    page.locator("#trials td.passed").nth(1).wait_for(timeout=60_000)
    # the errored trial ran again and passed; the passed one did not run again
    after = _attempts(job)
    assert len(after["hello-world"]) == 1
    assert [a["rewards"] for a in after["count-words"]] in (
        [None, {"reward": 1.0}],
        [{"reward": 1.0}, None],
    )
    assert page.csp == []
