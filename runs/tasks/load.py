"""Task loading and validation: Harbor's split layout and BenchFlow's native task.md layout.

Everything a trial needs from a task folder is read here, once, into a frozen Task; the config
file itself is read and checked in `runs/tasks/config.py`.
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runs.host_env import NO_HOST_ENV, HostEnv
from runs.tasks.checker import Checker, TaskProblem, TaskWarning
from runs.tasks.compose_keys import compose_problems, compose_variables
from runs.tasks.config import (
    AGENT_KEYS,
    REWARD_STRATEGIES,
    SOLUTION_KEYS,
    TOP_KEYS,
    VERIFIER_KEYS,
    AgentConfig,
    SandboxConfig,
    Step,
    VerifierConfig,
    agent_config,
    first_dir,
    read_config,
    read_file_text,
    sandbox_config,
    steps_config,
    verifier_config,
)
from runs.tasks.harbor_keys import steps_verifier_warning
from runs.tasks.setup_keys import Artifact, artifacts


class TaskError(Exception):
    """Raised with every problem found, all at once."""

    def __init__(self, problems: list[TaskProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class Task:
    name: str  # the folder's name
    path: Path  # absolute path of the task folder
    layout: str  # "split" (task.toml) or "native" (task.md)
    config_file: Path  # task.toml or task.md
    instruction: str  # instruction.md or the task.md body; the runner prepends prompt_prefix
    environment_dir: Path | None  # environment/ (build context) when it holds a Dockerfile
    tests_dir: Path  # tests/ (split) or verifier/ (native)
    solution_dir: Path | None  # solution/ (split) or oracle/ (native); None when absent
    sandbox: SandboxConfig
    agent: AgentConfig
    verifier: VerifierConfig
    steps: tuple[Step, ...] = ()
    multi_step_reward_strategy: str = "mean"  # mean | final
    metadata: dict[str, Any] = field(default_factory=dict)  # free-form [metadata]
    solution_env: dict[str, str] = field(default_factory=dict)  # [solution]/[oracle] env
    solution_timeout_sec: float | None = None
    warnings: tuple[TaskWarning, ...] = ()  # keys accepted but not honoured in full: what differs
    compose_file: Path | None = None  # environment/docker-compose.yaml, merged over main
    artifacts: tuple[Artifact, ...] = ()  # copied out of the sandbox after the verifier
    # the allowed variables of this machine its Compose file names (all Compose may read of them)
    compose_env: dict[str, str] = field(default_factory=dict)


_NOT_HASHED = {"__pycache__", ".git", ".DS_Store", ".pytest_cache"}
_TASK_FOLDER_FIX = (
    "pass a task folder (task.toml + instruction.md + environment/Dockerfile + tests/test.sh, "
    "or task.md + environment/Dockerfile + verifier/test.sh), a folder of such task folders, "
    "or a folder holding tasks/ with them"
)


def _files(base: Path) -> list[Path]:
    """Files and symlinks under base, sorted by relative path; caches and .git skipped."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(base):  # does not follow symlinked folders
        here = Path(dirpath)
        found += [here / d for d in dirnames if (here / d).is_symlink()]
        dirnames[:] = [d for d in dirnames if d not in _NOT_HASHED and not (here / d).is_symlink()]
        found += [here / f for f in filenames if f not in _NOT_HASHED and not f.endswith(".pyc")]
    return sorted(found, key=lambda p: p.relative_to(base).as_posix())


def _symlink_problems(root: Path) -> list[TaskProblem]:
    problems = []
    for link in (p for p in _files(root) if p.is_symlink()):
        target = link.resolve()
        if not target.exists() or not target.is_relative_to(root):
            where = f"outside the task folder ({target})" if target.exists() else "to nothing"
            msg = f"symlink points {where}; such links cannot be uploaded into the sandbox"
            fix = "replace it with a copy of the file it points to"
            problems.append(TaskProblem(link, "", msg, fix))
    return problems


