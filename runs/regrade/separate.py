"""Regrading a trial whose task's verifier is separate: from the attempt's saved artifacts, as
Harbor's regrade does (trial/regrade.py). The verifier is given what the run handed it, the
artifacts/ the attempt kept (no --save-outputs needed), in a fresh container of its image."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from runs.results.attempts import Attempt, best_attempt
from runs.sandboxes.docker import Sandbox, SandboxFactory
from runs.tasks.load import Task
from runs.tasks.verifier_env import VerifierEnvironment
from runs.trials.judge import JudgeAccess
from runs.trials.separate_verifier import missing_artifacts, run_separate_verifier, verifier_image
from runs.trials.verifier import VerifierOutcome

NEVER_RAN = "its agent never ran (nothing was handed to a verifier); not regraded"


def separate_choice(attempts: list[Attempt], task: Task) -> tuple[Attempt, str | None]:
    """The trial's best attempt, and why its artifacts cannot be graded again (None: they can):
    its agent must have run, and every artifact the current task declares must be among them."""
    chosen = best_attempt(attempts)
    result = chosen.result or {}
    if not (result.get("rewards") or result.get("verifier_environment_mode")):
        return chosen, NEVER_RAN
    artifacts = Path(chosen.path) / "artifacts"
    if missing := missing_artifacts(artifacts, task.artifacts):
        return chosen, (
            f"its artifacts/ does not hold {', '.join(missing)}, which the task's separate "
            "verifier is given; not regraded"
        )
    return chosen, None


async def grade_from_artifacts(
    factory: SandboxFactory,
    task: Task,
    env: VerifierEnvironment,
    attempt_dir: Path,
    out_dir: Path,
    *,
    name: str,
    staging: Path,
    live: set[Sandbox],
    judged: Callable[[Sandbox], AbstractAsyncContextManager[JudgeAccess | None]] | None = None,
) -> tuple[str, VerifierOutcome]:
    """(the verifier's image, its outcome) on the attempt's artifacts/; the tests' output goes to
    out_dir/verifier. Raises VerifierImageError when the image cannot be had."""
    loop = asyncio.get_running_loop()
    image = await loop.run_in_executor(
        None, verifier_image, factory.images, task, env, out_dir / "build.log"
    )
    outcome = await run_separate_verifier(
        factory,
        task,
        env,
        image,
        name=name,
        artifacts_dir=attempt_dir / "artifacts",
        verifier_dir=out_dir / "verifier",
        staging=staging,
        live=live,
        judged=judged,
    )
    return image, outcome
