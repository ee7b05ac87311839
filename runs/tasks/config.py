"""A task's config (task.toml, or task.md's YAML frontmatter) read and checked into typed sections.

Problems are collected as TaskProblems, not raised, so every problem of a task is reported at once.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runs.tasks.checker import Checker, _is_number, _kind
from runs.tasks.harbor_keys import (
    NETWORK_MODES,
    Healthcheck,
    McpServer,
    environment_warnings,
    healthcheck,
    mcp_servers,
    phase_warnings,
)
from runs.tasks.setup_keys import (
    Artifact,
    CollectHook,
    SetupCommand,
    artifacts,
    collect_hooks,
    setup_commands,
    skills_dir,
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
    setup_commands: tuple[SetupCommand, ...] = ()  # run before the healthcheck and the agent
    skills_dir: str | None = None  # copied where the agent reads its skills


@dataclass(frozen=True)
class AgentConfig:
    timeout_sec: float | None = None  # None: no wall-clock cap
    user: str | None = None  # None: the image's user
    token_budget: int | None = None
    turn_budget: int | None = None
    prompt_prefix: str | None = None


VERIFIER_MODES = ("shared", "separate")


@dataclass(frozen=True)
class VerifierConfig:
    timeout_sec: float = 600.0
    user: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    reward_range: tuple[float, float] = (0.0, 1.0)
    # Harbor's: "shared" runs the tests in the agent's sandbox; "separate" in a container of
    # their own (runs/trials/separate_verifier.py), given only the artifacts. An [environment]
    # block of the verifier's own implies separate.
    environment_mode: str = "shared"
    environment: SandboxConfig | None = None  # [verifier.environment]: the task's when None
    collect: tuple[CollectHook, ...] = ()  # run in the agent's sandbox before artifacts are copied
    network_mode: str | None = None  # [verifier] network_mode: a separate verifier's network

    @property
    def separate(self) -> bool:
        return self.environment_mode == "separate"


@dataclass(frozen=True)
class Step:
    name: str
    instruction: str  # steps/<name>/instruction.md (agent.prompt_prefix is not applied here)
    tests_dir: Path | None  # steps/<name>/tests (layered over the task's tests/)
    solution_dir: Path | None  # steps/<name>/solution
    agent: AgentConfig  # the task's [agent] with the step's keys over it
    verifier: VerifierConfig  # likewise
    min_reward: float | dict[str, float] | None = None
    healthcheck: Healthcheck | None = None  # before this step's agent, beside the task's
    artifacts: tuple[Artifact, ...] = ()  # after this step's verifier, into steps/<name>/artifacts/


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
# Harbor 0.26's step keys, and two multi-turn task sets add (dependencies, inherit_prior_session)
_STEP = {"name", "agent", "verifier", "min_reward", "healthcheck", "artifacts"} | {
    "dependencies",
    "inherit_prior_session",
}
REWARD_STRATEGIES = ("mean", "final")
_STEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


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
    reward_range, rr = base.reward_range, raw.get("reward_range")
    if rr is not None:
        pair = isinstance(rr, list) and len(rr) == 2 and all(map(_is_number, rr))
        if pair and rr[0] <= 0 and rr[1] >= 1:
            reward_range = (float(rr[0]), float(rr[1]))
        else:
            msg = f"must be [lo, hi] with lo <= 0 and hi >= 1 (may only widen [0, 1]), got {rr!r}"
            c.add(f"{where}.reward_range", msg, "write reward_range = [0, 1] or a wider [-1, 1]")
    # BenchFlow's sandbox_mode / sandbox are Harbor's environment_mode / environment
    mode_key = "sandbox_mode" if "sandbox_mode" in raw else "environment_mode"
    env_key = "sandbox" if "sandbox" in raw else "environment"
    mode = c.choice(raw, mode_key, where, VERIFIER_MODES)
    environment = base.environment
    if env_key in raw:
        table = c.table(raw, env_key, _SANDBOX, f"{where}.")
        environment = sandbox_from(c, table, f"{where}.{env_key}", agent_sees=False)
        if mode == "shared":
            msg = f'{mode_key} = "shared" runs the tests in the agent\'s sandbox, so [{where}.{env_key}] cannot apply'
            fix = f'remove [{where}.{env_key}], or write {mode_key} = "separate"'
            c.add(f"{where}.{mode_key}", msg, fix)
    resolved = mode or ("separate" if env_key in raw else base.environment_mode)
    phase_warnings(c, raw, where, separate=resolved == "separate")
    network = c.choice(raw, "network_mode", where, NETWORK_MODES) or base.network_mode
    return VerifierConfig(
        timeout_sec=c.number(raw, "timeout_sec", where, base.timeout_sec),
        user=c.text(raw, "user", where, base.user),
        env={**base.env, **c.env(raw, "env", where, judge=True)},
        reward_range=reward_range,
        environment_mode=resolved,
        environment=environment,
        collect=collect_hooks(c, raw.get("collect"), f"{where}.collect") or base.collect,
        network_mode="public" if network in ("allowlist", "denylist") else network,
    )


def sandbox_config(c: Checker, data: dict[str, Any]) -> SandboxConfig:
    if "sandbox" in data and "environment" in data:
        msg = "both [environment] and [sandbox] are declared; they are the same table"
        c.add("environment", msg, "move every key into one of them: [environment] or [sandbox]")
    where = "sandbox" if "sandbox" in data else "environment"
    return sandbox_from(c, c.table(data, where, _SANDBOX), where, agent_sees=True)


def sandbox_from(c: Checker, raw: dict[str, Any], where: str, *, agent_sees: bool) -> SandboxConfig:
    """An [environment] table (the task's, or a separate verifier's own: `agent_sees` False,
    as no agent runs in that container) read into a SandboxConfig."""
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
        env=c.env(raw, "env", where, agent_sees=agent_sees),
        mcp_servers=mcp_servers(c, raw, where),
        healthcheck=healthcheck(c, raw, where),
        setup_commands=setup_commands(c, raw, where),
        skills_dir=skills_dir(c, raw, where),
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
        _multi_turn_keys(c, s, where, [x.name for x in steps])
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
                healthcheck=healthcheck(c, s, where),
                artifacts=artifacts(c, s.get("artifacts"), f"{where}.artifacts"),
            )
        )
    return tuple(steps)


def _multi_turn_keys(c: Checker, s: dict[str, Any], where: str, earlier: list[str]) -> None:
    """What `dependencies` and `inherit_prior_session` (keys of multi-turn task sets, not Harbor
    0.26's) become here, where the steps run in their listed order in one sandbox."""
    if deps := s.get("dependencies"):
        if not isinstance(deps, list) or any(d not in earlier for d in deps):
            c.warn(
                f"{where}.dependencies",
                f"{deps!r} names a step that is not before this one: steps run in their listed order here",
            )
        else:
            c.warn(
                f"{where}.dependencies",
                "read as an order only: the step runs after every step listed before it, "
                "whether they passed or not (only a min_reward a step misses ends the trial)",
            )
    if s.get("inherit_prior_session") is False:
        c.warn(
            f"{where}.inherit_prior_session",
            "every step runs in the same sandbox here, so it sees what the earlier steps left",
        )
    elif s.get("inherit_prior_session"):
        c.warn(
            f"{where}.inherit_prior_session",
            "the step sees the earlier steps' files (one sandbox), but its agent starts a new session",
        )
