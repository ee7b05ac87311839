"""`bench serve` in a subprocess on a free loopback port, with task roots and a jobs folder of the
test's own and a user of each role, for the operating tests in a real browser."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import EXAMPLES, run_bench
from tests.e2e.browser import free_port, start_server

PASSWORD = "pw-for-the-tests-1"


class Served:
    """`machine`: run it on a machine of its own (a PID and UTS namespace with that host name, as
    tests/e2e/scaleout.py's Machine), so that `kill` takes the whole server at once."""

    def __init__(self, tmp_path: Path, env: dict[str, str], machine: str | None = None):
        self.tasks = tmp_path / "tasks"
        shutil.copytree(EXAMPLES, self.tasks / "examples")
        self.jobs = tmp_path / "jobs"
        self.jobs.mkdir()
        self.env = {
            **env,
            "BENCHFLOW_TASK_ROOTS": str(self.tasks),
            "BENCHFLOW_JOBS_DIR": str(self.jobs),
            "BENCHFLOW_PASSWORD": PASSWORD,
        }
        for role in ("viewer", "operator", "admin"):
            done = run_bench(["user", "add", role, "--role", role], env=self.env, cwd=tmp_path)
            assert done.returncode == 0, done.stderr
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / "server.log"
        on = ["unshare", "-fpu", "--mount-proc", "--kill-child", "--", "sh", "-c"]
        self.proc = start_server(
            "bench serve",
            [
                *([*on, 'hostname "$0" && exec "$@"', machine] if machine else []),
                *(sys.executable, "-m", "benchflow_site.cli", "serve", "--port", str(self.port)),
            ],
            tmp_path,
            self.env,
            self.log,
            self.base + "/login/",
        )

    def login(self, browser: Any, role: str) -> Any:
        """A page of a new browser context, logged in as the user of that role; it records any
        content security policy violation in page.csp."""
        page = browser.new_context().new_page()
        page.csp = []
        page.on(
            "console",
            lambda m: page.csp.append(m.text) if "Content Security Policy" in m.text else None,
        )
        page.goto(self.base + "/login/")
        page.fill("input[name=username]", role)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit], input[type=submit]")
        page.wait_for_url(self.base + "/")
        return page

    def kill(self) -> None:
        """The server's machine dies: every process on it at once."""
        self.proc.kill()
        self.proc.wait(30)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def containers_of(client: Any, job_name: str) -> list[str]:
    """`docker ps -a` by the job's label."""
    return [
        c.name
        for c in client.containers.list(all=True, filters={"label": f"benchflow.job={job_name}"})
    ]