def load_task(path: Path, host: HostEnv = NO_HOST_ENV) -> Task:
    """Read and validate one task folder; raise TaskError listing every problem it has. Its
    ${VAR}s read only the variables `host` allows (runs/host_env.py)."""
    root = Path(path).resolve()
    md = root / "task.md"
    config_file = md if md.is_file() else root / "task.toml"  # task.md wins when both exist
    if not config_file.is_file() and (root / "task.yaml").is_file():
        raise TaskError([_terminal_bench_1(root)])
    if not config_file.is_file():
        msg = "holds neither task.toml nor task.md"
        raise TaskError([TaskProblem(root, "", msg, _TASK_FOLDER_FIX)])
    native = config_file == md
    c = Checker(config_file, host)
    data, body = read_config(c, config_file)
    if data is None:  # unreadable config: report it and skip the checks that depend on it
        raise TaskError(c.problems + _symlink_problems(root))
    c.unknown(data, TOP_KEYS, "")
    if data.get("reward"):
        c.warn(
            "reward",
            "BenchFlow's legacy reward expression is not applied: the verifier's reward file is the reward",
        )
    task_artifacts = artifacts(c, data.get("artifacts"), "artifacts")
    metadata = c.table(data, "metadata", None)
    c.table(data, "task", None)
    version = data.get("schema_version", data.get("version"))
    if version is not None and str(version).split(".")[0] != "1":
        c.add("schema_version", f"unsupported version {version!r}", 'write schema_version = "1.3"')
    if "solution" in data and "oracle" in data:
        msg = "both [solution] and [oracle] are declared; they are the same table"
        c.add("oracle", msg, "keep one of them")
    sol_key = "oracle" if "oracle" in data else "solution"
    sol_raw = c.table(data, sol_key, SOLUTION_KEYS)
    sandbox = sandbox_config(c, data)
    agent = agent_config(c, c.table(data, "agent", AGENT_KEYS), "agent", AgentConfig())
    verifier = verifier_config(
        c, c.table(data, "verifier", VERIFIER_KEYS), "verifier", VerifierConfig()
    )
    strategy = c.choice(data, "multi_step_reward_strategy", "", REWARD_STRATEGIES) or "mean"
    t, s = ("verifier", "tests", "oracle", "solution"), ("tests", "verifier", "solution", "oracle")
    names = t if native else s  # each layout's own names first, the other's as a fallback
    tests_dir = first_dir(root / names[0], root / names[1])
    solution_dir = first_dir(root / names[2], root / names[3])
    shared_test = (tests_dir / "test.sh").is_file()
    steps = (
        steps_config(c, data["steps"], root, (agent, verifier, shared_test))
        if "steps" in data
        else ()
    )
    if steps:
        separate = ["verifier"] if verifier.separate else []
        separate += [f"steps[{i}].verifier" for i, st in enumerate(steps) if st.verifier.separate]
        steps_verifier_warning(c, separate[:1])
    elif verifier.separate and (tests_dir / "docker-compose.yaml").is_file():
        msg = "a verifier made of several containers (tests/docker-compose.yaml) is not run here"
        fix = (
            "give the verifier one image: tests/Dockerfile, or [verifier.environment] docker_image"
        )
        c.add("verifier.environment_mode", msg, fix, tests_dir / "docker-compose.yaml")

    instruction_file = config_file if native else root / "instruction.md"
    instruction = (body if native else read_file_text(c, instruction_file) or "").strip()
    if not instruction and not steps:
        fix = f"write the prompt into {'the body after the frontmatter' if native else 'instruction.md'}"
        c.add("", "the instruction is missing or empty", fix, instruction_file)
    env_dir = root / "environment"
    has_dockerfile = (env_dir / "Dockerfile").is_file()
    if sandbox.docker_image is None and not has_dockerfile:
        msg = "missing: no environment/Dockerfile and no docker_image"
        fix = "create environment/Dockerfile (FROM python:3.12-slim, WORKDIR /app) or set docker_image"
        c.add("", msg, fix, env_dir / "Dockerfile")
    compose_file = compose_problems(c, env_dir, set(sandbox.env))
    if not shared_test and not steps:
        fix = f"create {tests_dir.name}/test.sh writing a number to /logs/verifier/reward.txt"
        c.add("", "missing: the verifier entrypoint does not exist", fix, tests_dir / "test.sh")
    solution_env = c.env(sol_raw, "env", sol_key)
    solution_timeout_sec = c.number(sol_raw, "timeout_sec", sol_key, None)
    if problems := c.problems + _symlink_problems(root):
        raise TaskError(problems)
    return Task(
        name=root.name,
        path=root,
        layout="native" if native else "split",
        config_file=config_file,
        instruction=instruction,
        environment_dir=env_dir if has_dockerfile else None,
        tests_dir=tests_dir,
        solution_dir=solution_dir if (solution_dir / "solve.sh").is_file() else None,
        sandbox=sandbox,
        agent=agent,
        verifier=verifier,
        steps=steps,
        multi_step_reward_strategy=strategy,
        metadata=dict(metadata),
        solution_env=solution_env,
        solution_timeout_sec=solution_timeout_sec,
        warnings=tuple(c.warnings),
        compose_file=compose_file,
        artifacts=task_artifacts,
        compose_env=compose_variables(compose_file, host),
    )


