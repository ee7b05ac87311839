"""`bench tasks check`: every problem of each task folder, before any job, with its fix.

The same checks as `bench run`'s (task.toml / task.md, instruction, tests, symlinks), reported
task by task, plus the one a build would hit later: images this machine cannot have (the
task's, its sidecars', its separate verifier's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runs.host_env import NO_HOST_ENV, HostEnv
from runs.sandboxes.dockerfile_refs import (
    explain_missing_images,
    missing_base_images,
    missing_images,
)
from runs.tasks.load import Task, TaskError, find_task_dirs, load_task
from runs.tasks.verifier_env import VERIFIER_DOCKERFILE, verifier_environment


@dataclass
class TaskReport:
    path: Path
    problems: list[str] = field(default_factory=list)  # each "file: field: what; fix: how"
    warnings: list[str] = field(default_factory=list)  # accepted, but what runs will differ
    notes: list[str] = field(default_factory=list)  # worth knowing, not a failure

    @property
    def ok(self) -> bool:
        return not self.problems


def check_tasks(root: Path, client: Any | None, host: HostEnv = NO_HOST_ENV) -> list[TaskReport]:
    """A report per task folder under root (raises TaskError when root holds none). Without a
    Docker client the FROM images are not checked; ${VAR}s read what `host` allows."""
    reports = []
    for folder in find_task_dirs(root):
        report = TaskReport(folder)
        try:
            task = load_task(folder, host)
        except TaskError as exc:
            report.problems = [str(p) for p in exc.problems]
        else:
            report.warnings = [str(w) for w in task.warnings]
            if client is not None:
                report.problems += _image_problems(task, client, report.notes)
                report.problems += _compose_problems(task, client)
                report.problems += _verifier_image_problems(task, client)
            if (env := verifier_environment(task)) is not None:
                report.notes.append(
                    f"the verifier runs in a container of its own ({env.source}), given only the "
                    "declared artifacts and /logs/artifacts"
                )
            if servers := task.sandbox.mcp_servers:
                names = ", ".join(s.name for s in servers)
                report.notes.append(
                    f"MCP servers ({names}) are given to claude, codex and opencode; "
                    "oracle, nop and script agents run without them"
                )
            if task.sandbox.skills_dir:
                report.notes.append(
                    f"skills_dir {task.sandbox.skills_dir} is copied to where claude, codex and "
                    "opencode read skills; oracle, nop and script agents run without them"
                )
            stepped = bool(task.steps) and all(step.solution_dir for step in task.steps)
            if task.solution_dir is None and not stepped:
                report.notes.append("no solution/ (oracle/): `-a oracle` cannot check the task")
        reports.append(report)
    return reports


def _image_problems(task: Task, client: Any, notes: list[str]) -> list[str]:
    from runs.sandboxes.baseimages import local_base_images
    from runs.sandboxes.images import prebuilt_or_build

    prebuilt, why = prebuilt_or_build(task, client)
    if why:
        notes.append(why)
    if prebuilt:
        missing = missing_base_images(f"FROM {prebuilt}\n", client)
        if not missing:
            return []
        where = f"{task.config_file}: environment.docker_image"
        return [f"{where}: {explain_missing_images(missing, local_base_images(client))}"]
    if task.environment_dir is not None:
        problem = dockerfile_problem(task.environment_dir / "Dockerfile", client)
        return [problem] if problem else []
    return []


def dockerfile_problem(dockerfile: Path, client: Any) -> str | None:
    """The images a Dockerfile names that this machine cannot have, each with the instruction
    and line naming it, and the fix; None when it has them all."""
    from runs.sandboxes.baseimages import local_base_images

    text = dockerfile.read_text(errors="replace") if dockerfile.is_file() else ""
    missing = missing_images(text, client)
    if not missing:
        return None
    where = ", ".join(m.where for m in missing)
    available = local_base_images(client)
    return f"{dockerfile}: {where}: {explain_missing_images([m.image for m in missing], available)}"


def _verifier_image_problems(task: Task, client: Any) -> list[str]:
    """The images a separate verifier's image needs that this machine cannot have."""
    from runs.sandboxes.baseimages import local_base_images

    env = verifier_environment(task)
    if env is None:
        return []
    if env.image:
        if not missing_base_images(f"FROM {env.image}\n", client):
            return []
        where = f"{task.config_file}: verifier.environment.docker_image"
        explained = explain_missing_images([env.image], local_base_images(client))
        return [f"{where}: {explained}"]
    if env.context is not None:
        problem = dockerfile_problem(env.context / VERIFIER_DOCKERFILE, client)
        return [problem] if problem else []
    return []


def _compose_problems(task: Task, client: Any) -> list[str]:
    """What Docker Compose says of the merged files, and the sidecar images this machine cannot
    have (an image no registry here serves, a Dockerfile's FROM)."""
    from runs.sandboxes import compose
    from runs.sandboxes.baseimages import local_base_images

    file = task.compose_file
    if file is None:
        return []
    if not compose.available():
        return [f"{file}: {compose.MISSING}"]
    variables = compose.harbor_variables(
        context_dir=file.parent,
        image="benchflow-check",
        logs_dir=None,
        cpus=task.sandbox.cpus,
        memory_mb=task.sandbox.memory_mb,
    )
    env = compose.interpolation_env(task.sandbox.env, task.compose_env, variables)
    try:
        model = compose.resolve(file, file.parent, "benchflow-check", env)
    except compose.ComposeError as exc:
        return [f"{exc}; fix: correct the file (`docker compose config` says the same)"]
    problems = []
    for name, service in (model.get("services") or {}).items():
        if name == compose.MAIN:
            continue
        build = service.get("build")
        if build:
            dockerfile = Path(build["context"]) / build.get("dockerfile", "Dockerfile")
            if problem := dockerfile_problem(dockerfile, client):
                problems.append(problem)
            continue
        missing = missing_base_images(f"FROM {service.get('image')}\n", client)
        if missing:
            where = f"{file}: services.{name}.image"
            problems.append(
                f"{where}: {explain_missing_images(missing, local_base_images(client))}"
            )
    return problems
