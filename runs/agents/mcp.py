"""A task's MCP servers ([[environment.mcp_servers]]) in each agent CLI's own config, as Harbor
passes them: Claude Code's `mcpServers` (its user-scope .claude.json, loaded with no trust
prompt), Codex's `[mcp_servers.NAME]` tables (config.toml), OpenCode's `mcp` object
(opencode.json). A stdio server is started by the agent inside the sandbox; an HTTP one is
reached by its URL (a sidecar's, in a multi-container task).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from runs.tasks.harbor_keys import McpServer


def claude_servers(servers: Sequence[McpServer]) -> dict[str, Any]:
    """The value of Claude Code's `mcpServers` (it calls streamable HTTP "http")."""
    out: dict[str, Any] = {}
    for s in servers:
        if s.transport == "stdio":
            out[s.name] = {"type": "stdio", "command": s.command, "args": list(s.args)}
            if s.env:
                out[s.name]["env"] = dict(s.env)
        else:
            kind = "http" if s.transport == "streamable-http" else "sse"
            out[s.name] = {"type": kind, "url": s.url}
            if s.headers:
                out[s.name]["headers"] = dict(s.headers)
    return out


def codex_servers(servers: Sequence[McpServer]) -> dict[str, Any]:
    """Codex's `mcp_servers` tables: a command, or a URL (Codex speaks streamable HTTP; an SSE
    server gets its URL too, as Harbor gives it)."""
    out: dict[str, Any] = {}
    for s in servers:
        if s.transport == "stdio":
            out[s.name] = {"command": s.command, "args": list(s.args)}
            if s.env:
                out[s.name]["env"] = dict(s.env)
        else:
            out[s.name] = {"url": s.url}
            if s.headers:
                out[s.name]["http_headers"] = dict(s.headers)
    return out


def opencode_servers(servers: Sequence[McpServer]) -> dict[str, Any]:
    """OpenCode's `mcp` object: "local" (one argv: the command and its args) or "remote"."""
    out: dict[str, Any] = {}
    for s in servers:
        if s.transport == "stdio":
            entry: dict[str, Any] = {"type": "local", "command": [s.command, *s.args]}
            if s.env:
                entry["environment"] = dict(s.env)
        else:
            entry = {"type": "remote", "url": s.url}
            if s.headers:
                entry["headers"] = dict(s.headers)
        out[s.name] = {**entry, "enabled": True}
    return out


def toml_tables(prefix: str, tables: dict[str, Any]) -> str:
    """`[prefix.NAME]` tables of strings, lists of strings and tables of strings, as TOML text
    (JSON's string escapes are TOML's basic-string escapes)."""
    out = []
    for name, table in tables.items():
        lines = [f"[{prefix}.{json.dumps(name)}]"]
        for key, value in table.items():
            if isinstance(value, dict):
                inline = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in value.items())
                lines.append(f"{key} = {{ {inline} }}")
            else:
                lines.append(f"{key} = {json.dumps(value)}")
        out.append("\n".join(lines))
    return "\n\n".join(out) + ("\n" if out else "")
