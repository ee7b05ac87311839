"""What a task asks before its agent starts and after it stops: BenchFlow's setup commands, the
skills folder the agent is given, and Harbor's collect hooks and artifacts to copy out of the
sandbox."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runs.tasks.checker import Checker

SETUP_KEYS = {"command", "timeout_sec", "cwd", "env", "user", "service"}
ARTIFACT_KEYS = {"source", "destination", "exclude"}
COLLECT_KEYS = {"command", "service", "timeout_sec", "user"}


@dataclass(frozen=True)
class SetupCommand:
    """One of BenchFlow's [[environment.setup_commands]]: run in the sandbox before the agent."""

    command: str
    timeout_sec: float = 600.0
    cwd: str | None = None  # None: the task's workdir
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None  # None: the image's user
    service: str | None = None  # a compose service's container; None: main


@dataclass(frozen=True)
class Artifact:
    """A path of the sandbox copied into the attempt's artifacts/ after the verifier (Harbor's)."""

    source: str  # absolute path in the sandbox, a file or a folder
    destination: str  # relative to artifacts/; by default the source's path without its "/"
    exclude: tuple[str, ...] = ()  # glob patterns of a folder's paths left out


@dataclass(frozen=True)
class CollectHook:
    """Harbor's [[verifier.collect]]: a command run in a service of the agent's sandbox once the
    agent is done, before the artifacts are copied out (it may snapshot state into a file an
    artifact names). Best effort: a failure is logged, never the trial's."""

    command: str
    service: str = "main"
    timeout_sec: float = 60.0
    user: str | None = None


def collect_hooks(c: Checker, value: Any, where: str) -> tuple[CollectHook, ...]:
    if value is None:
        return ()
    fix = 'write [[verifier.collect]] tables with command = "..."'
    if not isinstance(value, list):
        c.add(where, f"must be a list of tables, got {type(value).__name__}", fix)
        return ()
    found: list[CollectHook] = []
    for i, item in enumerate(value):
        here = f"{where}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("command"), str):
            c.add(here, "needs a command (a shell string)", fix)
            continue
        c.unknown(item, COLLECT_KEYS, here)
        found.append(
            CollectHook(
                command=item["command"],
                service=c.text(item, "service", here, "main") or "main",
                timeout_sec=c.number(item, "timeout_sec", here, 60.0),
                user=c.text(item, "user", here, None),
            )
        )
    return tuple(found)


def setup_commands(c: Checker, raw: dict[str, Any], where: str) -> tuple[SetupCommand, ...]:
    value, at = raw.get("setup_commands", []), f"{where}.setup_commands"
    if not isinstance(value, list):
        fix = (
            'write setup_commands = ["service postgresql start"] or [[environment.setup_commands]]'
        )
        c.add(at, f"must be a list, got {type(value).__name__}", fix)
        return ()
    found: list[SetupCommand] = []
    for i, item in enumerate(value):
        here = f"{at}[{i}]"
        if isinstance(item, str):
            item = {"command": item}
        if not isinstance(item, dict) or not isinstance(item.get("command"), str):
            c.add(here, "needs a command (a shell string)", 'write command = "make setup"')
            continue
        for key in sorted(set(item) - SETUP_KEYS):
            c.warn(f"{here}.{key}", f"BenchFlow's setup_commands {key} is not applied here")
        cwd = c.text(item, "cwd", here, None)
        if cwd is not None and not cwd.startswith("/"):
            c.add(f"{here}.cwd", f"must be an absolute path, got {cwd!r}", 'write cwd = "/app"')
        found.append(
            SetupCommand(
                command=item["command"],
                timeout_sec=c.number(item, "timeout_sec", here, 600.0),
                cwd=cwd,
                env=c.env(item, "env", here),
                user=c.text(item, "user", here, None),
                service=c.text(item, "service", here, None),
            )
        )
    return tuple(found)


def skills_dir(c: Checker, raw: dict[str, Any], where: str) -> str | None:
    value = c.text(raw, "skills_dir", where, None)
    if value is not None and not value.startswith("/"):
        fix = 'write skills_dir = "/skills" (a folder the image holds)'
        c.add(f"{where}.skills_dir", f"must be an absolute path in the sandbox, got {value!r}", fix)
        return None
    return value


def artifacts(c: Checker, value: Any, where: str) -> tuple[Artifact, ...]:
    if value is None:
        return ()
    fix = 'write artifacts = ["/app/out.txt"] or [[artifacts]] with source = "/app/out"'
    if not isinstance(value, list):
        c.add(where, f"must be a list, got {type(value).__name__}", fix)
        return ()
    found: list[Artifact] = []
    for i, item in enumerate(value):
        here = f"{where}[{i}]"
        if isinstance(item, str):
            item = {"source": item}
        if not isinstance(item, dict):
            c.add(here, f"must be a path or a table, got {type(item).__name__}", fix)
            continue
        c.unknown(item, ARTIFACT_KEYS, here)
        source = item.get("source")
        if not isinstance(source, str) or not source.startswith("/"):
            c.add(f"{here}.source", f"must be an absolute path in the sandbox, got {source!r}", fix)
            continue
        destination = item.get("destination") or source.strip("/") or "root"
        exclude = item.get("exclude", [])
        parts = str(destination).split("/")
        if not isinstance(destination, str) or destination.startswith("/") or ".." in parts:
            c.add(
                f"{here}.destination",
                f"must be a path inside artifacts/, got {destination!r}",
                'write destination = "out" (relative to the attempt\'s artifacts/)',
            )
            continue
        if not isinstance(exclude, list) or not all(isinstance(p, str) for p in exclude):
            c.add(f"{here}.exclude", "must be a list of glob patterns", 'write exclude = ["*.tmp"]')
            continue
        found.append(Artifact(source.rstrip("/") or "/", destination, tuple(exclude)))
    return tuple(found)
