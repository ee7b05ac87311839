"""The agents' own session logs (Claude Code, Codex, OpenCode): what their subagents used, for trial_budget.subagents."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from runs.agents.codex import CodexAgent
from runs.agents.opencode import OpenCodeAgent
from runs.agents.session_logs import (
    claude_subagents,
    codex_subagents,
    opencode_messages,
    opencode_subagents,
)

PARENT = "01a23226-356a-7f32-ab21-85571692eefa"


def rollout(path: Path, source: object, totals: list[int], extra: str = "") -> Path:
    """A rollout file shaped as Codex 0.171 writes one (session_meta, then a token_count per call)."""
    lines = [
        {
            "type": "session_meta",
            "payload": {"id": path.stem, "source": source, "cli_version": "0.171.0"},
        },
        {"type": "event_msg", "payload": {"type": "task_started"}},
    ]
    for total in totals:
        lines.append({"type": "response_item", "payload": {"type": "message", "role": "assistant"}})
        usage = {
            "input_tokens": total - 10,
            "cached_input_tokens": 0,
            "output_tokens": 10,
            "total_tokens": total,
        }
        lines.append(
            {
                "type": "event_msg",
                "payload": {
                    "type": "token_count",
                    "info": {"total_token_usage": usage, "last_token_usage": usage},
                },
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + extra)
    return path


def test_sub_agent_threads_are_told_apart_from_the_main_one(tmp_path: Path) -> None:
    day = tmp_path / "sessions" / "2026" / "12" / "01"
    main = rollout(day / f"rollout-a-{PARENT}.jsonl", "exec", [110, 220, 330])
    spawned = rollout(
        day / "rollout-b.jsonl",
        {"subagent": {"thread_spawn": {"parent_thread_id": PARENT, "depth": 1}}},
        [110, 230],
        # a repeated total (a rate-limit update) is no call; a line cut short by a stop is skipped
        extra=json.dumps(
            {
                "type": "event_msg",
                "payload": {
                    "type": "token_count",
                    "info": {"total_token_usage": {"total_tokens": 230}},
                },
            }
        )
        + '\n{"type": "event_m',
    )
    review = rollout(day / "rollout-c.jsonl", {"subagent": "review"}, [50])
    not_a_thread = day / "notes.jsonl"
    not_a_thread.write_text('{"hello": 1}\n')
    assert codex_subagents([main, spawned, review, not_a_thread]) == {
        "turns": 3,
        "tokens": 280,
        "of_turns": 6,
        "of_tokens": 610,
    }
    assert codex_subagents([main]) == {"turns": 0, "tokens": 0, "of_turns": 3, "of_tokens": 330}
    assert codex_subagents([not_a_thread]) is None and codex_subagents([]) is None


def test_codex_says_where_its_session_logs_are() -> None:
    agent = CodexAgent()
    assert agent.session_logs == f"{agent.home}/sessions"
    assert agent.model_env("k")["CODEX_HOME"] == agent.home


def claude_entry(msg_id: str, usage: dict[str, int], sidechain: bool = False) -> str:
    """One entry of Claude Code's session log: one content block of one API message."""
    return (
        json.dumps(
            {
                "type": "assistant",
                "sessionId": "s1",
                "isSidechain": sidechain,
                "message": {"id": msg_id, "role": "assistant", "content": [], "usage": usage},
            }
        )
        + "\n"
    )


