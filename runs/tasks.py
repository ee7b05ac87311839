"""Task loading and validation: Harbor's split layout and BenchFlow's native task.md layout.

Everything a trial needs from a task folder is read here, once, into a frozen Task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class TaskProblem:
    """One problem with a task, reported before any job folder exists."""

    file: Path  # the file holding the problem (task.toml, task.md, environment/Dockerfile, ...)
    field: str  # dotted key ("agent.timeout_sec"), or "" for a file-level problem
    message: str  # what is wrong
    fix: str  # what to do about it

    def __str__(self) -> str:
        where = f"{self.file}" + (f": {self.field}" if self.field else "")
        return f"{where}: {self.message}; fix: {self.fix}"


class TaskError(Exception):
    """Raised with every problem found, all at once."""

    def __init__(self, problems: list[TaskProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class SandboxConfig:
    docker_image: str | None = None  # prebuilt image instead of environment/Dockerfile
    build_timeout_sec: float = 600.0
    cpus: float = 1.0
    memory_mb: int = 2048
    network_mode: str = "public"  # public | no-network
    workdir: str | None = None  # None: the image's WORKDIR
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentConfig:
    timeout_sec: float | None = None  # None: no wall-clock cap
    user: str | None = None  # None: the image's user
    token_budget: int | None = None
    turn_budget: int | None = None
    prompt_prefix: str | None = None


@dataclass(frozen=True)
class VerifierConfig:
    timeout_sec: float = 600.0
    user: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    reward_range: tuple[float, float] = (0.0, 1.0)


@dataclass(frozen=True)
class Step:
    name: str
    instruction: str
    tests_dir: Path | None  # steps/<name>/tests (layered over the task's tests/)
    solution_dir: Path | None  # steps/<name>/solution
    agent: AgentConfig
    verifier: VerifierConfig
    min_reward: float | dict[str, float] | None = None


@dataclass(frozen=True)
class Task:
    name: str  # the folder's name
    path: Path  # absolute path of the task folder
    layout: str  # "split" (task.toml) or "native" (task.md)
    config_file: Path  # task.toml or task.md
    instruction: str
    environment_dir: Path | None  # environment/ (build context), None with docker_image
    tests_dir: Path  # tests/ (split) or verifier/ (native)
    solution_dir: Path | None  # solution/ (split) or oracle/ (native); None when absent
    sandbox: SandboxConfig
    agent: AgentConfig
    verifier: VerifierConfig
    steps: tuple[Step, ...] = ()
    multi_step_reward_strategy: str = "mean"  # mean | final
    metadata: dict = field(default_factory=dict)
