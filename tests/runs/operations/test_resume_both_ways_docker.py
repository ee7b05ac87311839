"""The CLI and the browser resume each other's jobs, and `--redo` reruns a scored trial once:
`bench serve` and `bench` in subprocesses, real Docker, over HTTP (no browser needed)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import EXAMPLES, REPO, run_bench
from tests.jobfolders import name_in
from tests.runs.operations.server import PASSWORD, Served, containers_of

pytestmark = [pytest.mark.docker, pytest.mark.database]


@pytest.fixture
def served(tmp_path, bench_env):
    s = Served(tmp_path, bench_env)
    yield s
    s.stop()


def _operator(served: Served) -> httpx.Client:
    http = httpx.Client(base_url=served.base, timeout=60)
    http.get("/login/")
    http.post(
        "/login/",
        data={
            "username": "operator",
            "password": PASSWORD,
            "csrfmiddlewaretoken": http.cookies["csrftoken"],
        },
    )
    return http


def _post(http: httpx.Client, path: str, data: dict) -> httpx.Response:
    return http.post(path, data={**data, "csrfmiddlewaretoken": http.cookies["csrftoken"]})


def _results(job: Path) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for path in job.glob("*__*/result.json"):
        doc = json.loads(path.read_text())
        found.setdefault(doc["trial_name"], []).append(doc)
    return found


def _wait_summary(job: Path, since: float, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        path = job / "summary.json"
        if (
            path.is_file()
            and path.stat().st_mtime > since
            and not (job / ".operation.pid").exists()
        ):
            return json.loads(path.read_text())
        time.sleep(0.2)
    raise AssertionError(
        f"{job} wrote no summary; console: {(job / 'console.log').read_text() if (job / 'console.log').exists() else ''}"
    )


def test_a_browser_job_cancelled_is_finished_by_bench_eval_resume(served, tmp_path, docker_client):
    slow = served.tasks / "slow.sh"
    slow.write_text("#!/bin/bash\nsleep 4\n")
    slow.chmod(0o755)
    http = _operator(served)
    form = {
        "tasks_dir": str(served.tasks / "examples"),
        "agent": f"script:{slow}",
        "include": "hello-world\ncount-words\npartial-credit",
        "concurrency": "1",
    }
    response = _post(http, "/launch/", form)
    assert response.status_code == 303, response.text[:3000]
    page = response.headers["location"]
    job = served.jobs / name_in(page)
    # cancel once the first trial has finished
    deadline = time.monotonic() + 120
    while not _results(job) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _post(http, f"{page}cancel/", {}).status_code == 302
    _wait_summary(job, 0)
    first = {t: len(a) for t, a in _results(job).items()}
    assert 1 <= len(first) < 3
    deadline = time.monotonic() + 10
    while containers_of(docker_client, job.name) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert containers_of(docker_client, job.name) == []
    # when the CLI resumes the job the browser launched
    done = run_bench(["eval", "resume", str(job), "--quiet"], env=served.env, cwd=tmp_path)
    # then it finishes, with no finished trial run again
    assert done.returncode == 0, done.stdout + done.stderr
    after = _results(job)
    assert sorted(after) == ["count-words", "hello-world", "partial-credit"]
    assert all(len(after[t]) == n for t, n in first.items())


def test_a_cli_job_is_resumed_and_a_trial_rerun_from_the_browser(served, tmp_path, docker_client):
    # given a job the CLI ran, with count-words' verifier writing no reward (errored)
    grade = served.tasks / "examples" / "count-words" / "tests" / "test.sh"
    fixed = grade.read_text()
    grade.write_text("#!/bin/bash\nexit 0\n")
    done = run_bench(
        [
            "run",
            str(served.tasks / "examples"),
            "-a",
            "oracle",
            "-i",
            "hello-world",
            "-i",
            "count-words",
            "--jobs-dir",
            str(served.jobs),
            "--quiet",
        ],
        env=served.env,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # an errored trial
    [job] = [p for p in served.jobs.iterdir() if p.is_dir()]
    grade.write_text(fixed)
    http = _operator(served)
    run_bench(["index", str(job)], env=served.env, cwd=tmp_path)
    # when the browser resumes it: only the errored trial runs again
    t0 = time.time()
    page = http.get(f"/jobs/{job.name}/", follow_redirects=True).url.path
    assert _post(http, f"{page}resume/", {}).status_code == 302
    summary = _wait_summary(job, t0)
    after = _results(job)
    assert len(after["hello-world"]) == 1 and len(after["count-words"]) == 2
    assert summary["passed"] == 2
    assert (job / "console.log").is_file()  # the browser's part of the job printed there
    # when the browser reruns hello-world, which already passed
    t1 = time.time()
    assert _post(http, f"{page}resume/", {"trials": "hello-world"}).status_code == 302
    _wait_summary(job, t1)
    # then it has a second attempt, the request is in evaluation.json, and nothing else ran
    after = _results(job)
    assert len(after["hello-world"]) == 2 and len(after["count-words"]) == 2
    evaluation = json.loads((job / "evaluation.json").read_text())
    [request] = evaluation["redo"]
    assert list(request["trials"]) == ["hello-world"] and len(request["trials"]["hello-world"]) == 1
    # and a plain resume from the CLI afterwards runs nothing: the redo is not done twice
    done = run_bench(["eval", "resume", str(job)], env=served.env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "2 done, 0 to run" in done.stdout
    assert len(_results(job)["hello-world"]) == 2


def test_a_regrade_from_the_cli_reaches_the_dashboards_index(tmp_path, bench_env, docker_client):
    done = run_bench(
        [
            "run",
            str(EXAMPLES),
            "-a",
            "oracle",
            "-i",
            "hello-world",
            "--save-outputs",
            "--jobs-dir",
            "jobs",
            "--quiet",
        ],
        env=bench_env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    [job] = [p for p in (tmp_path / "jobs").iterdir() if p.is_dir()]
    done = run_bench(
        ["regrade", str(job), "--reason", "from a terminal"], env=bench_env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[REGRADE] hello-world: same" in done.stdout
    # in the commands' own index (SQLite under BENCHFLOW_HOME, or their PostgreSQL database)
    code = (
        "from benchflow_site.django_setup import setup_django; setup_django();"
        "from runs.models import Event;"
        "print(*Event.objects.order_by('id').values_list('kind', flat=True))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=bench_env, cwd=REPO, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["regrade_started", "regraded"]
