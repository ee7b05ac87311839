"""The offline mock provider through the proxy: oracle and script replies, every format."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.proxy.conftest import anthropic_client, openai_client, read_log
from tests.proxy.mock_tools import BASH_SCHEMA, CHAT_BASH, CODEX_TOOLS, COMMAND, SOLUTION


@pytest.mark.parametrize("stream", [False, True])
async def test_oracle_with_claude_codes_bash_tool(proxy, register, stream: bool) -> None:
    key, _ = register("mock/oracle", solution_text=SOLUTION)
    client = anthropic_client(proxy, key)
    tools = [{"name": "Bash", "input_schema": BASH_SCHEMA}]
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "do the task"}]

    async def ask() -> Any:
        if stream:
            async with client.messages.stream(
                model="claude-sonnet-4-6", max_tokens=99, messages=msgs, tools=tools
            ) as s:
                return await s.get_final_message()
        return await client.messages.create(
            model="claude-sonnet-4-6", max_tokens=99, messages=msgs, tools=tools
        )

    first = await ask()
    [use] = first.content
    assert (use.type, use.name, first.stop_reason) == ("tool_use", "Bash", "tool_use")
    assert use.input["command"] == COMMAND
    msgs += [
        {"role": "assistant", "content": [use.model_dump(include={"type", "id", "name", "input"})]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": use.id,
                    "content": "(Bash completed with no output)",
                }
            ],
        },
    ]
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
                model="mock-model", messages=msgs, tools=CHAT_BASH, stream=True
            ):
                for choice in c.choices:
                    text += choice.delta.content or ""
                    for tc in choice.delta.tool_calls or []:
                        slot = calls.setdefault(tc.index, {"id": tc.id, "name": "", "args": ""})
                        slot["name"] += tc.function.name or ""
                        slot["args"] += tc.function.arguments or ""
            return text, list(calls.values())
        r = await client.chat.completions.create(model="mock-model", messages=msgs, tools=CHAT_BASH)
        m = r.choices[0].message
        return m.content or "", [
            {"id": t.id, "name": t.function.name, "args": t.function.arguments}
            for t in m.tool_calls or []
        ]

    _, [call] = await ask()
    assert call["name"] == "bash" and json.loads(call["args"]) == {"command": COMMAND}
    msgs += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": "bash", "arguments": call["args"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": "(no output)"},
    ]
    text, calls = await ask()
    assert (text, calls) == ("Done.", [])


@pytest.mark.parametrize("stream", [False, True])
async def test_oracle_with_codexs_exec_command(proxy, register, stream: bool) -> None:
    key, _ = register("mock/oracle", solution_text=SOLUTION)
    client = openai_client(proxy, key)
    items: list[dict[str, Any]] = [{"role": "user", "content": "do the task"}]

    async def ask() -> Any:
        if stream:
            events = [
                e
                async for e in await client.responses.create(
                    model="gpt-5-codex", input=items, tools=CODEX_TOOLS, stream=True
                )
            ]
            assert [e.sequence_number for e in events] == list(range(len(events)))
            return events[-1].response
        return await client.responses.create(model="gpt-5-codex", input=items, tools=CODEX_TOOLS)

    first = await ask()
    [call] = first.output
    assert call.type == "function_call" and call.name == "exec_command"
    assert json.loads(call.arguments) == {"cmd": COMMAND, "yield_time_ms": 600000}
    items += [
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        },
        {
            "type": "function_call_output",
            "call_id": call.call_id,
            "output": "Process exited with code 0",
        },
    ]
    final = await ask()
    assert final.output_text == "Done."


async def test_a_side_call_without_tools_gets_short_text(proxy, register) -> None:
    key, _ = register("mock/oracle", solution_text=SOLUTION)
    r = await openai_client(proxy, key).chat.completions.create(
        model="m", messages=[{"role": "system", "content": "You are a title generator"}]
    )
    assert r.choices[0].message.content == "Solving the task"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "ping"}]}),
        ("/v1/responses", {"model": "m", "input": "ping", "stream": True}),
        (
            "/v1/messages",
            {
                "model": "m",
                "max_tokens": 5,
                "stream": True,
                "messages": [{"role": "user", "content": "ping"}],
            },
        ),
    ],
)
async def test_mock_usage_is_deterministic(
    proxy, register, path: str, body: dict[str, Any]
) -> None:
    key, log = register("mock/echo")
    raw = json.dumps(body).encode()
    async with httpx.AsyncClient() as http:
        r = await http.post(proxy.url + path, content=raw, headers={"x-api-key": key})
    assert r.status_code == 200
    reply = "echo: ping"
    want = {
        "input_tokens": len(raw) // 4,
        "output_tokens": len(reply) // 4,
        "cache_read_tokens": 0,
        "cache_creation_tokens": 0,
        "total_tokens": len(raw) // 4 + len(reply) // 4,
    }
    [line] = read_log(proxy, log)
    assert line["usage"] == want
    u = proxy.registry.usage(key)
    assert u.total_tokens == want["total_tokens"]
    assert u.cost_usd == pytest.approx(
        (want["input_tokens"] * 1.0 + want["output_tokens"] * 5.0) / 1e6
    )


async def test_script_replays_in_order_then_finishes(proxy, register, tmp_path) -> None:
    script = tmp_path / "replies.json"
    script.write_text(
        json.dumps(
            [
                {"shell": "echo one"},
                {
                    "error": {
                        "status": 429,
                        "body": {"error": {"message": "slow down", "type": "rate_limit"}},
                    }
                },
                {"text": "all good"},
            ]
        )
    )
    key, _ = register(f"mock/script:{script}")
    client = openai_client(proxy, key)

    async def ask() -> Any:
        return await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}], tools=CHAT_BASH
        )

    first = await ask()
    assert json.loads(first.choices[0].message.tool_calls[0].function.arguments) == {
        "command": "echo one"
    }
    with pytest.raises(openai.RateLimitError, match="slow down"):
        await ask()
    assert (await ask()).choices[0].message.content == "all good"
    assert (await ask()).choices[0].message.content == "Done."
    u = proxy.registry.usage(key)
    assert (u.turns, u.errors) == (4, {"provider_rate_limit": 1})


async def test_script_calls_a_named_tool_the_request_offers(proxy, register, tmp_path) -> None:
    # given a script that calls Claude Code's Grep tool, then one the agent does not have
    script = tmp_path / "replies.json"
    script.write_text(
        json.dumps(
            [
                {"tool": "Grep", "args": {"pattern": "needle", "path": "/app"}},
                {"tool": "WebSearch", "args": {"query": "x"}},
            ]
        )
    )
    key, _ = register(f"mock/script:{script}")
    client = anthropic_client(proxy, key)
    tools = [
        {"name": "Bash", "input_schema": BASH_SCHEMA},
        {
            "name": "Grep",
            "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}}},
        },
    ]

    async def ask() -> Any:
        async with client.messages.stream(
            model="claude-sonnet-4-6",
            max_tokens=99,
            messages=[{"role": "user", "content": "go"}],
            tools=tools,
        ) as s:
            return await s.get_final_message()

    # then the first reply is that call, with the script's arguments as given
    [use] = (await ask()).content
    assert (use.type, use.name, use.input) == (
        "tool_use",
        "Grep",
        {"pattern": "needle", "path": "/app"},
    )
    # and a tool the request does not offer is not called: the reply says what is offered
    [text] = (await ask()).content
    assert text.type == "text" and "'WebSearch'" in text.text and "Bash, Grep" in text.text


async def test_script_calls_a_tool_in_a_namespace_as_codex_offers_them(
    proxy, register, tmp_path
) -> None:
    # given a script that spawns a sub-agent through Codex's multi_agent_v1 namespace
    script = tmp_path / "replies.json"
    script.write_text(
        json.dumps([{"tool": "multi_agent_v1.spawn_agent", "args": {"message": "look around"}}])
    )
    key, _ = register(f"mock/script:{script}")
    tools = [
        {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
        {
            "type": "namespace",
            "name": "multi_agent_v1",
            "description": "sub-agents",
            "tools": [
                {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}
            ],
        },
    ]
    # when Codex's Responses stream asks (through the raw API: the SDK's types predate namespaces)
    async with httpx.AsyncClient() as client:
        resp = await client.post(
            f"{proxy.url}/v1/responses",
            headers={"authorization": f"Bearer {key}"},
            json={"model": "m", "stream": True, "input": "go", "tools": tools},
        )
    done = [
        json.loads(line[6:])
        for line in resp.text.splitlines()
        if line.startswith("data: ") and '"response.completed"' in line
    ]
    # then the call names the tool and its namespace apart, as Codex reads them
    [item] = done[0]["response"]["output"]
    assert (item["type"], item["namespace"], item["name"]) == (
        "function_call",
        "multi_agent_v1",
        "spawn_agent",
    )
    assert json.loads(item["arguments"]) == {"message": "look around"}


async def test_a_key_without_a_model_replays_the_script_its_requests_name(
    proxy, register, tmp_path
) -> None:
    # given a key of bench proxy's kind (no model of its own) and two scripts
    key, _ = register(None)
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps([{"text": "one"}, {"text": "two"}]))
    second.write_text(json.dumps([{"text": "other"}]))
    client = openai_client(proxy, key)

    async def ask(model: str) -> str | None:
        resp = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "go"}], tools=CHAT_BASH
        )
        return resp.choices[0].message.content

    # then each request gets the named script's next reply, and another script starts from its first
    assert [await ask(f"mock/script:{first}") for _ in range(3)] == ["one", "two", "Done."]
    assert await ask(f"mock/script:{second}") == "other"
    # and a script that cannot be read is the client's error, with the reason
    with pytest.raises(openai.BadRequestError, match="missing.json"):
        await ask(f"mock/script:{tmp_path / 'missing.json'}")


async def test_a_tool_entry_waits_for_a_request_that_offers_it_and_can_use_the_last_output(
    proxy, register, tmp_path
) -> None:
    # given a script whose second entry waits on the agent a spawn returned
    script = tmp_path / "replies.json"
    script.write_text(
        json.dumps(
            [
                {"tool": "spawn", "args": {"message": "go"}},
                {
                    "tool": "wait",
                    "args": {"targets": ["$LAST_OUTPUT.agent_id"], "missing": "$LAST_OUTPUT.nope"},
                },
                {"text": "all done"},
            ]
        )
    )
    key, _ = register(f"mock/script:{script}")
    client = openai_client(proxy, key)
    parent_tools = [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
        for n in ("spawn", "wait", "bash")
    ]
    sub_tools = parent_tools[2:]

    async def ask(tools: list[dict[str, Any]], messages: list[dict[str, Any]]) -> Any:
        resp = await client.chat.completions.create(model="m", messages=messages, tools=tools)
        return resp.choices[0].message

    go = [{"role": "user", "content": "go"}]
    spawn = await ask(parent_tools, go)
    assert spawn.tool_calls[0].function.name == "spawn"
    # when the subagent asks first: it does not offer `wait`, so it gets text, and the entry waits
    said = await ask(sub_tools, [{"role": "user", "content": "go"}])
    assert said.tool_calls is None and "'wait'" in said.content
    # then the parent, with the spawn's output in its conversation, gets the wait with the id filled in
    after = [
        *go,
        {"role": "assistant", "tool_calls": [spawn.tool_calls[0].model_dump()]},
        {
            "role": "tool",
            "tool_call_id": spawn.tool_calls[0].id,
            "content": '{"agent_id": "a-17", "nickname": "N"}',
        },
    ]
    wait = await ask(parent_tools, after)
    assert json.loads(wait.tool_calls[0].function.arguments) == {
        "targets": ["a-17"],
        "missing": None,
    }
    assert (await ask(parent_tools, after)).content == "all done"
