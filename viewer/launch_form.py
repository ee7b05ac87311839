"""The launch form, made from the RunSpec declarations (runs/spec.py): one field per setting a user
sets by hand, each with its flag's help, and each problem shown beside its field."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.http import QueryDict

from runs.operations import roots as paths
from runs.problems import Problem
from runs.spec import Option, options

# Fields the form shows beyond the `user_set` ones, and the ones it sets itself.
EXTRA = ("job",)
FIXED = ("jobs_dir", "fresh", "quiet", "redo")


@dataclass
class Field:
    name: str
    label: str  # the flag, as `bench run --help` names it
    help: str
    kind: str  # value | flag | list | env | tasks
    value: Any
    problems: list[str] = field(default_factory=list)


def _shown() -> list[tuple[str, Option, Any]]:
    out = []
    for f, opt in options():
        if f.name in FIXED or not (opt.user_set or f.name in EXTRA):
            continue
        default = f.default if not callable(f.default_factory) else f.default_factory()  # type: ignore[misc]
        out.append((f.name, opt, default))
    return out


def texts(post: QueryDict) -> dict[str, Any]:
    """The form's values by RunSpec field: lists and env pairs one per line."""
    values: dict[str, Any] = {}
    for name, opt, _default in _shown():
        if opt.kind == "flag":
            values[name] = "1" if post.get(name) else ""
        elif opt.kind in ("list", "env"):
            values[name] = [line for line in post.get(name, "").splitlines() if line.strip()]
        elif name in post:
            values[name] = post.get(name, "")
    return values


def _shown_value(kind: str, value: Any) -> Any:
    if value is None:
        return ""
    if kind in ("list", "env") and isinstance(value, list):
        return "\n".join(value)
    if isinstance(value, dict):
        return "\n".join(f"{k}=" for k in value)  # never echo a value back
    return value


def context(
    where: paths.Roots, given: Mapping[str, Any], problems: list[Problem]
) -> dict[str, Any]:
    by_field: dict[str, list[str]] = {}
    for p in problems:
        by_field.setdefault(p.field, []).append(p.text)
    fields = []
    for name, opt, default in _shown():
        kind = "tasks" if name == "tasks_dir" else opt.kind
        value = given.get(name, default)
        if name == "agent_env":
            # values are never shown again: a secret typed once is typed again after a refusal
            value = "\n".join(line.split("=", 1)[0] + "=" for line in given.get(name, []))
        fields.append(
            Field(
                name,
                opt.name if name != "tasks_dir" else "TASKS",
                opt.help,
                kind,
                _shown_value(kind, value),
                by_field.pop(name, []),
            )
        )
    folders = paths.task_folders(where)
    chosen = str(given.get("tasks_dir") or _first_with_tasks(folders))
    return {
        "fields": fields,
        "general": [t for texts_ in by_field.values() for t in texts_],
        "folders": [str(f) for f in folders],
        "chosen": chosen,
        "roots": [str(r) for r in where.task_roots],
        "jobs_dir": str(where.jobs_dir),
        **tasks_context(where, chosen),
    }


def tasks_context(where: paths.Roots, text: str) -> dict[str, Any]:
    """The tasks the chosen folder holds, each with `bench tasks check`'s verdict (no images)."""
    from runs.host_env import host_env
    from runs.task_check import check_tasks
    from runs.tasks.load import TaskError

    folder = paths.task_folder(text, where) if text else None
    if not isinstance(folder, Path):
        return {"tasks": [], "tasks_problem": folder.text if folder else ""}
    try:
        reports = check_tasks(folder, None, host_env(on_server=True))
    except TaskError as exc:
        return {"tasks": [], "tasks_problem": "; ".join(str(p) for p in exc.problems)}
    return {"tasks": reports[:500], "tasks_problem": "", "tasks_count": len(reports)}


def _first_with_tasks(folders: list[Path]) -> str:
    """The folder the form starts on: the first that holds tasks."""
    from runs.tasks.load import TaskError, find_task_dirs

    for folder in folders:
        try:
            if find_task_dirs(folder):
                return str(folder)
        except (TaskError, OSError):
            continue
    return str(folders[0]) if folders else ""
