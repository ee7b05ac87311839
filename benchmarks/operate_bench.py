"""Operating from the browser, timed against the shell: launch to the first trial running, the
same `bench run` started from a shell as the baseline; and a cancel to no container left.

    .venv/bin/python benchmarks/operate_bench.py [--runs 5]

One `bench serve` (daphne) on a fresh index with an operator logged in over HTTP. Each round:
(1) the shell: `bench run examples -a oracle -i hello-world -j 1` started as a subprocess;
(2) the browser: the launch form POSTed with the same settings (checked, the job folder made, the
run started in a process of its own). Launch-to-first-trial-running is from just before the
command starts (1) or the POST is sent (2) to the `attempt_started` Event row of the job (written
when the first attempt starts, the same in both). Then a slow job (a script agent that sleeps)
is launched from the browser, and once its first sandbox exists the cancel is POSTed; cancel-to-
no-container is from the POST to `docker ps -a` by the job's label finding none. Medians of the
rounds. Targets: browser within 1 s of the shell; no container within 10 s. Writes
benchmarks/results/operate.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runs.events import AttemptStarted  # noqa: E402

EXAMPLES = REPO / "examples" / "tasks"
TARGET_LAUNCH_S = 1.0
TARGET_CANCEL_S = 10.0
PASSWORD = "bench-operate-pw-1"


def _bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "benchflow_site.cli", *args]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _first_running(db: Path, job_dir: Path, timeout: float = 120.0) -> float:
    """Epoch seconds of the job's first attempt_started Event row (the index's own clock)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
                row = conn.execute(
                    "SELECT e.created_at FROM runs_event e JOIN runs_job j ON j.id = e.job_id "
                    "WHERE j.path = ? AND e.kind = ? ORDER BY e.seq LIMIT 1",
                    (str(job_dir.resolve()), AttemptStarted.kind),
                ).fetchone()
        except sqlite3.OperationalError:
            row = None
        if row:
            text = str(row[0]).replace(" ", "T")
            when = datetime.fromisoformat(text)
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            return when.timestamp()
        time.sleep(0.005)
    raise RuntimeError(f"no attempt started in {job_dir} within {timeout:.0f} s")