def test_claude_subagent_calls_are_the_sidechain_ones_each_counted_once_at_its_largest(
    tmp_path: Path,
) -> None:
    early = {
        "input_tokens": 100,
        "cache_read_input_tokens": 50,
        "output_tokens": 1,
    }  # as the stream began
    final = {"input_tokens": 100, "cache_read_input_tokens": 50, "output_tokens": 40}
    project = tmp_path / "projects" / "-app"
    main = project / "s1.jsonl"
    main.parent.mkdir(parents=True)
    main.write_text(
        claude_entry("msg_1", early)
        + claude_entry("msg_1", final)  # two blocks of one call
        + claude_entry("msg_err", {"input_tokens": 0, "output_tokens": 0})  # an error it shows
        + claude_entry("msg_3", final)
        + '{"type": "assis'
    )
    sub = project / "s1" / "subagents" / "agent-a1.jsonl"
    sub.parent.mkdir(parents=True)
    sub.write_text(claude_entry("msg_2", final, sidechain=True))
    assert claude_subagents([main, sub]) == {
        "turns": 1,
        "tokens": 190,
        "of_turns": 3,
        "of_tokens": 570,
    }
    # a sidechain entry marks a subagent's call wherever its file is
    moved = tmp_path / "flat.jsonl"
    moved.write_text(claude_entry("msg_2", final, sidechain=True))
    assert claude_subagents([main, moved])["turns"] == 1  # type: ignore[index]
    assert claude_subagents([]) is None


def opencode_store(db: Path) -> None:
    """A store shaped as OpenCode 1.18's: the main session, and one its task tool started."""
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE session (id TEXT, parent_id TEXT, agent TEXT, title TEXT)")
    con.execute("CREATE TABLE message (id TEXT, session_id TEXT, time_created INTEGER, data TEXT)")
    con.executemany(
        "INSERT INTO session VALUES (?, ?, ?, ?)",
        [
            ("ses_main", None, "build", "Solving the task"),
            ("ses_sub", "ses_main", "general", "say hi"),
        ],
    )
    tokens = {
        "total": 7708,
        "input": 7690,
        "output": 18,
        "reasoning": 0,
        "cache": {"write": 0, "read": 0},
    }
    no_total = {"input": 6000, "output": 1, "reasoning": 2, "cache": {"write": 0, "read": 50}}
    messages = [
        ("m1", "ses_main", 1, {"role": "user"}),
        ("m2", "ses_main", 2, {"role": "assistant", "tokens": tokens}),
        ("m3", "ses_sub", 3, {"role": "user"}),
        ("m4", "ses_sub", 4, {"role": "assistant", "tokens": no_total}),
        ("m5", "ses_main", 5, {"role": "assistant", "tokens": tokens}),
    ]
    con.executemany(
        "INSERT INTO message VALUES (?, ?, ?, ?)",
        [(i, s, t, json.dumps(d)) for i, s, t, d in messages],
    )
    con.execute(
        "CREATE TABLE part (id TEXT, message_id TEXT, session_id TEXT, time_created INTEGER, "
        "data TEXT)"
    )
    parts = [
        ("prt_2", "m2", "ses_main", 2, {"type": "text", "text": "Done."}),
        ("prt_1", "m2", "ses_main", 2, {"type": "tool", "callID": "call_0", "tool": "task"}),
    ]
    con.executemany(
        "INSERT INTO part VALUES (?, ?, ?, ?, ?)",
        [(i, m, s, t, json.dumps(d)) for i, m, s, t, d in parts],
    )
    con.commit()
    con.close()


def test_opencode_subagent_sessions_are_those_with_a_parent(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    opencode_store(db)
    rows = opencode_messages(db)
    assert rows is not None and [r["session"] for r in rows] == [
        "ses_main",
        "ses_main",
        "ses_sub",
        "ses_sub",
        "ses_main",
    ]
    assert rows[2]["parent"] == "ses_main" and rows[2]["agent"] == "general"
    # each with its parts, in order (what the trial page's event stream shows of it)
    assert [p["id"] for p in rows[1]["parts"]] == ["prt_1", "prt_2"] and rows[0]["parts"] == []
    assert rows[1]["message"]["id"] == "m2"
    kept = tmp_path / "opencode-messages.jsonl"
    kept.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # each assistant message with usage is one call; without a total, its parts add up
    assert opencode_subagents([kept]) == {
        "turns": 1,
        "tokens": 6053,
        "of_turns": 3,
        "of_tokens": 7708 * 2 + 6053,
    }
    assert opencode_messages(tmp_path / "none.db") is None


def test_opencode_keeps_its_store_where_its_data_home_is() -> None:
    agent = OpenCodeAgent()
    assert agent.session_logs == agent.model_env("k")["XDG_DATA_HOME"] + "/opencode"
    assert agent.session_store == "opencode-db"
