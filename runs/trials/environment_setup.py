"""Before the agent starts: the task's setup commands (BenchFlow's), its healthcheck until it
passes (Harbor's, with Docker HEALTHCHECK's semantics), and its skills folder copied to where the
agent reads skills. Blocking: run in the loop's executor.
"""

from __future__ import annotations

import shlex
import tempfile
import time
from pathlib import Path

from runs.agents.base import Agent
from runs.sandboxes.docker import Sandbox
from runs.tasks.harbor_keys import Healthcheck
from runs.tasks.load import Task

SETUP_LOG = "setup.txt"  # in the attempt's agent/ (the sandbox's /logs/agent)
# Runs $0 with a time limit of $1 seconds where the image has coreutils' timeout (KILL: exit 137).
_LIMITED = (
    'c=$0; t=$1; if command -v timeout >/dev/null 2>&1; then exec timeout -s KILL "$t" sh -c "$c"; '
    'else exec sh -c "$c"; fi'
)
_KILLED = 137


class EnvironmentSetupError(Exception):
    """The task's environment did not get ready: a setup command failed, or the healthcheck
    never passed."""


def set_up(sandbox: Sandbox, task: Task, agent: Agent, attempt_dir: Path) -> None:
    """Setup commands, then the healthcheck, then the skills; raises EnvironmentSetupError."""
    log = attempt_dir / "agent" / SETUP_LOG
    for i, setup in enumerate(task.sandbox.setup_commands):
        target = sandbox.service(setup.service or "main")
        if target is None:
            raise EnvironmentSetupError(
                f"setup_commands[{i}]: the task has no service {setup.service!r} to run it in"
            )
        # main's output goes to /logs/agent/setup.txt from inside the sandbox (a daemon the
        # command starts keeps no pipe of ours open); another service's is not kept
        sink = f"/logs/agent/{SETUP_LOG}" if target is sandbox else "/dev/null"
        command = f"{{ {setup.command}\n}} >>{sink} 2>&1"
        result = target.exec(
            ["sh", "-c", _LIMITED, command, f"{setup.timeout_sec:g}"],
            user=setup.user,
            workdir=setup.cwd or task.sandbox.workdir,
            env={**task.sandbox.env, **setup.env} or None,
        )
        if result.exit_code != 0:
            why = (
                f"took longer than its timeout_sec={setup.timeout_sec:g}"
                if result.exit_code == _KILLED
                else f"exited {result.exit_code}"
            )
            tail = _tail(log) if target is sandbox else ""
            raise EnvironmentSetupError(
                f"the task's setup command {setup.command!r} {why}"
                + (f"; its last output: {tail}" if tail else "")
            )
    if task.sandbox.healthcheck is not None:
        wait_healthy(sandbox, task.sandbox.healthcheck, task.sandbox.workdir)
    if task.sandbox.skills_dir and (folder := agent.skills_folder()):
        copy_skills(sandbox, task.sandbox.skills_dir, folder, log)


def wait_healthy(sandbox: Sandbox, check: Healthcheck, workdir: str | None) -> None:
    """Run the check until it passes. During start_period_sec a failure does not count (tries
    every start_interval_sec); after it, `retries` failures in a row (every interval_sec) fail."""
    started = time.monotonic()
    failures, last = 0, ""
    while True:
        code, output = _check_once(sandbox, check, workdir)
        if code == 0:
            return
        last = f"exited {code}" if code != _KILLED else f"took over {check.timeout_sec:g} s"
        last += f" ({output})" if output else ""
        in_start_period = time.monotonic() - started < check.start_period_sec
        if not in_start_period:
            failures += 1
            if failures >= check.retries:
                raise EnvironmentSetupError(
                    f"the task's healthcheck {check.command!r} failed {failures} time(s) in a row "
                    f"after the sandbox started; the last try {last}"
                )
        time.sleep(check.start_interval_sec if in_start_period else check.interval_sec)


def _check_once(
    sandbox: Sandbox, check: Healthcheck, workdir: str | None
) -> tuple[int | None, str]:
    with tempfile.TemporaryDirectory(prefix="benchflow-health-") as folder:
        out = Path(folder) / "out.txt"
        result = sandbox.exec(
            ["sh", "-c", _LIMITED, check.command, f"{check.timeout_sec:g}"],
            workdir=workdir,
            stdout_path=out,
        )
        return result.exit_code, _tail(out)


def copy_skills(sandbox: Sandbox, source: str, target: str, log: Path) -> None:
    """The task's skills folder copied into the agent's, writable by the agent's user; a folder
    the image lacks is noted in setup.txt and skipped (as Harbor skips it)."""
    src, dest = shlex.quote(source), shlex.quote(target)
    script = (
        f"if [ -d {src} ]; then mkdir -p {dest} && cp -a {src}/. {dest}/ && chmod -R a+rwX {dest}; "
        f"else echo 'skills_dir {source} is not a folder in the sandbox: no skills copied' "
        f">>/logs/agent/{SETUP_LOG}; fi"
    )
    result = sandbox.exec(["sh", "-c", script], user="0")
    if result.exit_code != 0:
        raise EnvironmentSetupError(
            f"copying skills_dir {source} to {target} failed (exit {result.exit_code})"
        )


def _tail(path: Path, limit: int = 400) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    return text[-limit:].replace("\n", " | ")
