"""Harbor 0.26 and BenchFlow task keys beyond the core: MCP servers, healthchecks, and a
warning for each key this runner accepts but cannot honour, saying what will differ.

Harbor's own model ignores keys it does not know; we accept every key it (or BenchFlow) defines,
so real task sets load unchanged, and keep the did-you-mean error for anything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from runs.tasks.checker import Checker

MCP_TRANSPORTS = ("stdio", "sse", "streamable-http")
MCP_KEYS = set(
    "name transport url command args cwd env headers tools include_tags exclude_tags".split()
)
HEALTHCHECK_KEYS = set(
    "command interval_sec timeout_sec start_period_sec start_interval_sec retries".split()
)
# Harbor's network policies; BenchFlow adds a denylist. No egress filter runs here.
NETWORK_MODES = ("public", "no-network", "allowlist", "denylist")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class McpServer:
    """One MCP server a task offers its agent ([[environment.mcp_servers]])."""

    name: str
    transport: str  # stdio | sse | streamable-http
    url: str | None = None  # sse / streamable-http
    command: str | None = None  # stdio: run inside the sandbox
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Healthcheck:
    """Harbor's [environment.healthcheck]: run until it passes before the agent starts."""

    command: str
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


def mcp_servers(c: Checker, raw: dict[str, Any], where: str) -> tuple[McpServer, ...]:
    value = raw.get("mcp_servers", [])
    dotted = f"{where}.mcp_servers"
    if not isinstance(value, list) or not all(isinstance(s, dict) for s in value):
        fix = 'write [[environment.mcp_servers]] tables with name = "..." and url or command'
        c.add(dotted, f"must be a list of tables, got {type(value).__name__}", fix)
        return ()
    servers: list[McpServer] = []
    for i, s in enumerate(value):
        at = f"{dotted}[{i}]"
        c.unknown(s, MCP_KEYS, at)
        name, transport = s.get("name"), s.get("transport", "sse")
        transport = "streamable-http" if transport == "http" else transport
        if (
            not isinstance(name, str)
            or not _NAME.fullmatch(name)
            or name in {x.name for x in servers}
        ):
            c.add(
                f"{at}.name",
                f"needs a unique name of letters, digits, . _ -, got {name!r}",
                'write name = "tools"',
            )
            continue
        if transport not in MCP_TRANSPORTS:
            fix = 'write transport = "stdio", "sse" or "streamable-http"'
            c.add(f"{at}.transport", f"unknown transport {transport!r}", fix)
            continue
        url, command = s.get("url"), s.get("command")
        if transport != "stdio" and not (isinstance(url, str) and url):
            c.add(
                f"{at}.url",
                f"transport {transport!r} needs a url",
                'write url = "http://mcp-server:8000/mcp"',
            )
            continue
        if transport == "stdio" and not (isinstance(command, str) and command):
            c.add(
                f"{at}.command",
                "transport 'stdio' needs a command",
                'write command = "python3", args = ["server.py"]',
            )
            continue
        args = s.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            c.add(f"{at}.args", "must be a list of strings", 'write args = ["server.py"]')
            continue
        headers = c.env(s, "headers", at, names=False)
        if headers and transport == "stdio":
            c.add(f"{at}.headers", "headers are for HTTP transports only", "remove them")
        for key in ("tools", "include_tags", "exclude_tags", "cwd"):
            if key in s:
                c.warn(
                    f"{at}.{key}",
                    f"{key} is BenchFlow's and is not passed to the agents here: every tool of the server is offered",
                )
        servers.append(
            McpServer(
                name=name,
                transport=transport,
                url=url if transport != "stdio" else None,
                command=command if transport == "stdio" else None,
                args=tuple(args),
                env=c.env(s, "env", at),
                headers=headers,
            )
        )
    return tuple(servers)


