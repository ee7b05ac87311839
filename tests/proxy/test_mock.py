"""The offline mock provider: oracle and script replies in each wire format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.mock import find_shell_tool, has_tool_result, heredoc, load_script, shell_args
from tests.proxy.conftest import anthropic_client, openai_client, read_log

SOLUTION = "#!/bin/bash\necho hello > /app/out.txt\n"
COMMAND = "bash <<'BENCHFLOW_EOF'\n#!/bin/bash\necho hello > /app/out.txt\nBENCHFLOW_EOF"
OBJ = {"type": "object"}
BASH_SCHEMA = {**OBJ, "properties": {"command": {"type": "string"},
                                     "timeout": {"type": "number"},
                                     "description": {"type": "string"}},
               "required": ["command"]}
CHAT_BASH = [{"type": "function", "function": {"name": "bash", "parameters": {
    **OBJ, "properties": {"command": {"type": "string"}, "workdir": {"type": "string"}},
    "required": ["command"]}}}]
CODEX_TOOLS = [
    {"type": "function", "name": "write_stdin", "parameters": OBJ},
    {"type": "function", "name": "exec_command", "parameters": {
        **OBJ, "properties": {"cmd": {"type": "string"}, "yield_time_ms": {"type": "number"}},
        "required": ["cmd"]}},
    {"type": "web_search"},
]


@pytest.mark.parametrize(("protocol", "tools", "name"), [
    ("messages", [{"name": "Read", "input_schema": OBJ}, {"name": "Bash",
                                                          "input_schema": BASH_SCHEMA}],
     "Bash"),
    ("chat", CHAT_BASH, "bash"),
    ("responses", CODEX_TOOLS, "exec_command"),
    ("chat", [{"type": "function", "function": {"name": "run_in_shell", "parameters": OBJ}}],
     "run_in_shell"),
    ("chat", [{"type": "function", "function": {"name": "read", "parameters": OBJ}}], None),
    ("messages", None, None),
])
def test_find_shell_tool(protocol: str, tools: Any, name: str | None) -> None:
    found = find_shell_tool(protocol, tools)
    assert (found[0] if found else None) == name


@pytest.mark.parametrize(("schema", "args"), [
    (BASH_SCHEMA, {"command": "ls", "timeout": 600000,
                   "description": "Run the task's solution script"}),
    ({**OBJ, "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}, {"cmd": "ls"}),
    ({**OBJ, "properties": {"cmd": {"type": "string"}, "yield_time_ms": {"type": "number"}},
      "required": ["cmd"]}, {"cmd": "ls", "yield_time_ms": 600000}),
    ({**OBJ, "properties": {"command": {"type": "array", "items": {"type": "string"}}}},
     {"command": ["bash", "-lc", "ls"]}),
    ({**OBJ, "properties": {"script": {"type": "string"}, "login": {"type": "boolean"},
                            "shell": {"type": "string", "default": "/bin/sh"}},
      "required": ["script", "login", "shell"]},
     {"script": "ls", "login": False, "shell": "/bin/sh"}),
    ({}, {"command": "ls"}),
])
def test_shell_args_follow_the_schema(schema: dict[str, Any], args: dict[str, Any]) -> None:
    assert shell_args(schema, "ls") == args


def test_heredoc_picks_a_marker_the_script_does_not_use() -> None:
    assert heredoc(SOLUTION) == COMMAND
    tricky = "cat <<'BENCHFLOW_EOF'\nx\nBENCHFLOW_EOF\n"
    assert heredoc(tricky).startswith("bash <<'BENCHFLOW_EOF_'\n")


@pytest.mark.parametrize(("protocol", "body", "found"), [
    ("messages", {"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_bforacle_0", "content": "ok"}]}]}, True),
    ("messages", {"messages": [{"role": "user", "content": "hi"}]}, False),
    ("chat", {"messages": [{"role": "tool", "tool_call_id": "call_bforacle_0",
                            "content": "(no output)"}]}, True),
    ("chat", {"messages": [{"role": "tool", "tool_call_id": "call_other", "content": ""}]},
     False),
    ("responses", {"input": [{"type": "function_call_output", "call_id": "call_bforacle_0",
                              "output": "Process exited with code 0"}]}, True),
    ("responses", {"input": "just text"}, False),
])
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
    with pytest.raises(ValueError, match="text, shell or error"):
        load_script(bad)


@pytest.mark.parametrize("stream", [False, True])
async def test_oracle_with_claude_codes_bash_tool(proxy, register, stream: bool) -> None:
    key, _ = register("mock/oracle", solution_text=SOLUTION)
    client = anthropic_client(proxy, key)
    tools = [{"name": "Bash", "input_schema": BASH_SCHEMA}]
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "do the task"}]

    async def ask() -> Any:
        if stream:
            async with client.messages.stream(model="claude-sonnet-4-6", max_tokens=99,
                                              messages=msgs, tools=tools) as s:
                return await s.get_final_message()
        return await client.messages.create(model="claude-sonnet-4-6", max_tokens=99,
                                            messages=msgs, tools=tools)

    first = await ask()
    [use] = first.content
    assert (use.type, use.name, first.stop_reason) == ("tool_use", "Bash", "tool_use")
    assert use.input["command"] == COMMAND
    msgs += [{"role": "assistant", "content": [use.model_dump(include={"type", "id", "name",
                                                                         "input"})]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                           "content": "(Bash completed with no output)"}]}]
    final = await ask()
    assert final.content[0].text == "Done." and final.stop_reason == "end_turn"


@pytest.mark.parametrize("stream", [False, True])
async def test_oracle_with_opencodes_bash_tool(proxy, register, stream: bool) -> None:
    key, _ = register("mock/oracle", solution_text=SOLUTION)
    client = openai_client(proxy, key)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "do the task"}]

    async def ask() -> tuple[str, list[Any]]:
        if stream:
            text, calls = "", {}
            async for c in await client.chat.completions.create(
                    model="mock-model", messages=msgs, tools=CHAT_BASH, stream=True):
                for choice in c.choices:
                    text += choice.delta.content or ""
                    for tc in choice.delta.tool_calls or []:
                        slot = calls.setdefault(tc.index, {"id": tc.id, "name": "", "args": ""})
                        slot["name"] += tc.function.name or ""
                        slot["args"] += tc.function.arguments or ""
            return text, list(calls.values())
        r = await client.chat.completions.create(model="mock-model", messages=msgs,
                                                 tools=CHAT_BASH)
        m = r.choices[0].message
        return m.content or "", [{"id": t.id, "name": t.function.name,
                                  "args": t.function.arguments} for t in m.tool_calls or []]

    _, [call] = await ask()
    assert call["name"] == "bash" and json.loads(call["args"]) == {"command": COMMAND}
    msgs += [{"role": "assistant", "content": None, "tool_calls": [
        {"id": call["id"], "type": "function",
         "function": {"name": "bash", "arguments": call["args"]}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": "(no output)"}]
    text, calls = await ask()
    assert (text, calls) == ("Done.", [])


@pytest.mark.parametrize("stream", [False, True])
async def test_oracle_with_codexs_exec_command(proxy, register, stream: bool) -> None:
    key, _ = register("mock/oracle", solution_text=SOLUTION)
    client = openai_client(proxy, key)
    items: list[dict[str, Any]] = [{"role": "user", "content": "do the task"}]

    async def ask() -> Any:
        if stream:
            events = [e async for e in await client.responses.create(
                model="gpt-5-codex", input=items, tools=CODEX_TOOLS, stream=True)]
            assert [e.sequence_number for e in events] == list(range(len(events)))
            return events[-1].response
        return await client.responses.create(model="gpt-5-codex", input=items,
                                             tools=CODEX_TOOLS)

    first = await ask()
    [call] = first.output
    assert call.type == "function_call" and call.name == "exec_command"
    assert json.loads(call.arguments) == {"cmd": COMMAND, "yield_time_ms": 600000}
    items += [{"type": "function_call", "call_id": call.call_id, "name": call.name,
               "arguments": call.arguments},
              {"type": "function_call_output", "call_id": call.call_id,
               "output": "Process exited with code 0"}]
    final = await ask()
    assert final.output_text == "Done."


async def test_a_side_call_without_tools_gets_short_text(proxy, register) -> None:
    key, _ = register("mock/oracle", solution_text=SOLUTION)
    r = await openai_client(proxy, key).chat.completions.create(
        model="m", messages=[{"role": "system", "content": "You are a title generator"}])
    assert r.choices[0].message.content == "Solving the task"


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "ping"}]}),
    ("/v1/responses", {"model": "m", "input": "ping", "stream": True}),
    ("/v1/messages", {"model": "m", "max_tokens": 5, "stream": True,
                      "messages": [{"role": "user", "content": "ping"}]}),
])
async def test_mock_usage_is_deterministic(proxy, register, path: str,
                                           body: dict[str, Any]) -> None:
    key, log = register("mock/echo")
    raw = json.dumps(body).encode()
    async with httpx.AsyncClient() as http:
        r = await http.post(proxy.url + path, content=raw, headers={"x-api-key": key})
    assert r.status_code == 200
    reply = "echo: ping"
    want = {"input_tokens": len(raw) // 4, "output_tokens": len(reply) // 4,
            "cache_read_tokens": 0, "cache_creation_tokens": 0,
            "total_tokens": len(raw) // 4 + len(reply) // 4}
    [line] = read_log(proxy, log)
    assert line["usage"] == want
    u = proxy.registry.usage(key)
    assert u.total_tokens == want["total_tokens"]
    assert u.cost_usd == pytest.approx((want["input_tokens"] * 1.0
                                        + want["output_tokens"] * 5.0) / 1e6)


async def test_script_replays_in_order_then_finishes(proxy, register, tmp_path) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([
        {"shell": "echo one"},
        {"error": {"status": 429, "body": {"error": {"message": "slow down",
                                                     "type": "rate_limit"}}}},
        {"text": "all good"},
    ]))
    key, _ = register(f"mock/script:{script}")
    client = openai_client(proxy, key)

    async def ask() -> Any:
        return await client.chat.completions.create(model="m", messages=[
            {"role": "user", "content": "go"}], tools=CHAT_BASH)

    first = await ask()
    assert json.loads(first.choices[0].message.tool_calls[0].function.arguments) == {
        "command": "echo one"}
    with pytest.raises(openai.RateLimitError, match="slow down"):
        await ask()
    assert (await ask()).choices[0].message.content == "all good"
    assert (await ask()).choices[0].message.content == "Done."
    u = proxy.registry.usage(key)
    assert (u.turns, u.errors) == (4, {"provider_rate_limit": 1})
