"""The trial's event stream: one ordered stream of prompts, messages, thoughts and tool calls (with
their results) from the proxy's trajectory or the agent's session log, a page at a time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from runs.results import event_stream as es
from tests.trajectories import at, call_line, trajectory


def all_events(folder: Path, source: es.Source, per_page: int) -> list[es.Event]:
    cursor, out = es.Cursor(), []
    while True:
        page = es.stream_page(folder, source, cursor, per_page)
        out += page.events
        if page.done:
            return out
        cursor = es.Cursor.parse(dict(parse_qsl(page.cursor.query())))


def test_a_trajectory_reads_as_prompt_thoughts_and_tool_calls_with_their_results(
    tmp_path: Path,
) -> None:
    # given
    trajectory(tmp_path, 3)
    source = es.find_source(tmp_path, [es.TRAJECTORY])
    # when
    events = es.stream_page(tmp_path, source, es.Cursor()).events
    # then
    kinds = [e.kind for e in events]
    assert kinds[:5] == ["system", "prompt", "call", "thought", "tool"]
    assert [e.n for e in events] == list(range(1, len(events) + 1))
    tool = events[4]
    assert (tool.title, tool.tool, tool.status, tool.output) == ("Bash", "shell", "ok", "out 0")
    assert tool.offset == "+0:02" and tool.duration_s == 8.0  # ended at 2 s, result sent at 10 s
    assert events[-1].kind == "message" and events[-1].text == "done"
    assert "result" not in kinds  # results are folded into their calls
    assert events[1].text == "fix <the> bug"


def test_pages_number_events_as_one_read_does_and_fold_results_across_a_page_end(
    tmp_path: Path,
) -> None:
    trajectory(tmp_path, 40)
    source = es.Source("trajectory", es.TRAJECTORY)
    whole = es.stream_page(tmp_path, source, es.Cursor(), per_page=10_000).events
    paged = all_events(tmp_path, source, per_page=7)
    assert [(e.n, e.kind, e.text, e.output, e.status) for e in paged] == [
        (e.n, e.kind, e.text, e.output, e.status) for e in whole
    ]
    assert all(e.status == "ok" for e in paged if e.kind == "tool")


def test_a_result_past_the_lookahead_comes_as_its_own_event_naming_its_call(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(es, "LOOKAHEAD_LINES", 0)
    trajectory(tmp_path, 6)
    events = all_events(tmp_path, es.Source("trajectory", es.TRAJECTORY), per_page=5)
    late = [e for e in events if e.kind == "result"]
    assert late and all(e.title.startswith("result of e") for e in late)


def claude_entry(kind: str, content: Any, seconds: int, **extra: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "sessionId": "s1",
        "timestamp": at(seconds),
        "message": {"role": kind, "content": content, **extra.pop("message", {})},
        **extra,
    }


def test_a_claude_subagent_is_nested_under_the_task_call_that_spawned_it(tmp_path: Path) -> None:
    # given: Claude Code's session log, its subagent's log beside it
    base = tmp_path / "agent/sessions/projects/-app"
    main = [
        claude_entry("user", "build it", 0),
        claude_entry(
            "assistant",
            [{"type": "tool_use", "id": "task1", "name": "Task", "input": {"prompt": "look"}}],
            5,
            message={"id": "m1", "usage": {"input_tokens": 10, "output_tokens": 3}},
        ),
        claude_entry(
            "user",
            [{"type": "tool_result", "tool_use_id": "task1", "content": "found it"}],
            65,
            toolUseResult={"agentId": "a7"},
        ),
        claude_entry("assistant", [{"type": "text", "text": "all done"}], 70),
    ]
    sub = [
        claude_entry("user", "look", 6, isSidechain=True),
        claude_entry(
            "assistant",
            [{"type": "tool_use", "id": "g1", "name": "Grep", "input": {"p": "x"}}],
            7,
            isSidechain=True,
        ),
        claude_entry(
            "user",
            [{"type": "tool_result", "tool_use_id": "g1", "content": "x.py", "is_error": True}],
            9,
            isSidechain=True,
        ),
    ]
    (base / "s1/subagents").mkdir(parents=True)
    (base / "s1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in main))
    (base / "s1/subagents/agent-a7.jsonl").write_text("".join(json.dumps(e) + "\n" for e in sub))
    paths = ["agent/sessions/projects/-app/s1.jsonl", es.TRAJECTORY]
    # when
    source = es.find_source(tmp_path, paths)
    events = es.stream_page(tmp_path, source, es.Cursor()).events
    # then
    assert source == es.Source("claude", "agent/sessions/projects/-app/s1.jsonl", es.TRAJECTORY)
    assert [e.kind for e in events] == ["prompt", "call", "tool", "message"]
    # the log's first model call stands for the trajectory's first line (a search hit's `#c0`)
    assert [e.call_anchor for e in events] == ["", "c0", "", ""]
    task = events[2]
    assert (task.tool, task.status, task.output, task.duration_s) == ("task", "ok", "found it", 60)
    assert [c.kind for c in task.children] == ["prompt", "tool"]
    grep = task.children[1]
    assert (grep.tool, grep.status, grep.offset) == ("search", "error", "+0:07")
    assert events[3].offset == "+1:10"


def test_codex_rollouts_read_reasoning_calls_and_failed_commands(tmp_path: Path) -> None:
    lines = [
        {"type": "session_meta", "timestamp": at(0), "payload": {"source": "exec"}},
        {
            "type": "response_item",
            "timestamp": at(1),
            "payload": {"type": "message", "role": "user", "content": [{"text": "go"}]},
        },
        {
            "type": "response_item",
            "timestamp": at(2),
            "payload": {"type": "reasoning", "summary": [{"text": "think"}]},
        },
        {
            "type": "response_item",
            "timestamp": at(3),
            "payload": {
                "type": "function_call",
                "name": "shell",
                "arguments": "{}",
                "call_id": "c",
            },
        },
        {
            "type": "response_item",
            "timestamp": at(4),
            "payload": {
                "type": "function_call_output",
                "call_id": "c",
                "output": json.dumps({"output": "boom", "metadata": {"exit_code": 2}}),
            },
        },
    ]
    rel = "agent/sessions/2026/12/01/rollout-x.jsonl"
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_text("".join(json.dumps(e) + "\n" for e in lines))
    source = es.find_source(tmp_path, [rel])
    events = es.stream_page(tmp_path, source, es.Cursor()).events
    assert source is not None and source.kind == "codex"
    assert [e.kind for e in events] == ["prompt", "thought", "tool"]
    assert (events[2].status, events[2].output, events[2].offset) == (
        "error",
        "boom",
        "+0:02",
    )  # from the first event


def test_search_finds_events_anywhere_in_the_trial_by_their_number(tmp_path: Path) -> None:
    trajectory(tmp_path, 30)
    source = es.Source("trajectory", es.TRAJECTORY)
    page = es.search(tmp_path, source, "OUT 27", es.Cursor())
    assert len(page.hits) == 1 and page.hits[0].kind == "tool" and page.done
    whole = es.stream_page(tmp_path, source, es.Cursor(), per_page=10_000).events
    assert next(e for e in whole if e.output == "out 27").n == page.hits[0].n


def test_a_huge_item_is_cut_to_the_page_budget_with_the_raw_line_named(tmp_path: Path) -> None:
    path = tmp_path / es.TRAJECTORY
    path.parent.mkdir(parents=True)
    big = call_line(0, [{"role": "user", "content": '"' * 1_500_000}], [])
    path.write_text(json.dumps(big) + "\n" + "not json\n")
    events = es.stream_page(tmp_path, es.Source("trajectory", es.TRAJECTORY), es.Cursor()).events
    prompt = next(e for e in events if e.kind == "prompt")
    assert prompt.cut and prompt.line == 1 and len(prompt.text) * 6 <= es.PAGE_BYTES
    assert events[-1].kind == "error"


def test_tool_kinds_give_the_hue() -> None:
    table = {
        "Bash": "shell",
        "exec_command": "shell",
        "Edit": "edit",
        "apply_patch": "edit",
        "Read": "read",
        "Grep": "search",
        "WebFetch": "web",
        "Task": "task",
        "TodoWrite": "plan",
        "mystery": "other",
    }
    assert {name: es.tool_kind(name) for name in table} == table


def test_offsets_read_as_minutes_and_seconds() -> None:
    assert [es.offset_label(s) for s in (0, 9.9, 61, 3600)] == ["+0:00", "+0:09", "+1:01", "+60:00"]


def test_each_model_call_carries_its_trajectory_line_across_pages(tmp_path: Path) -> None:
    # given a trajectory of 40 calls, read 7 events a page
    trajectory(tmp_path, 40)
    source = es.Source("trajectory", es.TRAJECTORY)
    # when
    events = all_events(tmp_path, source, per_page=7)
    # then the k-th call's item is `#c<k>` (its 0-based line), every other item has none
    calls = [e for e in events if e.call >= 0]
    assert [e.call for e in calls] == list(range(40))
    assert all(e.kind == "call" and e.call_anchor == f"c{e.line - 1}" for e in calls)
    assert all(e.call_anchor == "" for e in events if e.kind != "call")
