"""A task's config (task.toml, or task.md's YAML frontmatter) read and checked into typed sections.

Problems are collected as TaskProblems, not raised, so every problem of a task is reported at once.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runs.tasks.harbor_keys import (
    NETWORK_MODES,
    Healthcheck,
    McpServer,
    environment_warnings,
    healthcheck,
    mcp_servers,
    phase_warnings,
)


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


@dataclass(frozen=True)
class SandboxConfig:
    docker_image: str | None = None  # prebuilt image instead of environment/Dockerfile
    build_timeout_sec: float = 600.0
    cpus: float = 1.0
    memory_mb: int = 2048
    network_mode: str = "public"  # public | no-network
    workdir: str | None = None  # None: the image's WORKDIR
    env: dict[str, str] = field(default_factory=dict)
    mcp_servers: tuple[McpServer, ...] = ()  # passed to the agents that take MCP servers
    healthcheck: Healthcheck | None = None  # must pass before the agent starts


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
    instruction: str  # steps/<name>/instruction.md (agent.prompt_prefix is not applied here)
    tests_dir: Path | None  # steps/<name>/tests (layered over the task's tests/)
    solution_dir: Path | None  # steps/<name>/solution
    agent: AgentConfig  # the task's [agent] with the step's keys over it
    verifier: VerifierConfig  # likewise
    min_reward: float | dict[str, float] | None = None


# Every key of Harbor 0.26's TaskConfig and of BenchFlow's; those not honoured get a warning
# (runs/tasks/harbor_keys.py).
TOP_KEYS = set(
    "version schema_version task metadata agent verifier sandbox environment solution oracle "
    "source artifacts steps multi_step_reward_strategy reward".split()
)
_NETWORK = {"network_mode", "allowed_hosts"}
AGENT_KEYS = {"timeout_sec", "user", "token_budget", "turn_budget", "prompt_prefix", *_NETWORK}
VERIFIER_KEYS = {"timeout_sec", "user", "env", "reward_range", *_NETWORK} | set(
    "environment_mode environment collect type sandbox_mode sandbox service judge memory "
    "hardening pytest_plugins".split()
)
_SANDBOX = set(
    "docker_image image build_timeout_sec cpus memory_mb memory network_mode allow_internet "
    "allowed_hosts blocked_urls blocked_hosts workdir env os storage_mb storage gpus gpu_types "
    "tpu skills_dir healthcheck mcp_servers setup_commands bugswarm_image_tag".split()
)
SOLUTION_KEYS = {"env", "timeout_sec"}
_STEP = {"name", "agent", "verifier", "min_reward", "healthcheck", "artifacts"}
REWARD_STRATEGIES = ("mean", "final")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_STEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_EXAMPLES = {"cpus": 2, "memory_mb": 2048, "token_budget": 200000, "turn_budget": 50}


def _kind(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class Checker:
    """Reads typed values out of one config file, collecting every problem instead of raising."""

    def __init__(self, file: Path) -> None:
        self.file = file
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
        self, table: dict[str, Any], key: str, where: str, agent_sees: bool = False
    ) -> dict[str, str]:
        """A dict of strings, ${VAR} and ${VAR:-default} resolved from the host environment.

        With `agent_sees` (the sandbox's own env) an upstream model key is refused: the proxy
        keeps those on this machine, and the agent must not read one. The verifier's env is
        set only while the tests run, after the agent is stopped, so a judge may have one.
        """
        out: dict[str, str] = {}
        for name, raw in self.table(table, key, None, f"{where}.").items():
            dotted = f"{where}.{key}.{name}"
            if not isinstance(raw, str):
                fix = f'quote it: {name} = "{raw}"'
                self.add(dotted, f"must be a string, got {_kind(raw)}", fix)
                continue
            for var in (
                m[1] for m in _ENV_REF.finditer(raw) if agent_sees and m[1] in _model_keys()
            ):
                msg = f"${{{var}}} would put a model provider's key into the sandbox, where the agent reads it"
                fix = "remove it: agents reach their model through the proxy; a verifier that needs it can have it in [verifier] env"
                self.add(dotted, msg, fix)
            refs = _ENV_REF.finditer(raw)
            for var in (m[1] for m in refs if m[1] not in os.environ and m[2] is None):
                fix = f"export {var}=... before running, or write ${{{var}:-default}}"
                self.add(dotted, f"${{{var}}} is not set in the environment", fix)
            out[name] = _ENV_REF.sub(_resolve, raw)
        return out


def _model_keys() -> set[str]:
    from proxy.providers import upstream_key_vars

    return upstream_key_vars() | {"ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"}


def _resolve(m: re.Match[str]) -> str:
    found, default = os.environ.get(m[1], ""), m[2]
    return default if not found and default is not None else found  # ":-" also covers "", as in sh


def agent_config(c: Checker, raw: dict[str, Any], where: str, base: AgentConfig) -> AgentConfig:
    phase_warnings(c, raw, where)
    return AgentConfig(
        timeout_sec=c.number(raw, "timeout_sec", where, base.timeout_sec),
        user=c.text(raw, "user", where, base.user),
        token_budget=c.number(raw, "token_budget", where, base.token_budget, integer=True),
        turn_budget=c.number(raw, "turn_budget", where, base.turn_budget, integer=True),
        prompt_prefix=c.text(raw, "prompt_prefix", where, base.prompt_prefix),
    )


def verifier_config(
    c: Checker, raw: dict[str, Any], where: str, base: VerifierConfig
) -> VerifierConfig:
    phase_warnings(c, raw, where)
    reward_range, rr = base.reward_range, raw.get("reward_range")
    if rr is not None:
        pair = isinstance(rr, list) and len(rr) == 2 and all(map(_is_number, rr))
        if pair and rr[0] <= 0 and rr[1] >= 1:
            reward_range = (float(rr[0]), float(rr[1]))
        else:
            msg = f"must be [lo, hi] with lo <= 0 and hi >= 1 (may only widen [0, 1]), got {rr!r}"
            c.add(f"{where}.reward_range", msg, "write reward_range = [0, 1] or a wider [-1, 1]")
    return VerifierConfig(
        timeout_sec=c.number(raw, "timeout_sec", where, base.timeout_sec),
        user=c.text(raw, "user", where, base.user),
        env={**base.env, **c.env(raw, "env", where)},
        reward_range=reward_range,
    )


def sandbox_config(c: Checker, data: dict[str, Any]) -> SandboxConfig:
    if "sandbox" in data and "environment" in data:
        msg = "both [environment] and [sandbox] are declared; they are the same table"
        c.add("environment", msg, "move every key into one of them: [environment] or [sandbox]")
    where = "sandbox" if "sandbox" in data else "environment"
    raw = c.table(data, where, _SANDBOX)
    image = c.text(raw, "docker_image" if "docker_image" in raw else "image", where, None)
    mode, allow = c.choice(raw, "network_mode", where, NETWORK_MODES), raw.get("allow_internet")
    environment_warnings(c, raw, where)
    if mode in ("allowlist", "denylist"):
        mode = "public"  # no egress filter here; the warning says so
    if allow is not None and not isinstance(allow, bool) or allow is False and mode == "public":
        msg = f"must be true/false and agree with network_mode (it is deprecated), got {allow!r}"
        c.add(f"{where}.allow_internet", msg, 'remove it and write network_mode = "no-network"')
    elif allow is False:
        mode = "no-network"
    memory_mb = c.number(raw, "memory_mb", where, 2048, integer=True)
    if "memory" in raw and "memory_mb" not in raw:  # Harbor's deprecated memory = "2G"
        m = re.fullmatch(r"\s*(\d+)\s*([MG])i?B?\s*", str(raw["memory"]), re.IGNORECASE)
        if m:
            memory_mb = int(m.group(1)) * (1024 if m.group(2).upper() == "G" else 1)
        else:
            msg = f"cannot read {raw['memory']!r} as a size"
            c.add(f"{where}.memory", msg, "write memory_mb = 2048")
    workdir = c.text(raw, "workdir", where, None)
    if workdir and not workdir.startswith("/"):
        msg = f"must be an absolute path, got {workdir!r}"
        c.add(f"{where}.workdir", msg, 'write workdir = "/app"')
    if raw.get("os", "linux") != "linux":
        msg = f"only linux sandboxes run here, got {raw['os']!r}"
        c.add(f"{where}.os", msg, 'write os = "linux"')
    return SandboxConfig(
        docker_image=image,
        build_timeout_sec=c.number(raw, "build_timeout_sec", where, 600.0),
        cpus=c.number(raw, "cpus", where, 1.0),
        memory_mb=memory_mb,
        network_mode=mode or "public",
        workdir=workdir,
        env=c.env(raw, "env", where, agent_sees=True),
        mcp_servers=mcp_servers(c, raw, where),
        healthcheck=healthcheck(c, raw, where),
    )


def read_file_text(c: Checker, path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        c.add("", f"is not UTF-8 text ({e.reason} at byte {e.start})", "save it as UTF-8", path)
    except OSError:
        pass
    return None


def read_config(c: Checker, file: Path) -> tuple[dict[str, Any] | None, str]:
    """(the config, or None when it cannot be read; the task.md body)."""
    text = read_file_text(c, file)
    if text is None:
        return None, ""
    if file.suffix == ".toml":
        try:
            return tomllib.loads(text), ""
        except tomllib.TOMLDecodeError as e:
            fix = "fix that line: quote strings, write tables as [name]"
            c.add("", f"TOML syntax error: {e}", fix)
            return None, ""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return {}, text  # no frontmatter: every setting at its default
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        fix = "add a '---' line after the config"
        c.add("", "the frontmatter's opening '---' is never closed", fix)
        return None, ""
    try:
        data = yaml.safe_load("".join(lines[1:end]))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 2}" if mark else ""  # 1-based, after the opening '---'
        msg = f"YAML syntax error{at}: {getattr(e, 'problem', None) or e}"
        c.add("", msg, "fix that line: key: value, consistent indents, quote values holding ': '")
        return None, ""
    if data is not None and not isinstance(data, dict):
        c.add("", f"the frontmatter must be a mapping, got {_kind(data)}", "write key: value lines")
        return None, ""
    return data or {}, "".join(lines[end + 1 :])


def first_dir(*dirs: Path) -> Path:
    return next((d for d in dirs if d.is_dir()), dirs[0])


def _min_reward(c: Checker, value: Any, where: str) -> float | dict[str, float] | None:
    if value is None or _is_number(value):
        return None if value is None else float(value)
    if isinstance(value, dict) and all(map(_is_number, value.values())):
        return {str(k): float(v) for k, v in value.items()}
    fix = "write min_reward = 1.0 or min_reward = { reward = 1.0 }"
    c.add(f"{where}.min_reward", f"must be a number or a table of numbers, got {_kind(value)}", fix)
    return None


def steps_config(
    c: Checker, raw: Any, root: Path, task: tuple[AgentConfig, VerifierConfig, bool]
) -> tuple[Step, ...]:
    """The [[steps]]; each inherits the task's [agent]/[verifier] (its own keys win)."""
    agent, verifier, shared_test = task
    if not isinstance(raw, list) or not all(isinstance(s, dict) for s in raw):
        fix = 'write [[steps]] tables with name = "..."'
        c.add("steps", "must be a list of [[steps]] tables", fix)
        return ()
    steps: list[Step] = []
    for i, s in enumerate(raw):
        where, name = f"steps[{i}]", s.get("name")
        c.unknown(s, _STEP, where)
        taken = {x.name for x in steps}
        if not isinstance(name, str) or not _STEP_NAME.fullmatch(name) or name in taken:
            fix = f'write name = "step-{i + 1}" and create steps/step-{i + 1}/instruction.md'
            c.add(f"{where}.name", f"needs a unique folder-safe name, got {name!r}", fix)
            continue
        folder = root / "steps" / name
        step_agent = agent_config(
            c, c.table(s, "agent", AGENT_KEYS, f"{where}."), f"{where}.agent", agent
        )
        raw_verifier = c.table(s, "verifier", VERIFIER_KEYS, f"{where}.")
        instruction = (read_file_text(c, folder / "instruction.md") or "").strip()
        if not instruction:
            msg, fix = f"step {name!r} has no instruction", f"write steps/{name}/instruction.md"
            c.add("", msg, fix, folder / "instruction.md")
        tests = first_dir(folder / "tests", folder / "verifier")
        if not shared_test and not (tests / "test.sh").is_file():
            fix = f"create steps/{name}/tests/test.sh (or a shared tests/test.sh)"
            c.add("", f"step {name!r} has no verifier entrypoint", fix, tests / "test.sh")
        solution = first_dir(folder / "solution", folder / "oracle")
        steps.append(
            Step(
                name=name,
                instruction=instruction,
                tests_dir=tests if tests.is_dir() else None,
                solution_dir=solution if solution.is_dir() else None,
                agent=step_agent,
                verifier=verifier_config(c, raw_verifier, f"{where}.verifier", verifier),
                min_reward=_min_reward(c, s.get("min_reward"), where),
            )
        )
    return tuple(steps)
