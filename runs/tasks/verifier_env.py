"""Where a task's separate verifier runs (Harbor 0.26's rules, models/task/verifier_mode.py): its
image, whether the tests are in it, and the container's resources and network.

The image, in Harbor's order: [verifier.environment] docker_image (the tests are in it); else
tests/Dockerfile, built with tests/ as its context (the tests are in it: the Dockerfile copies
them to /tests); else the task's own image, with tests/ put at /tests as in a shared run. The
container gets [verifier.environment]'s cpus, memory, network, env and workdir, or a fresh copy
of the task's [environment]; [verifier] network_mode, when set, is its network.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from runs.tasks.config import SandboxConfig

if TYPE_CHECKING:
    from runs.tasks.load import Task

VERIFIER_DOCKERFILE = "Dockerfile"  # in tests/
VERIFIER_COMPOSE = "docker-compose.yaml"  # in tests/: Harbor's compose-based verifier


@dataclass(frozen=True)
class VerifierEnvironment:
    image: str | None  # a prebuilt image; None: `context` is built, or the task's own image
    context: Path | None  # tests/ when tests/Dockerfile is built
    bundled_tests: bool  # the image holds /tests; otherwise tests/ is put there
    sandbox: SandboxConfig  # the container's cpus, memory, network, env, workdir

    @property
    def source(self) -> str:
        """What the image is, in words, for errors and records."""
        if self.image:
            return f"verifier.environment.docker_image {self.image}"
        if self.context is not None:
            return f"{self.context / VERIFIER_DOCKERFILE}"
        return "the task's own image"


def verifier_environment(task: Task) -> VerifierEnvironment | None:
    """The separate verifier's environment, or None when the tests run in the agent's sandbox."""
    verifier = task.verifier
    if not verifier.separate or task.steps:
        return None
    own = verifier.environment
    sandbox = own if own is not None else task.sandbox
    if verifier.network_mode:
        sandbox = replace(sandbox, network_mode=verifier.network_mode)
    if own is not None and own.docker_image:
        return VerifierEnvironment(own.docker_image, None, True, sandbox)
    if (task.tests_dir / VERIFIER_DOCKERFILE).is_file():
        return VerifierEnvironment(None, task.tests_dir, True, sandbox)
    return VerifierEnvironment(None, None, False, sandbox)
