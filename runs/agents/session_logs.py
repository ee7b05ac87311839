"""An agent's own session log, read for what its subagents used (result.json's trial_budget.subagents).

The model proxy counts every call of a trial but cannot tell whose it was. Claude Code logs each
call's message with its usage ($CLAUDE_CONFIG_DIR/projects), a subagent's marked isSidechain; the
events it prints mark them too (runs/trials/output_watch.py's OutputWatcher, used when there is no log), but carry
a call's usage from before its end. Codex prints only its main thread's usage; each thread, a
sub-agent's too, has its own session log ($CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl): its
session_meta line says whether the thread is a sub-agent's (source {"subagent": ...}), and a
token_count event follows each model call with the thread's running total. OpenCode keeps its
sessions in a SQLite store ($XDG_DATA_HOME/opencode/opencode.db): a subagent's session (its task
tool's) has a parent session, and each assistant message, one model call, its tokens.

The log is kept for every attempt of an agent that writes one, in the attempt's agent/sessions
folder (secrets the trial was given are replaced in it): the trial page's event stream reads it
beside the proxy's trajectory (runs/results/event_stream.py), and a trial with a budget counts its
subagents' share from it, as BenchFlow does. The copy is bounded (SESSION_LOGS_CAP bytes in all: a
file that would pass it is left out whole, so no kept file is cut short).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from runs.agents.login_usage import SESSION_USAGE_KEYS
from runs.sandboxes.docker import Sandbox
from runs.secrets import redact_tree

OPENCODE_DB = ("opencode.db", "opencode.db-wal", "opencode.db-shm")
OPENCODE_EXPORT = "opencode-messages.jsonl"
SESSION_LOGS_CAP = 64 * 1024 * 1024  # bytes of one attempt's session logs kept


def keep_session_logs(
    sandbox: Sandbox, path: str, dest: Path, secrets: list[str], store: str = "folder"
) -> list[Path]:
    """Copy the agent's session logs out of the sandbox into `dest`; returns the files, sorted.

    `store` "folder": the folder `path` as it is. "opencode-db": OpenCode's SQLite store in `path`,
    kept as one JSON line per message of each session (a database cannot have its secrets replaced
    in place: the replacement changes the length of its records)."""
    try:
        if store == "opencode-db":
            with tempfile.TemporaryDirectory(prefix="bench-opencode-") as tmp:
                for name in OPENCODE_DB:
                    sandbox.copy_file_to(f"{path}/{name}", Path(tmp) / name, cap=SESSION_LOGS_CAP)
                rows = opencode_messages(Path(tmp) / OPENCODE_DB[0])
            if rows is None:
                return []
            dest.mkdir(parents=True, exist_ok=True)
            (dest / OPENCODE_EXPORT).write_text("".join(json.dumps(row) + "\n" for row in rows))
        else:
            sandbox.copy_dir_to(path, dest, cap=SESSION_LOGS_CAP)
    except Exception:  # noqa: BLE001 - no log is no breakdown: subagents stays null
        return []
    redact_tree(dest, secrets)
    return sorted(p for p in dest.rglob("*.jsonl") if p.is_file())


def opencode_messages(db: Path) -> list[dict[str, Any]] | None:
    """Each message of each session in OpenCode's store, oldest first, as {session, parent (the
    session that started it as a subagent, or null), agent, message, parts}; None without a store.

    A message's parts (its text, reasoning, tool calls with their input, output and times, in
    order) are what the trial page's event stream shows of it; the message row holds only its
    role, model, tokens and times."""
    if not db.is_file():
        return None
    con = sqlite3.connect(db)
    try:
        sessions = {
            sid: (parent, agent)
            for sid, parent, agent in con.execute("SELECT id, parent_id, agent FROM session")
        }
        parts = _opencode_parts(con)
        rows = []
        for mid, sid, data in con.execute(
            "SELECT id, session_id, data FROM message ORDER BY time_created, id"
        ):
            parent, agent = sessions.get(sid, (None, None))
            try:
                message = json.loads(data)
            except ValueError:
                continue
            message.setdefault("id", mid)
            row = {"session": sid, "parent": parent, "agent": agent, "message": message}
            rows.append({**row, "parts": parts.get(mid, [])})
        return rows
    except sqlite3.Error:
        return None
    finally:
        con.close()


def _opencode_parts(con: sqlite3.Connection) -> dict[str, list[Any]]:
    """Each message's parts, in order, by the message's id ({} in a store without them)."""
    parts: dict[str, list[Any]] = {}
    try:
        found = con.execute("SELECT id, message_id, data FROM part ORDER BY message_id, id")
        for pid, mid, data in found:
            try:
                part = json.loads(data)
            except ValueError:
                continue
            if isinstance(part, dict):
                part.setdefault("id", pid)
                parts.setdefault(mid, []).append(part)
    except sqlite3.Error:
        return {}
    return parts


def opencode_subagents(files: Iterable[Path]) -> dict[str, int] | None:
    """{turns, tokens} of OpenCode's subagent sessions (started by its task tool: they have a parent
    session) and {of_turns, of_tokens} of all its sessions, from the messages kept by
    keep_session_logs; each assistant message with usage is one model call."""
    calls: list[tuple[int, bool]] = []
    for path in files:
        for row in _entries(path):
            message = row.get("message")
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            tokens = _opencode_tokens(message.get("tokens"))
            if tokens:
                calls.append((tokens, row.get("parent") is not None))
    if not calls:
        return None
    return {
        "turns": sum(1 for _, sub in calls if sub),
        "tokens": sum(tokens for tokens, sub in calls if sub),
        "of_turns": len(calls),
        "of_tokens": sum(tokens for tokens, _ in calls),
    }


def _opencode_tokens(tokens: Any) -> int:
    """A message's tokens as the proxy counts them: input (cached included) and output."""
    if not isinstance(tokens, dict):
        return 0
    if isinstance(tokens.get("total"), int):
        return int(tokens["total"])
    cache = tokens.get("cache")
    cache = cache if isinstance(cache, dict) else {}
    parts = (
        tokens.get("input"),
        tokens.get("output"),
        tokens.get("reasoning"),
        cache.get("read"),
        cache.get("write"),
    )
    return sum(v for v in parts if isinstance(v, int))