def _terminal_bench_1(root: Path) -> TaskProblem:
    """Terminal-Bench 1's layout is not run as is: what to do about it, in one problem."""
    msg = (
        "a Terminal-Bench 1 task (task.yaml, run-tests.sh, solution.sh); this runner reads "
        "Harbor's layout (task.toml, instruction.md, environment/, tests/test.sh writing "
        "/logs/verifier/reward.txt, solution/solve.sh), which Terminal-Bench 2 uses"
    )
    fix = (
        f"convert it with Harbor's converter: `pip install harbor` (Python 3.12+), then "
        f"`harbor tasks migrate -i {root.parent} -o {root.parent}-harbor` and "
        f"`bench run {root.parent}-harbor`; it writes task.yaml's instruction to instruction.md, "
        "its max_agent_timeout_sec and max_test_timeout_sec to [agent] and [verifier] "
        "timeout_sec, solution.sh to solution/solve.sh, run-tests.sh to tests/test.sh with the "
        "reward written, and docker-compose.yaml's main service to environment/"
    )
    return TaskProblem(root / "task.yaml", "", msg, fix)


def _is_task_dir(path: Path) -> bool:
    return path.is_dir() and any(
        (path / name).is_file() for name in ("task.toml", "task.md", "task.yaml")
    )


def find_task_dirs(root: Path) -> list[Path]:
    """The task folders under root: root itself, its task subfolders, or those of root/tasks/."""
    root = Path(root)
    if _is_task_dir(root):
        return [root]
    for base in (root, root / "tasks"):
        kids = sorted(base.iterdir(), key=lambda d: d.name) if base.is_dir() else []
        if found := [d for d in kids if not d.name.startswith(".") and _is_task_dir(d)]:
            return found
    what = "is not a task folder and holds no task folders" if root.exists() else "does not exist"
    raise TaskError([TaskProblem(root, "", what, _TASK_FOLDER_FIX)])


def load_tasks(
    root: Path,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    host: HostEnv = NO_HOST_ENV,
) -> list[Task]:
    """The selected tasks under root, validated; one TaskError carries every problem of every task."""
    dirs = find_task_dirs(root)
    names, include, exclude = [d.name for d in dirs], list(include), list(exclude)
    problems: list[TaskProblem] = []
    for pattern in (p for p in include if not fnmatch.filter(names, p)):
        close = difflib.get_close_matches(pattern, names, n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(map(repr, close))}?" if close else f"tasks: {names}"
        msg, fix = f"{pattern!r} matches no task; {hint}", f"pass --include {(close or names)[0]}"
        problems.append(TaskProblem(Path(root), "include", msg, f"{fix} (a name or a glob)"))

    def picked(name: str) -> bool:
        wanted = not include or any(fnmatch.fnmatchcase(name, p) for p in include)
        return wanted and not any(fnmatch.fnmatchcase(name, p) for p in exclude)

    selected = [d for d in dirs if picked(d.name)]
    if not selected and not problems:
        msg, fix = "no task is left after --include/--exclude", "loosen --exclude or --include"
        problems.append(TaskProblem(Path(root), "exclude", msg, fix))
    tasks: list[Task] = []
    for d in selected:
        try:
            tasks.append(load_task(d, host))
        except TaskError as e:
            problems += e.problems
    if problems:
        raise TaskError(problems)
    return tasks


def folder_digest(base: Path) -> str:
    h = hashlib.sha256()
    for p in _files(base) if base.is_dir() else []:
        rel = p.relative_to(base).as_posix().encode()
        data = b"->" + os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
        mode = b"x" if not p.is_symlink() and p.stat().st_mode & 0o111 else b"-"
        h.update(len(rel).to_bytes(8, "big") + rel + mode + len(data).to_bytes(8, "big") + data)
    return f"sha256:{h.hexdigest()}"


def task_digest(task: Task) -> str:
    """sha256 over every file of the task folder (relative paths, executable bits, contents)."""
    return folder_digest(task.path)


def environment_digest(task: Task) -> str:
    """sha256 over the environment/ build context (and a docker_image beside it), or over the
    prebuilt image's name.

    Tasks with identical build contexts share a digest, so they can share one image.
    """
    image = task.sandbox.docker_image
    if task.environment_dir is None:
        return f"sha256:{hashlib.sha256(f'image:{image}'.encode()).hexdigest()}"
    digest = folder_digest(task.environment_dir)
    if image:  # the image used may be the prebuilt one or the build: both name it
        return f"sha256:{hashlib.sha256(f'{digest} image:{image}'.encode()).hexdigest()}"
    return digest