def healthcheck(c: Checker, raw: dict[str, Any], where: str) -> Healthcheck | None:
    if "healthcheck" not in raw:
        return None
    table = c.table(raw, "healthcheck", HEALTHCHECK_KEYS, f"{where}.")
    command = table.get("command")
    at = f"{where}.healthcheck"
    if not isinstance(command, str) or not command.strip():
        c.add(
            f"{at}.command",
            "needs a shell command (exit 0 means healthy)",
            'write command = "test -f /tmp/ready"',
        )
        return None
    retries = c.number(table, "retries", at, 3, integer=True)
    return Healthcheck(
        command=command,
        interval_sec=c.number(table, "interval_sec", at, 5.0),
        timeout_sec=c.number(table, "timeout_sec", at, 30.0),
        start_period_sec=_non_negative(c, table, "start_period_sec", at),
        start_interval_sec=c.number(table, "start_interval_sec", at, 5.0),
        retries=retries,
    )


def _non_negative(c: Checker, table: dict[str, Any], key: str, at: str) -> float:
    value = table.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        c.add(f"{at}.{key}", f"must be a number >= 0, got {value!r}", f"write {key} = 0")
        return 0.0
    return float(value)


def environment_warnings(c: Checker, raw: dict[str, Any], where: str) -> None:
    """What will differ for the [environment] keys this runner cannot honour."""
    storage = raw.get("storage_mb", raw.get("storage"))
    if storage is not None:
        key = "storage_mb" if "storage_mb" in raw else "storage"
        c.warn(
            f"{where}.{key}",
            f"{storage!r} is not enforced: the sandbox's disk is not limited here (Docker's overlay2 has no per-container quota on this host)",
        )
    gpus = raw.get("gpus")
    if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0:
        c.warn(
            f"{where}.gpus",
            f"asks for {gpus} GPU(s); this machine has none, so the task runs on the CPU only",
        )
    for key in ("gpu_types", "tpu"):
        if raw.get(key):
            c.warn(f"{where}.{key}", "no accelerators here: ignored, the task runs on the CPU only")
    mode = raw.get("network_mode")
    if mode in ("allowlist", "denylist"):
        c.warn(
            f"{where}.network_mode",
            f"{mode!r} needs an egress filter, which this runner has not: the sandbox gets the full network (public), so hosts outside the list are reachable too",
        )
    if "bugswarm_image_tag" in raw:
        c.warn(
            f"{where}.bugswarm_image_tag",
            "BenchFlow's BugSwarm tag is not used here; the image comes from docker_image or environment/Dockerfile",
        )


def phase_warnings(c: Checker, raw: dict[str, Any], where: str, separate: bool = False) -> None:
    """[agent] / [verifier] keys this runner cannot honour in full. `separate`: the verifier runs
    in a container of its own, which takes [verifier] network_mode as its network."""
    if (raw.get("network_mode") not in (None, "public") or raw.get("allowed_hosts")) and not (
        separate and raw.get("network_mode") in ("public", "no-network")
    ):
        c.warn(
            f"{where}.network_mode",
            f"a per-phase network policy is not applied here: the {where.split('.')[-1]} runs with the task's [environment] network",
        )
    for key in ("memory", "hardening", "pytest_plugins", "service"):
        if key in raw:
            c.warn(f"{where}.{key}", f"BenchFlow's verifier.{key} is not applied here")
    if raw.get("type") == "llm-judge" or "judge" in raw:
        fix = "give the task a tests/test.sh that writes the reward (an LLM judge may run inside it, with its key in [verifier] env)"
        c.add(f"{where}.type", "an llm-judge verifier is BenchFlow's own and is not run here", fix)


def steps_verifier_warning(c: Checker, separate_at: list[str]) -> None:
    """A multi-step task asking for separate verifiers: what runs instead."""
    for where in separate_at:
        c.warn(
            f"{where}.environment_mode",
            "a multi-step task's verifiers run in the agent's own sandbox here (every step in one "
            "sandbox), not in a separate one: they see what the agent left anywhere, not only the "
            "declared artifacts",
        )
