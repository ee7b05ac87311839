"""Reading a task's config with every problem collected, not raised: the problem, warning and checker
types that runs/tasks/config.py and runs/tasks/harbor_keys.py share."""

from __future__ import annotations

import difflib
import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runs.env_names import env_problem
from runs.host_env import NO_HOST_ENV, HostEnv
from runs.secrets import MODEL_KEY_VARS

_EXAMPLES = {"cpus": 2, "memory_mb": 2048, "token_budget": 200000, "turn_budget": 50}
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


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


@dataclass(frozen=True)
class TaskWarning:
    """A key the task sets that this runner accepts but cannot honour in full: what will differ."""

    file: Path
    field: str
    message: str

    def __str__(self) -> str:
        return (
            f"{self.file}: {self.field}: {self.message}"
            if self.field
            else f"{self.file}: {self.message}"
        )


def _kind(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class Checker:
    """Reads typed values out of one config file, collecting every problem instead of raising."""

    def __init__(self, file: Path, host: HostEnv = NO_HOST_ENV) -> None:
        self.file = file
        self.host = host  # the variables a ${VAR} may read (runs/host_env.py)
        self.problems: list[TaskProblem] = []
        self.warnings: list[TaskWarning] = []

    def add(self, key: str, message: str, fix: str, file: Path | None = None) -> None:
        self.problems.append(TaskProblem(file or self.file, key, message, fix))

    def warn(self, key: str, message: str, file: Path | None = None) -> None:
        self.warnings.append(TaskWarning(file or self.file, key, message))

    def unknown(self, table: dict[str, Any], allowed: set[str], prefix: str) -> None:
        for key in (k for k in table if k not in allowed):
            dotted = f"{prefix}.{key}" if prefix else key
            close = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.6)
            if close:
                fix = f"rename {key!r} to {close[0]!r}"
                self.add(dotted, f"unknown key {key!r} (did you mean {close[0]!r}?)", fix)
            else:
                fix = f"remove it; allowed: {', '.join(sorted(allowed))}"
                self.add(dotted, f"unknown key {key!r}", fix)

    def table(
        self, data: dict[str, Any], key: str, allowed: set[str] | None, prefix: str = ""
    ) -> dict[str, Any]:
        """data[key] as a dict, its unknown keys reported; {} when absent or not a table."""
        value, dotted = data.get(key, {}), f"{prefix}{key}"
        if not isinstance(value, dict):
            fix = f"write it as a [{dotted}] table of key = value lines"
            self.add(dotted, f"must be a table, got {_kind(value)}", fix)
            return {}
        if allowed is not None:
            self.unknown(value, allowed, dotted)
        return value

    def number(
        self, table: dict[str, Any], key: str, where: str, default: Any, integer: bool = False
    ) -> Any:
        """A positive number (integer if asked), or default when absent or wrong."""
        if key not in table:
            return default
        value = table[key]
        if not _is_number(value) or value <= 0 or (integer and not isinstance(value, int)):
            msg = f"must be a positive {'integer' if integer else 'number'}, got {_kind(value)}"
            self.add(f"{where}.{key}", msg, f"write {key} = {_EXAMPLES.get(key, 600)}")
            return default
        return int(value) if integer else float(value)

    def text(self, table: dict[str, Any], key: str, where: str, default: str | None) -> str | None:
        value = table.get(key, default)
        if isinstance(value, int) and not isinstance(value, bool) and key == "user" and value >= 0:
            return str(value)  # a numeric uid
        if value is not None and (not isinstance(value, str) or not value.strip()):
            msg = f"must be a non-empty string, got {_kind(value)}"
            self.add(f"{where}.{key}", msg, f'write {key} = "..."')
            return default
        return value

    def choice(
        self, table: dict[str, Any], key: str, where: str, allowed: tuple[str, ...]
    ) -> str | None:
        value = table.get(key)
        if value is None or value in allowed:
            return value
        msg = f"must be {' or '.join(allowed)}, got {_kind(value)}"
        fix = f'write {key} = "{allowed[0]}" or {key} = "{allowed[1]}"'
        self.add(f"{where}.{key}".lstrip("."), msg, fix)
        return None

    def env(
        self,
        table: dict[str, Any],
        key: str,
        where: str,
        agent_sees: bool = True,
        judge: bool = False,
        names: bool = True,
    ) -> dict[str, str]:
        """A dict of strings, ${VAR} and ${VAR:-default} resolved from the variables allowed here.

        Each name passes the rule of runs/env_names.py (`names`; HTTP headers are no env names). A
        model provider's key is never resolved: the proxy keeps those on this machine. In the
        verifier's env (`judge`) its ${VAR} is kept for runs/trials/judge.py, which puts a token
        of the verification's own there; anywhere else it is a problem. The verifier runs in the
        sandbox the agent had (`agent_sees` is false only for a separate one): an allowed value
        given to it is warned about.
        """
        out: dict[str, str] = {}
        for name, raw in self.table(table, key, None, f"{where}.").items():
            dotted = f"{where}.{key}.{name}"
            if names and (why := env_problem(name, raw if isinstance(raw, str) else None)):
                self.add(dotted, why, "remove it; give the value under a plain name of its own")
                continue
            if not isinstance(raw, str):
                fix = f'quote it: {name} = "{raw}"'
                self.add(dotted, f"must be a string, got {_kind(raw)}", fix)
                continue
            out[name] = _ENV_REF.sub(
                functools.partial(self._variable, dotted=dotted, judge=judge), raw
            )
            read = [m[1] for m in _ENV_REF.finditer(raw) if m[1] in self.host.values]
            if judge and agent_sees and read:
                self.warn(
                    dotted,
                    f"{', '.join(read)} from this machine is given to the verifier, which runs in "
                    "the agent's sandbox: the agent can read it (a program it leaves there runs "
                    "with the tests); give the verifier a model through the proxy instead",
                )
        return out

    def _variable(self, m: re.Match[str], *, dotted: str, judge: bool) -> str:
        """What one ${VAR} of the field `dotted` becomes (a problem added when it may not)."""
        var, default = m[1], m[2]
        if var in MODEL_KEY_VARS:
            if judge:
                return m[0]  # the verification's own token goes here (runs/trials/judge.py)
            msg = f"${{{var}}} would put a model provider's key into the sandbox, where the agent reads it"
            fix = "remove it: agents reach their model through the proxy; a verifier that needs one writes it in [verifier] env, where it gets a token of its own"
            self.add(dotted, msg, fix)
            return ""
        if var in self.host.allowed:
            found = self.host.values.get(var)
            if found is None and default is None:
                fix = f"export {var}=... before running, or write ${{{var}:-default}}"
                self.add(dotted, f"${{{var}}} is allowed but not set in the environment", fix)
            return default if not found and default is not None else (found or "")  # ":-" as sh
        if default is not None:
            return default  # a variable not allowed is unset here
        msg = (
            f"${{{var}}} reads this machine's environment, and {var} is not a variable tasks "
            "may read here"
        )
        self.add(dotted, msg, self.host.how_to_allow(var))
        return ""
