"""The verifier: tests copied in after the agent, stale rewards removed, test.sh run, rewards read."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from runs.sandboxes.docker import Sandbox
from runs.sandboxes.files import populate, tree_files
from runs.tasks.load import Task
from runs.trials.judge import JudgeAccess, judge_env
from runs.trials.rewards import parse_rewards

TESTS_DIR = "/tests"
RUN_TESTS = "rm -f /logs/verifier/reward.txt /logs/verifier/reward.json; exec bash /tests/test.sh"


@dataclass
class VerifierOutcome:
    rewards: dict[str, float] | None
    error: str | None
    error_category: str | None
    exit_code: int | None
    duration_s: float


def _read(path: Path, limit: int = 1 << 20) -> str | None:
    """A reward file from the bind-mounted /logs/verifier; a symlink planted there is not followed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:
        return f"<{path.name} is not a regular file>"
    with os.fdopen(fd, "rb") as fh:
        return fh.read(limit).decode(errors="replace")


def verifier_env(task: Task, judge: JudgeAccess | None = None) -> dict[str, str] | None:
    """The one place the verifier's environment is made: the task's [verifier] env, with a
    judge's token and the proxy's URL where it names a provider's key (runs/trials/judge.py).
    Nothing of this machine's environment but what its ${VAR}s were allowed to read."""
    return judge_env(task.verifier.env, judge) or None


async def run_verifier(
    sandbox: Sandbox,
    task: Task,
    attempt_dir: Path,
    *,
    tests_dirs: list[Path] | None = None,
    timeout_sec: float | None = None,
    staged_tests: Path | None = None,
    judge: JudgeAccess | None = None,
) -> VerifierOutcome:
    """Grade what the agent left, in its own sandbox: copies tests/, runs test.sh, reads the
    reward from the bind-mounted /logs/verifier."""
    loop = asyncio.get_running_loop()
    verifier_dir = attempt_dir / "verifier"
    verifier_dir.mkdir(parents=True, exist_ok=True)
    sources = tests_dirs or [task.tests_dir]  # later folders (a step's tests) layer over earlier
    try:
        if staged_tests is not None:
            # /tests is a host folder mounted into the sandbox: filled only now the agent is done
            await loop.run_in_executor(None, populate, staged_tests, sources)
        else:
            files = {}
            for d in sources:
                files.update(tree_files(d, TESTS_DIR))
            await loop.run_in_executor(None, sandbox.put_files, files)
    except Exception as exc:  # noqa: BLE001 - any failure here is ours, not the task's
        return VerifierOutcome(
            None, f"failed to add tests directory: {exc}", "verifier_infra", None, 0.0
        )
    timeout = timeout_sec if timeout_sec is not None else task.verifier.timeout_sec
    return await run_tests(
        sandbox, task, verifier_dir, timeout=timeout, workdir=task.sandbox.workdir, judge=judge
    )


async def run_tests(
    sandbox: Sandbox,
    task: Task,
    verifier_dir: Path,
    *,
    timeout: float,
    workdir: str | None,
    network_mode: str | None = None,
    judge: JudgeAccess | None = None,
) -> VerifierOutcome:
    """Run /tests/test.sh in `sandbox` (stale rewards removed first) and read the reward it left
    in `verifier_dir`, the host folder mounted at /logs/verifier. `network_mode`: the network the
    tests had, said when they could not reach a host (the task's by default); `judge`: the
    verification's way to a model, when its env asks for one."""
    loop = asyncio.get_running_loop()
    fut = loop.run_in_executor(
        None,
        lambda: sandbox.exec(
            ["sh", "-c", RUN_TESTS],
            user=task.verifier.user,
            env=verifier_env(task, judge),
            workdir=workdir,
            stdout_path=verifier_dir / "test-stdout.txt",
            stderr_path=verifier_dir / "test-stderr.txt",
        ),
    )
    timed_out = False
    try:
        result = await asyncio.wait_for(asyncio.shield(fut), timeout)
    except TimeoutError:
        timed_out = True
        await loop.run_in_executor(None, sandbox.stop_processes)
        result = await fut
    if timed_out:
        return VerifierOutcome(
            None,
            f"verifier timed out after {timeout:g}s",
            "verifier_timeout",
            None,
            result.duration_s,
        )
    outcome = parse_rewards(
        _read(verifier_dir / "reward.txt"),
        _read(verifier_dir / "reward.json"),
        result.exit_code,
        task.verifier.reward_range,
    )
    category = None
    if outcome.error:
        category = (
            "verifier_no_reward"
            if "no reward file" in outcome.error.lower()
            else "verifier_bad_reward"
        )
    passed = outcome.rewards is not None and outcome.rewards.get("reward", 0.0) >= 1.0
    if not passed and (line := unreachable_host_line(verifier_dir)):
        # the tests could not reach a host (to fetch their dependencies, or what they check):
        # any reward they wrote says nothing about the agent's work
        network = network_mode or task.sandbox.network_mode
        where = " (the task's network_mode is no-network)" if network == "no-network" else ""
        return VerifierOutcome(
            None,
            f"verifier could not reach a host{where}: {line}",
            "verifier_unreachable",
            result.exit_code,
            result.duration_s,
        )
    return VerifierOutcome(
        outcome.rewards, outcome.error, category, result.exit_code, result.duration_s
    )


# What tools print when a host name does not resolve or no route leads to it (curl, wget, pip,
# uv, apt, git, Python's socket, Node). A refused connection is left out: that is most often a
# service of the task's own that is not up, the agent's business.
UNREACHABLE = (
    "could not resolve host",
    "temporary failure in name resolution",
    "name or service not known",
    "failed to lookup address information",
    "no address associated with hostname",
    "network is unreachable",
    "getaddrinfo enotfound",
    "unable to resolve host",
    "could not resolve proxy",
)


def unreachable_host_line(verifier_dir: Path, tail: int = 64 * 1024) -> str | None:
    """The last line of the tests' output saying a host could not be reached, if any."""
    found = None
    for name in ("test-stdout.txt", "test-stderr.txt"):
        try:
            with open(verifier_dir / name, "rb") as fh:
                fh.seek(max(fh.seek(0, 2) - tail, 0))
                text = fh.read().decode(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if any(marker in line.lower() for marker in UNREACHABLE):
                found = " ".join(line.split())[:300]
    return found
