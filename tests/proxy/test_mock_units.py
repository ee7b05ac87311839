"""The mock provider's pure parts: shell tool choice, arguments, tool results, scripts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.mock import find_shell_tool, has_tool_result, heredoc, shell_args
from proxy.mock_script import load_script
from tests.proxy.mock_tools import BASH_SCHEMA, CHAT_BASH, CODEX_TOOLS, COMMAND, OBJ, SOLUTION


@pytest.mark.parametrize(
    ("protocol", "tools", "name"),
    [
        (
            "messages",
            [{"name": "Read", "input_schema": OBJ}, {"name": "Bash", "input_schema": BASH_SCHEMA}],
            "Bash",
        ),
        ("chat", CHAT_BASH, "bash"),
        ("responses", CODEX_TOOLS, "exec_command"),
        (
            "chat",
            [{"type": "function", "function": {"name": "run_in_shell", "parameters": OBJ}}],
            "run_in_shell",
        ),
        ("chat", [{"type": "function", "function": {"name": "read", "parameters": OBJ}}], None),
        ("messages", None, None),
    ],
)
def test_find_shell_tool(protocol: str, tools: Any, name: str | None) -> None:
    found = find_shell_tool(protocol, tools)
    assert (found[0] if found else None) == name


@pytest.mark.parametrize(
    ("schema", "args"),
    [
        (
            BASH_SCHEMA,
            {"command": "ls", "timeout": 600000, "description": "Run the task's solution script"},
        ),
        ({**OBJ, "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}, {"cmd": "ls"}),
        (
            {
                **OBJ,
                "properties": {"cmd": {"type": "string"}, "yield_time_ms": {"type": "number"}},
                "required": ["cmd"],
            },
            {"cmd": "ls", "yield_time_ms": 600000},
        ),
        (
            {**OBJ, "properties": {"command": {"type": "array", "items": {"type": "string"}}}},
            {"command": ["bash", "-lc", "ls"]},
        ),
        (
            {
                **OBJ,
                "properties": {
                    "script": {"type": "string"},
                    "login": {"type": "boolean"},
                    "shell": {"type": "string", "default": "/bin/sh"},
                },
                "required": ["script", "login", "shell"],
            },
            {"script": "ls", "login": False, "shell": "/bin/sh"},
        ),
        ({}, {"command": "ls"}),
    ],
)
def test_shell_args_follow_the_schema(schema: dict[str, Any], args: dict[str, Any]) -> None:
    assert shell_args(schema, "ls") == args


def test_heredoc_picks_a_marker_the_script_does_not_use() -> None:
    assert heredoc(SOLUTION) == COMMAND
    tricky = "cat <<'BENCHFLOW_EOF'\nx\nBENCHFLOW_EOF\n"
    assert heredoc(tricky).startswith("bash <<'BENCHFLOW_EOF_'\n")


@pytest.mark.parametrize(
    ("protocol", "body", "found"),
    [
        (
            "messages",
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "toolu_bforacle_0",
                                "content": "ok",
                            }
                        ],
                    }
                ]
            },
            True,
        ),
        ("messages", {"messages": [{"role": "user", "content": "hi"}]}, False),
        (
            "chat",
            {
                "messages": [
                    {"role": "tool", "tool_call_id": "call_bforacle_0", "content": "(no output)"}
                ]
            },
            True,
        ),
        (
            "chat",
            {"messages": [{"role": "tool", "tool_call_id": "call_other", "content": ""}]},
            False,
        ),
        (
            "responses",
            {
                "input": [
                    {
                        "type": "function_call_output",
                        "call_id": "call_bforacle_0",
                        "output": "Process exited with code 0",
                    }
                ]
            },
            True,
        ),
        ("responses", {"input": "just text"}, False),
    ],
)
def test_has_tool_result(protocol: str, body: dict[str, Any], found: bool) -> None:
    assert has_tool_result(protocol, body, "bforacle") is found


def test_load_script(tmp_path: Path) -> None:
    js = tmp_path / "s.json"
    js.write_text(json.dumps([{"shell": "ls"}, {"text": "done"}]))
    yml = tmp_path / "s.yaml"
    yml.write_text("- shell: ls\n- error: {status: 429}\n")
    assert load_script(js) == [{"shell": "ls"}, {"text": "done"}]
    assert load_script(yml) == [{"shell": "ls"}, {"error": {"status": 429}}]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"say": "x"}]))
    with pytest.raises(ValueError, match="text, shell, tool or error"):
        load_script(bad)
    bad.write_text(json.dumps([{"tool": "grep", "args": ["x"]}]))
    with pytest.raises(ValueError, match="args are an object"):
        load_script(bad)