def claude_subagents(files: Iterable[Path]) -> dict[str, int] | None:
    """{turns, tokens} of Claude Code's subagent calls and {of_turns, of_tokens} of all its calls,
    from its session logs (a subagent's entries are marked isSidechain, in <session>/subagents/);
    None when they hold no call.

    The log writes an entry per content block, each with its message's id and usage: a call is
    counted once, with the largest figures any of its entries has (as for a login's usage)."""
    calls: dict[str, tuple[int, bool]] = {}
    for path in files:
        in_subagents = "subagents" in path.parts
        for entry in _entries(path):
            message = entry.get("message")
            if (
                entry.get("type") != "assistant"
                or not isinstance(message, dict)
                or not message.get("id")
            ):
                continue
            usage = message.get("usage")
            if not isinstance(usage, dict):
                continue
            tokens = sum(v for k in SESSION_USAGE_KEYS if isinstance(v := usage.get(k), int))
            if not tokens:  # the CLI's own message (an API error it shows): no model call
                continue
            sub = entry.get("isSidechain") is True or in_subagents
            seen = calls.get(str(message["id"]))
            calls[str(message["id"])] = (
                (max(tokens, seen[0]), sub or seen[1]) if seen else (tokens, sub)
            )
    if not calls:
        return None
    return {
        "turns": sum(1 for _, sub in calls.values() if sub),
        "tokens": sum(tokens for tokens, sub in calls.values() if sub),
        "of_turns": len(calls),
        "of_tokens": sum(tokens for tokens, _ in calls.values()),
    }


def _entries(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with path.open("rb") as fh:
            for line in fh:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a stopped agent
                if isinstance(entry, dict):
                    yield entry
    except OSError:
        return


def codex_subagents(files: Iterable[Path]) -> dict[str, int] | None:
    """{turns, tokens} of Codex's sub-agent threads and {of_turns, of_tokens} of all its threads, from
    their session logs; None when no file is a thread's log."""
    threads: list[tuple[bool, int, int]] = []  # (a sub-agent's?, model calls, tokens)
    for path in files:
        thread = _codex_thread(path)
        if thread is not None:
            threads.append(thread)
    if not threads:
        return None
    return {
        "turns": sum(turns for sub, turns, _ in threads if sub),
        "tokens": sum(tokens for sub, _, tokens in threads if sub),
        "of_turns": sum(turns for _, turns, _ in threads),
        "of_tokens": sum(tokens for _, _, tokens in threads),
    }


def _codex_thread(path: Path) -> tuple[bool, int, int] | None:
    meta = False
    sub = False
    turns = tokens = 0
    for entry in _entries(path):
        payload = entry.get("payload")
        if not isinstance(payload, dict):
            continue
        if entry.get("type") == "session_meta":
            meta = True
            source = payload.get("source")
            sub = sub or (isinstance(source, dict) and "subagent" in source)
        elif entry.get("type") == "event_msg" and payload.get("type") == "token_count":
            info = payload.get("info")
            usage = info.get("total_token_usage") if isinstance(info, dict) else None
            total = usage.get("total_tokens") if isinstance(usage, dict) else None
            # one event per model call, with the thread's running total; a repeat of the same
            # total (a rate-limit update) is not another call
            if isinstance(total, int) and total != tokens:
                turns += 1
                tokens = total
    return (sub, turns, tokens) if meta else None
