"""Where the browser may point: task folders under BENCHFLOW_TASK_ROOTS, jobs under
BENCHFLOW_JOBS_DIR.

A path from a form or a URL is resolved (symlinks followed) and refused unless what it resolves
to lies under a configured root: a link inside a root that leads out of it is refused too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from runs.environment import setting
from runs.problems import Problem

TASK_ROOTS_VAR = "BENCHFLOW_TASK_ROOTS"
JOBS_DIR_VAR = "BENCHFLOW_JOBS_DIR"


@dataclass(frozen=True)
class Roots:
    """The folders an operation from the browser may read tasks from and write jobs into."""

    task_roots: tuple[Path, ...]
    jobs_dir: Path

    @classmethod
    def from_env(cls, environ: os._Environ[str] | dict[str, str] | None = None) -> Roots:
        tasks = [p for p in setting(TASK_ROOTS_VAR, "", environ).split(os.pathsep) if p.strip()]
        jobs = setting(JOBS_DIR_VAR, "", environ).strip() or "jobs"
        return cls(tuple(Path(p).resolve() for p in tasks), Path(jobs).resolve())


def under(path: Path, root: Path) -> bool:
    """Whether `path`, fully resolved, is `root` or lies inside it (root resolved too)."""
    resolved, base = path.resolve(), root.resolve()
    return resolved == base or base in resolved.parents


def task_folder(text: str, roots: Roots) -> Path | Problem:
    """A tasks folder named on the launch form: relative to the first task root, or absolute;
    what it resolves to must lie under a task root."""
    text = text.strip()
    if not roots.task_roots:
        return Problem(
            "tasks_dir",
            f"TASKS: no task roots are configured; fix: set {TASK_ROOTS_VAR} (folders separated "
            f"by '{os.pathsep}') for bench serve",
        )
    if not text:
        return Problem("tasks_dir", "TASKS: pick a tasks folder")
    candidate = Path(text) if Path(text).is_absolute() else roots.task_roots[0] / text
    if not any(under(candidate, root) for root in roots.task_roots):
        return Problem(
            "tasks_dir",
            f"TASKS: {text} is not under a configured task root ({', '.join(map(str, roots.task_roots))}); "
            "fix: pick one of the folders listed",
        )
    resolved = candidate.resolve()
    if not resolved.is_dir():
        return Problem("tasks_dir", f"TASKS: {text} is not a folder")
    return resolved


def job_folder(path: Path | str, roots: Roots) -> Path | Problem:
    """A job folder an operation acts on: it must resolve to a folder under BENCHFLOW_JOBS_DIR."""
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = roots.jobs_dir / candidate
    if not under(candidate, roots.jobs_dir) or candidate.resolve() == roots.jobs_dir:
        return Problem(
            "job",
            f"{path} is not a job folder under {roots.jobs_dir} ({JOBS_DIR_VAR}); "
            "operations from the browser act only on jobs there",
        )
    return candidate.resolve()


def task_folders(roots: Roots) -> list[Path]:
    """The folders the launch form offers: each root, and each folder directly inside one (not
    hidden), those that resolve outside every root left out."""
    found: list[Path] = []
    for root in roots.task_roots:
        if not root.is_dir():
            continue
        found.append(root)
        for entry in sorted(root.iterdir()):
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            if any(under(entry, r) for r in roots.task_roots):
                found.append(entry.resolve())
    return list(dict.fromkeys(found))
