"""A task's MCP servers in each agent CLI's own config (runs/agents/mcp.py), and each agent
writing them where its CLI reads them; an agent that takes none says so before the job."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from runs import events as ev
from runs.agents.claude import ClaudeAgent
from runs.agents.codex import CodexAgent
from runs.agents.controls import NopAgent, OracleAgent
from runs.agents.mcp import claude_servers, codex_servers, opencode_servers, toml_tables
from runs.agents.opencode import OpenCodeAgent
from runs.jobs.preflight import task_warnings
from runs.sandboxes.resources import HostResources
from runs.tasks.harbor_keys import McpServer
from runs.tasks.load import load_task
from tests.conftest import said
from tests.runs.tasks.test_tasks import split_task

STDIO = McpServer(
    "notes", "stdio", command="python3", args=("/opt/mcp/server.py", "--quiet"), env={"LEVEL": "2"}
)
HTTP = McpServer(
    "almanac", "streamable-http", url="http://almanac:8000/mcp", headers={"X-Team": 'a"b'}
)
SSE = McpServer("feed", "sse", url="http://feed:9000/sse")


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        (
            claude_servers,
            {
                "notes": {
                    "type": "stdio",
                    "command": "python3",
                    "args": ["/opt/mcp/server.py", "--quiet"],
                    "env": {"LEVEL": "2"},
                },
                "almanac": {
                    "type": "http",
                    "url": "http://almanac:8000/mcp",
                    "headers": {"X-Team": 'a"b'},
                },
                "feed": {"type": "sse", "url": "http://feed:9000/sse"},
            },
        ),
        (
            codex_servers,
            {
                "notes": {
                    "command": "python3",
                    "args": ["/opt/mcp/server.py", "--quiet"],
                    "env": {"LEVEL": "2"},
                },
                "almanac": {"url": "http://almanac:8000/mcp", "http_headers": {"X-Team": 'a"b'}},
                "feed": {"url": "http://feed:9000/sse"},
            },
        ),
        (
            opencode_servers,
            {
                "notes": {
                    "type": "local",
                    "command": ["python3", "/opt/mcp/server.py", "--quiet"],
                    "environment": {"LEVEL": "2"},
                    "enabled": True,
                },
                "almanac": {
                    "type": "remote",
                    "url": "http://almanac:8000/mcp",
                    "headers": {"X-Team": 'a"b'},
                    "enabled": True,
                },
                "feed": {"type": "remote", "url": "http://feed:9000/sse", "enabled": True},
            },
        ),
    ],
)
def test_each_agents_config_holds_every_server_in_its_own_shape(shape, expected) -> None:
    assert shape((STDIO, HTTP, SSE)) == expected
    assert shape(()) == {}


def test_codex_tables_are_toml_that_reads_back_as_given() -> None:
    text = toml_tables("mcp_servers", codex_servers((STDIO, HTTP)))
    assert tomllib.loads(text) == {"mcp_servers": codex_servers((STDIO, HTTP))}
    assert toml_tables("mcp_servers", {}) == ""


TOML = """[[environment.mcp_servers]]
name = "notes"
transport = "stdio"
command = "python3"
args = ["/opt/mcp/server.py"]

[[environment.mcp_servers]]
name = "almanac"
transport = "streamable-http"
url = "http://almanac:8000/mcp"
"""


def agent_files(agent, task) -> dict[str, bytes]:
    return {path: entry.data for path, entry in agent.files(task, "do it").items()}


def test_claude_code_reads_them_from_its_user_scope(tmp_path: Path) -> None:
    task = load_task(split_task(tmp_path, TOML))
    files = agent_files(ClaudeAgent("mock/script:x"), task)
    user = json.loads(files["/opt/benchflow/home/claude/.claude/.claude.json"])
    assert set(user["mcpServers"]) == {"notes", "almanac"}


def test_codex_reads_them_from_its_config_toml(tmp_path: Path) -> None:
    task = load_task(split_task(tmp_path, TOML))
    config = tomllib.loads(
        agent_files(CodexAgent("mock/script:x"), task)[
            "/opt/benchflow/home/codex/config.toml"
        ].decode()
    )
    assert config["mcp_servers"]["notes"]["command"] == "python3"
    assert config["model_provider"] == "benchflow"  # the rest of the config is still there


def test_opencode_reads_them_from_its_opencode_json(tmp_path: Path) -> None:
    task = load_task(split_task(tmp_path, TOML))
    config = json.loads(
        agent_files(OpenCodeAgent("mock/script:x"), task)[
            "/opt/benchflow/home/opencode/opencode.json"
        ]
    )
    assert config["mcp"]["almanac"] == {
        "type": "remote",
        "url": "http://almanac:8000/mcp",
        "enabled": True,
    }


def test_no_servers_is_nothing_to_do(tmp_path: Path) -> None:
    task = load_task(split_task(tmp_path, "[environment]\nmcp_servers = []\n"))
    assert not any(p.endswith(".claude.json") for p in agent_files(ClaudeAgent("m"), task))
    assert (
        "mcp_servers"
        not in agent_files(CodexAgent("m"), task)["/opt/benchflow/home/codex/config.toml"].decode()
    )
    assert "mcp" not in json.loads(
        agent_files(OpenCodeAgent("m"), task)["/opt/benchflow/home/opencode/opencode.json"]
    )


def test_the_servers_load_with_no_warning_and_an_agent_without_them_is_told(tmp_path: Path) -> None:
    task = load_task(split_task(tmp_path, TOML))
    assert task.warnings == ()
    host = HostResources(cpus=2, memory_mb=8192)
    assert task_warnings([task], host, ClaudeAgent("m")) == []
    [event] = task_warnings([task], host, NopAgent())
    assert event == ev.AgentLacks("environment.mcp_servers", "nop", ("task",))
    assert said(event) == [
        "warning: environment.mcp_servers: -a nop takes no MCP servers, so it runs without them; "
        "claude, codex and opencode are given them (task)"
    ]
    assert OracleAgent().mcp_config((STDIO,)) is None


def test_mcp_and_setup_secrets_are_replaced_like_the_tasks_own(tmp_path: Path, monkeypatch) -> None:
    from runs.trials.agent_run import trial_secrets

    monkeypatch.setenv("MCP_TOKEN", "tok-mcp-0123456789abcdef")
    toml = """[[environment.mcp_servers]]
name = "almanac"
transport = "streamable-http"
url = "http://almanac:8000/mcp"
headers = { Authorization = "Bearer ${MCP_TOKEN}" }

[[environment.mcp_servers]]
name = "notes"
transport = "stdio"
command = "notes"
env = { NOTES_API_KEY = "key-notes-0123456789" }

[[environment.setup_commands]]
command = "seed"
env = { SEED_PASSWORD = "pw-seed-0123456789" }
"""
    from runs.host_env import host_env

    secrets = trial_secrets({}, load_task(split_task(tmp_path, toml), host_env(["MCP_TOKEN"])))
    assert set(secrets) >= {
        "Bearer tok-mcp-0123456789abcdef",
        "key-notes-0123456789",
        "pw-seed-0123456789",
    }
