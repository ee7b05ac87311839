"""Reading an agent's JSON event stream: tool calls for the progress line, and Claude's subagent calls."""

import json

from runs.agents.claude import ClaudeAgent
from runs.agents.codex import CodexAgent
from runs.agents.opencode import OpenCodeAgent
from runs.trials.output_watch import OutputWatcher


def lines(*events) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def assistant(msg_id, *, parent=None, tool=None, tokens=(10, 5)):
    content = (
        [{"type": "tool_use", "name": "Bash", "input": {"command": tool}}]
        if tool
        else [{"type": "text"}]
    )
    return {
        "type": "assistant",
        "parent_tool_use_id": parent,
        "message": {
            "id": msg_id,
            "content": content,
            "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]},
        },
    }


def test_claude_tool_calls_and_subagent_usage_from_its_stream():
    seen = []
    watcher = OutputWatcher(ClaudeAgent(), seen.append)
    stream = lines(
        assistant("m1", tool="ls -la"),
        assistant("m2", parent="toolu_1", tool="python3 x.py", tokens=(100, 20)),
        assistant("m2", parent="toolu_1", tokens=(100, 20)),
        assistant("m3"),
    )
    # fed in awkward pieces, as a pipe delivers it
    for i in range(0, len(stream), 7):
        watcher.feed(stream[i : i + 7])
    assert seen == ["ls -la", "python3 x.py"]
    assert watcher.tool_calls == 2 and watcher.last_tool == "python3 x.py"
    assert watcher.subagents() == {"turns": 1, "tokens": 120, "of_turns": 3, "of_tokens": 150}


def test_opencode_and_codex_tool_events():
    oc = OutputWatcher(OpenCodeAgent(), lambda _t: None)
    oc.feed(
        lines(
            {
                "type": "tool_use",
                "part": {"tool": "bash", "state": {"input": {"command": "make test"}}},
            }
        )
    )
    assert oc.last_tool == "make test" and oc.subagents() is None
    cx = OutputWatcher(CodexAgent(), lambda _t: None)
    cx.feed(
        lines(
            {
                "type": "item.started",
                "item": {"type": "command_execution", "command": "/bin/bash -lc pytest"},
            },
            {"type": "item.started", "item": {"type": "agent_message", "text": "hi"}},
        )
    )
    assert cx.tool_calls == 1 and cx.last_tool == "/bin/bash -lc pytest"


def test_non_json_output_is_ignored():
    watcher = OutputWatcher(ClaudeAgent(), lambda _t: None)
    watcher.feed(b"plain text\n{not json\n")
    assert watcher.tool_calls == 0 and watcher.subagents() is None


def test_tool_calls_started_and_not_finished_are_open_for_each_agent():
    # Claude: an assistant message starts its tool_use blocks, the user message's tool_results end them
    cl = OutputWatcher(ClaudeAgent(), lambda _t: None)
    cl.feed(lines(assistant("m1", tool="make build")))
    assert cl.open_tools == 1
    cl.feed(
        lines(
            {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1"}]}}
        )
    )
    assert cl.open_tools == 0
    # OpenCode reports tools only once done, inside a step: an open step is pending work
    oc = OutputWatcher(OpenCodeAgent(), lambda _t: None)
    oc.feed(lines({"type": "step_start", "part": {}}))
    assert oc.open_tools == 1
    oc.feed(
        lines(
            {"type": "tool_use", "part": {"tool": "bash", "state": {"input": {"command": "x"}}}},
            {"type": "step_finish", "part": {"reason": "tool-calls"}},
        )
    )
    assert oc.open_tools == 0
    # Codex: item.started / item.completed of a command; messages are not tools
    cx = OutputWatcher(CodexAgent(), lambda _t: None)
    cmd = {"type": "command_execution", "command": "pytest"}
    cx.feed(
        lines(
            {"type": "item.started", "item": cmd},
            {"type": "item.started", "item": {"type": "agent_message"}},
        )
    )
    assert cx.open_tools == 1
    cx.feed(lines({"type": "item.completed", "item": cmd}, {"type": "item.completed", "item": cmd}))
    assert cx.open_tools == 0  # an end without a start does not go below zero


def test_every_output_chunk_is_activity_for_the_idle_watchdog():
    watcher = OutputWatcher(ClaudeAgent(), lambda _t: None)
    assert watcher.last_output is None
    watcher.feed(b"partial line without a newline")
    assert watcher.last_output is not None
