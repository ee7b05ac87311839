"""The trial's event stream merged from the agent's session log and the proxy's trajectory: the log's
steps, each model call with the proxy's model, tokens and duration, and the calls the log lacks.

The fixtures keep the shapes a real Claude Code 2.1.197, Codex and OpenCode 1.18.33 run through the
proxy's mock model left in the attempt folder (tests/e2e/test_agents_docker.py's subagent tests),
cut to what matters.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from runs.results import event_stream as es
from tests.trajectories import at

SESSION = "agent/sessions/-app/s1.jsonl"
ROLLOUT = "agent/sessions/2026/12/01/rollout-2026-12-01T10-00-00-main.jsonl"


def write_jsonl(folder: Path, rel: str, lines: list[dict[str, Any]]) -> None:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def sse(*events: dict[str, Any]) -> str:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


def messages_sse(msg_id: str, tool: tuple[str, str] | None = None, text: str = "") -> str:
    """A Messages stream as the mock sends it: message_start (the reply's id), then a tool_use or
    a text block."""
    start = {"type": "message_start", "message": {"id": msg_id, "role": "assistant", "content": []}}
    if tool:
        block = {"type": "tool_use", "id": tool[0], "name": tool[1], "input": {}}
        delta = {"type": "input_json_delta", "partial_json": "{}"}
    else:
        block, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": text}
    return sse(
        start,
        {"type": "content_block_start", "index": 0, "content_block": block},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_stop"},
    )


def proxy_line(second: int, tokens: tuple[int, int], sse_text: str = "", **extra: Any) -> dict:
    """A trajectory line with the proxy's keys (its request cut to nothing)."""
    return {
        "protocol": "messages",
        "model": "mock-model",
        "stream": True,
        "started_at": at(second),
        "duration_s": 0.5,
        "status": 200,
        "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]},
        "error_class": None,
        "error": None,
        "refused": False,
        "request": {"messages": []},
        "response": None,
        "response_sse": sse_text,
        **extra,
    }


def claude(kind: str, second: int, content: Any, **extra: Any) -> dict[str, Any]:
    message = {"role": kind, "content": content, **extra.pop("message", {})}
    return {
        "type": kind,
        "isSidechain": False,
        "sessionId": "s1",
        "timestamp": at(second),
        "message": message,
        **extra,
    }


def assistant(second: int, msg_id: str, content: list[dict[str, Any]], **extra: Any) -> dict:
    usage = {"input_tokens": 1, "cache_read_input_tokens": 0, "output_tokens": 1}
    return claude("assistant", second, content, message={"id": msg_id, "usage": usage}, **extra)


def claude_trial(folder: Path) -> None:
    """Claude Code ran a subagent (its Agent tool); the proxy also saw a failed call first."""
    write_jsonl(
        folder,
        SESSION,
        [
            {"type": "queue-operation", "operation": "enqueue", "timestamp": at(0)},
            claude("user", 1, "Task t."),
            assistant(3, "msg_a", [{"type": "tool_use", "id": "toolu_0", "name": "Agent"}]),
            claude(
                "user",
                6,
                [{"type": "tool_result", "tool_use_id": "toolu_0", "content": "hello"}],
                toolUseResult={"status": "completed", "agentId": "a7"},
            ),
            assistant(7, "msg_c", [{"type": "text", "text": "Done."}]),
            {"type": "last-prompt", "sessionId": "s1"},
        ],
    )
    write_jsonl(
        folder,
        "agent/sessions/-app/s1/subagents/agent-a7.jsonl",
        [
            claude("user", 4, "Say hello.", isSidechain=True),
            assistant(5, "msg_b", [{"type": "text", "text": "hello"}], isSidechain=True),
        ],
    )
    write_jsonl(
        folder,
        es.TRAJECTORY,
        [
            proxy_line(1, (0, 0), status=529, error="overloaded", error_class="upstream"),
            proxy_line(2, (19066, 20), messages_sse("msg_a", ("toolu_0", "Agent"))),
            proxy_line(4, (11286, 1), messages_sse("msg_b", text="hello")),
            proxy_line(6, (19199, 1), messages_sse("msg_c", text="Done.")),
        ],
    )


def source_of(folder: Path, rel: str) -> es.Source:
    source = es.find_source(folder, [rel, es.TRAJECTORY])
    assert source is not None
    return source


def read_all(folder: Path, source: es.Source, per_page: int) -> list[es.Event]:
    cursor, out = es.Cursor(), []
    while True:
        page = es.stream_page(folder, source, cursor, per_page)
        out += page.events
        if page.done:
            return out
        cursor = es.Cursor.parse(dict(parse_qsl(page.cursor.query())))


def calls_of(events: list[es.Event]) -> list[int]:
    return [m.call for e in events for m in (e, *e.children) if m.call >= 0]


def test_claude_code_calls_take_the_proxys_usage_and_its_subagent_nests_under_its_agent_call(
    tmp_path: Path,
) -> None:
    # given
    claude_trial(tmp_path)
    source = source_of(tmp_path, SESSION)
    # when
    events = es.stream_page(tmp_path, source, es.Cursor()).events
    # then: one ordered stream, the failed call the log does not show where the proxy saw it
    assert source == es.Source("claude", SESSION, es.TRAJECTORY)
    assert [(e.n, e.kind, e.title) for e in events] == [
        (1, "prompt", "user"),
        (2, "error", "failed call (HTTP 529)"),
        (3, "call", "model call"),
        (4, "tool", "Agent"),
        (5, "call", "model call"),
        (6, "message", "assistant"),
    ]
    # each of the log's calls shows the proxy's model, tokens and duration, and its line
    assert [(e.meta, e.duration_s, e.call) for e in events if e.kind == "call"] == [
        ("mock-model · 19,066 in · 20 out", 0.5, 1),
        ("mock-model · 19,199 in · 1 out", 0.5, 3),
    ]
    # the subagent's steps nest under the Agent call, its call with the proxy's usage too
    agent = events[3]
    assert (agent.status, agent.output) == ("ok", "hello")
    assert [(c.kind, c.meta, c.call) for c in agent.children] == [
        ("prompt", "", -1),
        ("call", "mock-model · 11,286 in · 1 out", 2),
        ("message", "", -1),
    ]
    # and every proxy call is shown once
    assert sorted(calls_of(events)) == [0, 1, 2, 3]
    assert [e.text for e in events if e.kind == "message"] == ["Done."]


def test_paging_a_merged_stream_numbers_and_places_everything_as_one_read_does(
    tmp_path: Path,
) -> None:
    claude_trial(tmp_path)
    source = source_of(tmp_path, SESSION)
    whole = [(e.n, e.kind, e.call, e.output) for e in read_all(tmp_path, source, 10_000)]
    for per_page in (1, 2, 3):
        paged = read_all(tmp_path, source, per_page)
        assert [(e.n, e.kind, e.call, e.output) for e in paged] == whole, per_page
        assert sorted(calls_of(paged)) == [0, 1, 2, 3]


def test_search_in_a_merged_stream_names_the_events_number(tmp_path: Path) -> None:
    claude_trial(tmp_path)
    source = source_of(tmp_path, SESSION)
    page = es.search(tmp_path, source, "done.", es.Cursor())
    assert [(e.n, e.kind) for e in page.hits] == [(6, "message")]


def test_calls_the_log_ends_before_come_at_the_end(tmp_path: Path) -> None:
    # given a log cut short (a stopped agent): the proxy saw one more call
    claude_trial(tmp_path)
    with (tmp_path / es.TRAJECTORY).open("a") as fh:
        fh.write(json.dumps(proxy_line(8, (20000, 5), messages_sse("msg_d", text="late"))) + "\n")
    events = read_all(tmp_path, source_of(tmp_path, SESSION), 2)
    last = events[-1]
    assert (last.kind, last.title, last.call) == ("call", "model call · not in the session log", 4)
    assert [(c.kind, c.text) for c in last.children] == [("message", "late")]
    assert sorted(calls_of(events)) == [0, 1, 2, 3, 4]


def codex(kind: str, second: int, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": at(second), "type": kind, "payload": payload}


def token_count(second: int, tokens: tuple[int, int]) -> dict[str, Any]:
    last = {"input_tokens": tokens[0], "cached_input_tokens": 0, "output_tokens": tokens[1]}
    return codex("event_msg", second, {"type": "token_count", "info": {"last_token_usage": last}})


def responses_sse(resp_id: str, call: tuple[str, str] | None = None, text: str = "") -> str:
    item = (
        {"type": "function_call", "call_id": call[0], "name": call[1], "arguments": "{}"}
        if call
        else {"type": "message", "content": [{"type": "output_text", "text": text}]}
    )
    response = {"id": resp_id, "status": "completed", "output": [item]}
    return sse(
        {"type": "response.created", "response": {"id": resp_id, "output": []}},
        {"type": "response.completed", "response": response},
    )


def test_codex_calls_take_the_proxys_usage_and_a_sub_agents_call_shows_once(
    tmp_path: Path,
) -> None:
    # given Codex's main thread spawned a sub-agent (its thread is another rollout), then answered
    spawn = ("call_0", "spawn_agent")
    write_jsonl(
        tmp_path,
        ROLLOUT,
        [
            codex("session_meta", 0, {"id": "main", "source": "exec"}),
            codex("response_item", 1, {"type": "message", "role": "user", "content": "Task t."}),
            codex(
                "response_item",
                2,
                {"type": "function_call", "call_id": spawn[0]}
                | {"name": spawn[1], "arguments": "{}"},
            ),
            codex("token_usage_record", 2, {}),
            codex(
                "response_item",
                3,
                {"type": "function_call_output", "call_id": spawn[0]} | {"output": "spawned"},
            ),
            token_count(3, (10122, 6)),
            codex(
                "response_item",
                6,
                {"type": "message", "role": "assistant"}
                | {"content": [{"type": "output_text", "text": "Done."}]},
            ),
            token_count(6, (10402, 1)),
        ],
    )
    write_jsonl(
        tmp_path,
        es.TRAJECTORY,
        [
            proxy_line(2, (10122, 6), responses_sse("resp_0", spawn), protocol="responses"),
            proxy_line(4, (7480, 1), responses_sse("resp_1", text="hello"), protocol="responses"),
            proxy_line(5, (10402, 1), responses_sse("resp_2", text="Done."), protocol="responses"),
        ],
    )
    # when
    events = es.stream_page(tmp_path, source_of(tmp_path, ROLLOUT), es.Cursor()).events
    # then: the main thread's calls carry the proxy's figures; the sub-agent's, which the main
    # log does not show, comes once, after the call before it, its answer nested
    assert [(e.kind, e.call) for e in events] == [
        ("prompt", -1),
        ("tool", -1),
        ("call", 0),
        ("call", 1),
        ("message", -1),
        ("call", 2),
    ]
    assert events[2].meta == "mock-model · 10,122 in · 6 out"
    assert events[3].title == "model call · not in the session log"
    assert [(c.kind, c.text) for c in events[3].children] == [("message", "hello")]
    assert events[5].meta == "mock-model · 10,402 in · 1 out"


def test_a_refused_call_comes_once_before_the_error_claude_code_shows_for_it(
    tmp_path: Path,
) -> None:
    # given: the proxy refused the second call (the turn budget was spent); Claude Code logs the
    # error as a message of its own, with no tokens (model <synthetic>)
    zero = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0}
    write_jsonl(
        tmp_path,
        SESSION,
        [
            claude("user", 1, "Task hello."),
            assistant(3, "msg_a", [{"type": "tool_use", "id": "toolu_0", "name": "Bash"}]),
            claude("user", 4, [{"type": "tool_result", "tool_use_id": "toolu_0", "content": ""}]),
            claude(
                "assistant",
                6,
                [{"type": "text", "text": "API Error: 400 trial_budget_spent"}],
                message={"id": "ffb2742c", "model": "<synthetic>", "usage": zero},
                isApiErrorMessage=True,
            ),
        ],
    )
    refusal = {"type": "error", "error": {"message": "trial_budget_spent: the turn budget"}}
    write_jsonl(
        tmp_path,
        es.TRAJECTORY,
        [
            proxy_line(2, (19037, 39), messages_sse("msg_a", ("toolu_0", "Bash"))),
            proxy_line(5, (0, 0), status=400, usage=None, error="trial_budget_spent")
            | {"refused": True, "stream": False, "response": refusal, "response_sse": None},
        ],
    )
    # when
    events = read_all(tmp_path, source_of(tmp_path, SESSION), 10_000)
    # then
    assert [(e.kind, e.title, e.call) for e in events] == [
        ("prompt", "user", -1),
        ("call", "model call", 0),
        ("tool", "Bash", -1),
        ("error", "refused call", 1),
        ("message", "assistant", -1),
    ]


OPENCODE = "agent/sessions/opencode-messages.jsonl"


def ms(second: int) -> int:
    """An OpenCode time: milliseconds since the epoch."""
    return int(datetime.fromisoformat(at(second)).timestamp() * 1000)


def opencode(
    second: int, role: str, parts: list[dict[str, Any]], session: str = "ses_main", **message: Any
) -> dict[str, Any]:
    """A line of the kept store: a message of a session (a subagent's has a parent), its parts."""
    sub = session != "ses_main"
    return {
        "session": session,
        "parent": "ses_main" if sub else None,
        "agent": "general" if sub else "build",
        "message": {
            "id": f"msg_{second}",
            "sessionID": session,
            "role": role,
            "time": {"created": ms(second)},
            **message,
        },
        "parts": parts,
    }


def oc_tokens(given: int, made: int) -> dict[str, Any]:
    cache = {"write": 0, "read": 0}  # counted apart from input by OpenCode; the mock caches nothing
    return {"total": given + made, "input": given, "output": made, "reasoning": 0, "cache": cache}


def oc_step(tokens: dict[str, Any], *parts: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant message's parts: one step (one model call) between its start and finish."""
    finish = {"type": "step-finish", "reason": "stop", "tokens": tokens, "cost": 0}
    return [{"type": "step-start"}, *parts, finish]


def oc_tool(call_id: str, tool: str, start: int, end: int, output: str, **meta: Any) -> dict:
    state = {"status": "completed", "input": {"description": "say hello"}, "output": output}
    state |= {"title": "", "metadata": meta, "time": {"start": ms(start), "end": ms(end)}}
    return {"type": "tool", "tool": tool, "callID": call_id, "state": state}


def chat_sse(tool: tuple[str, str] | None = None, text: str = "") -> str:
    """A chat completions stream as the mock sends it: a tool call or a text."""
    delta: dict[str, Any] = {"role": "assistant", "content": text}
    if tool:
        call = {"index": 0, "id": tool[0], "type": "function"}
        delta = {"role": "assistant", "tool_calls": [call | {"function": {"name": tool[1]}}]}
    frame = {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": delta}]}
    return f"data: {json.dumps(frame)}\n\ndata: [DONE]\n\n"


def opencode_trial(folder: Path) -> None:
    """OpenCode ran a subagent (its task tool); the proxy also saw its session-title call first."""
    write_jsonl(
        folder,
        OPENCODE,
        [
            opencode(1, "user", [{"type": "text", "text": "Task t."}]),
            opencode(
                2,
                "assistant",
                oc_step(
                    oc_tokens(9000, 20),
                    {"type": "reasoning", "text": "A subagent can do it."},
                    oc_tool("call_bfscript_0", "task", 3, 6, "hello", sessionId="ses_sub"),
                ),
                tokens=oc_tokens(9000, 20),
                modelID="mock-model",
            ),
            opencode(4, "user", [{"type": "text", "text": "Say hello."}], "ses_sub"),
            opencode(
                5,
                "assistant",
                oc_step(oc_tokens(5000, 1), {"type": "text", "text": "hello"}),
                "ses_sub",
                tokens=oc_tokens(5000, 1),
            ),
            opencode(
                7,
                "assistant",
                oc_step(oc_tokens(9100, 1), {"type": "text", "text": "Done."}),
                tokens=oc_tokens(9100, 1),
            ),
        ],
    )
    write_jsonl(
        folder,
        es.TRAJECTORY,
        [
            proxy_line(1, (300, 5), chat_sse(text="A title"), protocol="chat"),
            proxy_line(2, (9000, 20), chat_sse(("call_bfscript_0", "task")), protocol="chat"),
            proxy_line(5, (5000, 1), chat_sse(text="hello"), protocol="chat"),
            proxy_line(7, (9100, 1), chat_sse(text="Done."), protocol="chat"),
        ],
    )


def test_opencode_calls_take_the_proxys_usage_and_its_subagent_nests_under_its_task_call(
    tmp_path: Path,
) -> None:
    # given
    opencode_trial(tmp_path)
    source = source_of(tmp_path, OPENCODE)
    # when
    events = es.stream_page(tmp_path, source, es.Cursor()).events
    # then: one ordered stream, the title call the store does not hold where the proxy saw it
    assert source == es.Source("opencode", OPENCODE, es.TRAJECTORY)
    assert [(e.n, e.kind, e.title) for e in events] == [
        (1, "prompt", "user"),
        (2, "call", "model call · not in the session log"),
        (3, "call", "model call"),
        (4, "thought", "reasoning"),
        (5, "tool", "task"),
        (6, "call", "model call"),
        (7, "message", "assistant"),
    ]
    assert [(e.meta, e.duration_s, e.call) for e in events if e.kind == "call"] == [
        ("mock-model · 300 in · 5 out", 0.5, 0),
        ("mock-model · 9,000 in · 20 out", 0.5, 1),
        ("mock-model · 9,100 in · 1 out", 0.5, 3),
    ]
    assert [(c.kind, c.text) for c in events[1].children] == [("message", "A title")]
    # the task call carries its result, status and duration; its subagent's steps nest under it
    task = events[4]
    assert (task.status, task.output, task.duration_s, task.tool) == ("ok", "hello", 3.0, "task")
    assert [(c.kind, c.text, c.meta, c.call) for c in task.children] == [
        ("prompt", "Say hello.", "", -1),
        ("call", "", "mock-model · 5,000 in · 1 out", 2),
        ("message", "hello", "", -1),
    ]
    # and every proxy call is shown once
    assert sorted(calls_of(events)) == [0, 1, 2, 3]


def test_paging_an_opencode_stream_numbers_and_places_everything_as_one_read_does(
    tmp_path: Path,
) -> None:
    opencode_trial(tmp_path)
    source = source_of(tmp_path, OPENCODE)
    whole = [(e.n, e.kind, e.call, e.output) for e in read_all(tmp_path, source, 10_000)]
    for per_page in (1, 2, 3):
        paged = read_all(tmp_path, source, per_page)
        assert [(e.n, e.kind, e.call, e.output) for e in paged] == whole, per_page
        assert sorted(calls_of(paged)) == [0, 1, 2, 3]


def test_an_opencode_tool_that_failed_or_never_ended_says_so(tmp_path: Path) -> None:
    failed = oc_tool("call_0", "bash", 2, 3, "")
    failed["state"] |= {"status": "error", "error": "command not found"}
    stopped = oc_tool("call_1", "read", 3, 3, "")
    stopped["state"] = {"status": "running", "input": {}, "time": {"start": ms(3)}}
    line = opencode(2, "assistant", [failed, stopped], tokens=oc_tokens(10, 2))
    write_jsonl(tmp_path, OPENCODE, [line])
    events = es.stream_page(tmp_path, source_of(tmp_path, OPENCODE), es.Cursor()).events
    assert [(e.kind, e.title, e.status, e.output) for e in events] == [
        ("call", "model call", "", ""),
        ("tool", "bash", "error", "command not found"),
        ("tool", "read", "pending", ""),
    ]


def test_an_opencode_store_kept_without_parts_shows_the_trajectory(tmp_path: Path) -> None:
    # an attempt kept before the store's parts were: its lines hold no steps to show
    line = opencode(1, "user", [])
    del line["parts"]
    write_jsonl(tmp_path, OPENCODE, [line])
    write_jsonl(tmp_path, es.TRAJECTORY, [proxy_line(1, (1, 1))])
    assert es.find_source(tmp_path, [OPENCODE, es.TRAJECTORY]) == es.Source(
        "trajectory", es.TRAJECTORY
    )