def _new_job(jobs: Path, known: set[str], timeout: float = 30.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fresh = [p for p in jobs.iterdir() if p.is_dir() and p.name not in known]
        if fresh:
            known.add(fresh[0].name)
            return fresh[0]
        time.sleep(0.005)
    raise RuntimeError("no new job folder")


class Server:
    def __init__(self, home: Path, tasks: Path, jobs: Path):
        self.env = {
            **os.environ,
            "BENCHFLOW_HOME": str(home),
            "BENCHFLOW_TASK_ROOTS": str(tasks),
            "BENCHFLOW_JOBS_DIR": str(jobs),
            "BENCHFLOW_PASSWORD": PASSWORD,
        }
        self.env.pop("DATABASE_URL", None)
        self.env.pop("BENCHFLOW_REDIS_URL", None)
        subprocess.run(
            _bench("user", "add", "op", "--role", "operator"),
            env=self.env,
            check=True,
            capture_output=True,
        )
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            _bench("serve", "--port", str(self.port)),
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.http = httpx.Client(base_url=self.base, timeout=60)
        for _ in range(300):
            try:
                self.http.get("/login/")
                break
            except httpx.TransportError:
                time.sleep(0.1)
        self.http.post(
            "/login/",
            data={"username": "op", "password": PASSWORD, "csrfmiddlewaretoken": self.token()},
        )

    def token(self) -> str:
        self.http.get("/login/")
        return str(self.http.cookies["csrftoken"])

    def post(self, path: str, data: dict[str, Any]) -> httpx.Response:
        return self.http.post(
            path, data={**data, "csrfmiddlewaretoken": str(self.http.cookies["csrftoken"])}
        )

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _job_name(page: str) -> str:
    """The job folder's name from its page's path (/jobs/<name>/, or /jobs/<name>~<id>/)."""
    segment = unquote(page.rstrip("/").rsplit("/", 1)[-1])
    name, sep, pk = segment.rpartition("~")
    return name if sep and pk.isdigit() else segment


def _containers(job_name: str) -> int:
    import docker

    client = docker.from_env()
    return len(client.containers.list(all=True, filters={"label": f"benchflow.job={job_name}"}))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="operate-bench-"))
    tasks, jobs, home = work / "tasks", work / "jobs", work / "state"
    shutil.copytree(EXAMPLES, tasks / "examples")
    jobs.mkdir()
    slow = tasks / "slow.sh"
    slow.write_text("#!/bin/bash\nsleep 60\n")
    slow.chmod(0o755)
    server = Server(home, tasks, jobs)
    db = home / "benchflow.sqlite3"
    known: set[str] = set()
    shell_s: list[float] = []
    browser_s: list[float] = []
    cancel_s: list[float] = []
    form = {
        "tasks_dir": str(tasks / "examples"),
        "agent": "oracle",
        "include": "hello-world",
        "concurrency": "1",
        "warm_pool": "1",
        "trials": "1",
        "retry_attempts": "2",
        "agent_idle_timeout": "600",
    }
    try:
        for round_ in range(args.runs):
            t0 = time.time()
            proc = subprocess.Popen(
                _bench(
                    "run",
                    str(tasks / "examples"),
                    "-a",
                    "oracle",
                    "-i",
                    "hello-world",
                    "-j",
                    "1",
                    "--jobs-dir",
                    str(jobs),
                    "--fresh",
                    "--quiet",
                ),
                env=server.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            job = _new_job(jobs, known)
            shell_s.append(_first_running(db, job) - t0)
            proc.wait(120)
            t0 = time.time()
            response = server.post("/launch/", form)
            assert response.status_code == 303, response.text[:2000]
            job = jobs / _job_name(response.headers["location"])
            known.add(job.name)
            browser_s.append(_first_running(db, job) - t0)
            while not (job / "summary.json").is_file():
                time.sleep(0.05)
            # a slow job, cancelled once its sandbox exists
            response = server.post("/launch/", {**form, "agent": f"script:{slow}"})
            page = response.headers["location"]
            job = jobs / _job_name(page)
            known.add(job.name)
            _first_running(db, job)
            while _containers(job.name) == 0:
                time.sleep(0.02)
            t0 = time.monotonic()
            response = server.post(f"{page}cancel/", {})
            assert response.status_code == 302
            while _containers(job.name):
                time.sleep(0.02)
            cancel_s.append(time.monotonic() - t0)
            print(
                f"round {round_ + 1}: shell {shell_s[-1]:.2f} s, browser {browser_s[-1]:.2f} s, cancel {cancel_s[-1]:.2f} s",
                flush=True,
            )
    finally:
        server.stop()
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "runs": args.runs,
        "launch_to_first_running_s": {"shell": shell_s, "browser": browser_s},
        "median_shell_s": statistics.median(shell_s),
        "median_browser_s": statistics.median(browser_s),
        "median_difference_s": statistics.median(
            b - s for b, s in zip(browser_s, shell_s, strict=True)
        ),
        "cancel_to_no_container_s": cancel_s,
        "median_cancel_s": statistics.median(cancel_s),
        "targets": {"browser_minus_shell_s": TARGET_LAUNCH_S, "cancel_s": TARGET_CANCEL_S},
    }
    out = REPO / "benchmarks" / "results" / "operate.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"launch to first trial running: shell {result['median_shell_s']:.2f} s, browser {result['median_browser_s']:.2f} s "
        f"(difference {result['median_difference_s']:+.2f} s; target within {TARGET_LAUNCH_S:.0f} s)\n"
        f"cancel to no container: {result['median_cancel_s']:.2f} s (target under {TARGET_CANCEL_S:.0f} s)"
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
