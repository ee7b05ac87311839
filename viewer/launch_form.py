"""The launch form, made from the RunSpec declarations (runs/spec.py): one field per setting a user
sets by hand, in four groups (what to run, how much, limits, advanced), each named in words with
its flag as a hint and its help beside it, and each problem shown beside its field. The agent is
offered from those this machine has, the model from the price table and the providers whose keys
are set (free text still allowed), and the tasks are ticked in the task table."""

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


# The groups, in order, and each field's name in words (a field in none goes to "advanced").
GROUPS: list[tuple[str, str, dict[str, str]]] = [
    (
        "what",
        "What to run",
        {"tasks_dir": "Task folder", "agent": "Agent", "model": "Model", "job": "Job name"},
    ),
    ("much", "How much", {"trials": "Repeats of each task", "concurrency": "Trials at once"}),
    (
        "limits",
        "Limits",
        {
            "max_cost_usd": "Stop the job at this spend (USD)",
            "max_tokens": "Stop the job at this many tokens",
            "max_sandbox_seconds": "Stop the job at this many sandbox-seconds",
            "max_rollouts": "Stop the job after this many attempts",
            "token_budget": "Tokens per trial",
            "turn_budget": "Model calls per trial",
            "agent_idle_timeout": "Stop an agent silent for (seconds)",
            "max_attempt_mb": "Largest attempt folder (MB)",
        },
    ),
    (
        "advanced",
        "Advanced",
        {
            "include": "Only tasks matching (names or globs)",
            "exclude": "Skip tasks matching",
            "agent_env": "Agent environment",
            "retry_attempts": "Retries of a trial that failed for a retryable reason",
            "save_outputs": "Keep each trial's final workspace (for regrades)",
            "warm_pool": "Sandboxes prepared ahead",
            "workers": "Where attempts run",
        },
    ),
]


@dataclass
class Field:
    name: str
    label: str  # in words
    help: str
    kind: str  # value | flag | list | env | tasks | agent | model
    value: Any
    problems: list[str] = field(default_factory=list)
    flag: str = ""  # the flag, as `bench run --help` names it: shown as a hint


@dataclass
class Group:
    key: str
    title: str
    fields: list[Field]

    @property
    def open(self) -> bool:
        """Shown open: a field of it has a problem, or a value typed (an include pattern, say)."""
        return any(f.problems or (f.kind in ("list", "env") and f.value) for f in self.fields)


def _group_of(name: str) -> tuple[str, str]:
    """A field's group key and its name in words."""
    for key, _title, labels in GROUPS:
        if name in labels:
            return key, labels[name]
    return "advanced", name.replace("_", " ")


def _shown() -> list[tuple[str, Option, Any]]:
    out = []
    for f, opt in options():
        if f.name in FIXED or not (opt.user_set or f.name in EXTRA):
            continue
        default = f.default if not callable(f.default_factory) else f.default_factory()  # type: ignore[misc]
        out.append((f.name, opt, default))
    return out


def texts(post: QueryDict) -> dict[str, Any]:
    """The form's values by RunSpec field: lists and env pairs one per line; the tasks ticked in
    the task table join the typed names of `include`."""
    values: dict[str, Any] = {}
    for name, opt, _default in _shown():
        if opt.kind == "flag":
            values[name] = "1" if post.get(name) else ""
        elif opt.kind in ("list", "env"):
            values[name] = [line for line in post.get(name, "").splitlines() if line.strip()]
        elif name in post:
            values[name] = post.get(name, "")
    picked = [name for name in post.getlist("pick") if name.strip()]
    if picked:
        values["include"] = list(dict.fromkeys([*picked, *values.get("include", [])]))
    return values


def agent_choices() -> list[tuple[str, str]]:
    """The agents to offer: the controls, and each CLI agent with whether it is installed here
    (one not installed is installed with npm on its first run)."""
    from runs.agents.install import SPECS, installed_folder
    from runs.agents.registry import CONTROL_AGENTS

    out = [(name, "control: no model") for name in CONTROL_AGENTS]
    for name, spec in SPECS.items():
        here = installed_folder(spec) is not None
        out.append((name, "installed" if here else "installed on its first run"))
    return out


def model_choices(gateway: Any) -> list[tuple[str, str]]:
    """The models to offer: the gateway's (priced models whose provider has a key here)."""
    offer = getattr(gateway, "model_choices", None)
    return list(offer()) if callable(offer) else [("mock/oracle", "mock: no key, no cost")]


def _shown_value(kind: str, value: Any) -> Any:
    if value is None:
        return ""
    if kind in ("list", "env") and isinstance(value, list):
        return "\n".join(value)
    if isinstance(value, dict):
        return "\n".join(f"{k}=" for k in value)  # never echo a value back
    return value


def context(
    where: paths.Roots, given: Mapping[str, Any], problems: list[Problem], gateway: Any = None
) -> dict[str, Any]:
    by_field: dict[str, list[str]] = {}
    for p in problems:
        by_field.setdefault(p.field, []).append(p.text)
    groups = {key: Group(key, title, []) for key, title, _labels in GROUPS}
    for name, opt, default in _shown():
        kind = {"tasks_dir": "tasks", "agent": "agent", "model": "model"}.get(name, opt.kind)
        value = given.get(name, default)
        if name == "agent_env":
            # values are never shown again: a secret typed once is typed again after a refusal
            value = "\n".join(line.split("=", 1)[0] + "=" for line in given.get(name, []))
        group, label = _group_of(name)
        groups[group].fields.append(
            Field(
                name,
                label,
                opt.help,
                kind,
                _shown_value(kind, value),
                by_field.pop(name, []),
                opt.name if name != "tasks_dir" else "TASKS",
            )
        )
    folders = paths.task_folders(where)
    chosen = str(given.get("tasks_dir") or _first_with_tasks(folders))
    return {
        "groups": list(groups.values()),
        "agents": agent_choices(),
        "models": model_choices(gateway),
        "picked": list(given.get("include") or []),
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
