"""A Claude login's usage: its calls go straight to the provider, so it comes from Claude Code's own
session log, read from the sandbox once the agent stops, whatever stopped it.

The sandbox here is a host folder standing in for the container's files, its agent a script of
what the real CLI prints and logs (tests/e2e/test_agents_docker.py runs the real one).
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from runs.agents.claude import ClaudeAgent
from runs.agents.login_usage import session_log_usage
from runs.sandboxes.docker import ExecResult
from runs.tasks.load import load_task
from runs.trials.agent_run import run_agent
from runs.trials.trial_budget import trial_budget_for
from tests.conftest import record_into, write_task

USAGE = {
    "input_tokens": 100,
    "cache_read_input_tokens": 700,
    "cache_creation_input_tokens": 200,
    "output_tokens": 30,
}
CALL_TOKENS = sum(USAGE.values())


def assistant(
    session: str,
    msg_id: str,
    block: str = "text",
    usage: dict[str, int] = USAGE,
    sidechain: bool = False,
) -> dict[str, Any]:
    """One entry of Claude Code's session log: one content block of one API message."""
    return {
        "type": "assistant",
        "sessionId": session,
        "isSidechain": sidechain,
        "message": {
            "id": msg_id,
            "role": "assistant",
            "content": [{"type": block}],
            "usage": usage,
        },
    }


def init(session: str) -> dict[str, Any]:
    return {"type": "system", "subtype": "init", "session_id": session}


def result_line(session: str, usage: dict[str, int]) -> dict[str, Any]:
    return {"type": "result", "subtype": "success", "session_id": session, "usage": usage}


class SessionSandbox:
    """A sandbox whose files live under a host folder; its agent prints `stdout` events and writes
    `logs` (container path -> entries), then ends, or with `hang` waits to be stopped."""

    id = "fake"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.stdout: list[dict[str, Any]] = []
        self.logs: dict[str, list[dict[str, Any]]] = {}
        self.hang = False
        self.stopped = threading.Event()
        self.env: dict[str, str] = {}

    def exec(self, argv: list[str], *, env: dict[str, str], on_stdout: Any, **_: Any) -> ExecResult:
        self.env = env
        for path, entries in self.logs.items():
            file = self.root / path.lstrip("/")
            file.parent.mkdir(parents=True, exist_ok=True)
            with file.open("a") as fh:
                fh.writelines(json.dumps(e) + "\n" for e in entries)
        on_stdout(b"".join(json.dumps(e).encode() + b"\n" for e in self.stdout))
        if self.hang:
            self.stopped.wait(30)
            return ExecResult(137)
        return ExecResult(0)

    def copy_dir_to(self, path: str, dest: Path) -> None:
        src = self.root / path.lstrip("/")
        if src.is_dir():
            shutil.copytree(src, dest, dirs_exist_ok=True)

    def stop_processes(self) -> None:
        self.stopped.set()

    def oom_kills(self) -> int | None:
        return None


@pytest.fixture
def login(monkeypatch) -> ClaudeAgent:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)  # no gateway on this machine's loopback
    return ClaudeAgent("sonnet", login=True)


@pytest.fixture
def sandbox(tmp_path) -> SessionSandbox:
    return SessionSandbox(tmp_path / "sandbox")


def projects(agent: ClaudeAgent) -> str:
    return f"{agent.login_env()['CLAUDE_CONFIG_DIR']}/projects/-app"


def base_result() -> dict[str, Any]:
    """What the runner starts a login trial's result with (no proxy)."""
    return {
        "error": None,
        "error_category": None,
        "trial_budget": None,
        "model": None,
        "agent_result": {
            "n_input_tokens": 0,
            "n_output_tokens": 0,
            "n_cache_read_tokens": 0,
            "n_cache_creation_tokens": 0,
            "total_tokens": 0,
            "cost_usd": None,
            "usage_source": "none",
            "price_source": None,
        },
    }


async def run(
    agent: ClaudeAgent,
    sandbox: SessionSandbox,
    tmp_path: Path,
    result: dict[str, Any],
    toml: str = "",
) -> Any:
    tasks = tmp_path / "tasks"
    task = load_task(
        tasks / "t"
        if (tasks / "t").is_dir()
        else write_task(tasks, "t", test_sh="true\n", toml=toml)
    )
    outcome = await run_agent(
        agent=agent,
        task=task,
        instruction="hi",
        sandbox=sandbox,  # type: ignore[arg-type]
        attempt_dir=tmp_path / "job" / "t__a1",
        agent_env={},
        proxy=None,
        budget=trial_budget_for(task, None, None),
        on_tool=lambda _title: None,
    )
    record_into(outcome, result)
    return outcome


def tokens(ar: dict[str, Any]) -> tuple[int, int, int, int, int]:
    return (
        ar["n_input_tokens"],
        ar["n_output_tokens"],
        ar["n_cache_read_tokens"],
        ar["n_cache_creation_tokens"],
        ar["total_tokens"],
    )


def calls_of(n: int) -> tuple[int, int, int, int, int]:
    """What n calls with USAGE come to in agent_result (input includes the cache's tokens)."""
    inp = (
        USAGE["input_tokens"]
        + USAGE["cache_read_input_tokens"]
        + USAGE["cache_creation_input_tokens"]
    )
    return (
        n * inp,
        n * USAGE["output_tokens"],
        n * USAGE["cache_read_input_tokens"],
        n * USAGE["cache_creation_input_tokens"],
        n * CALL_TOKENS,
    )


async def test_a_login_counts_each_call_of_its_session_log_once_its_subagents_included(
    tmp_path, login, sandbox
):
    # given a session of three calls, the first logged once per content block, the third a
    # subagent's in its own file; and a result line that leaves the subagent's call out
    sandbox.stdout = [init("s1"), result_line("s1", {**USAGE, "input_tokens": 200})]
    sandbox.logs = {
        f"{projects(login)}/s1.jsonl": [
            {"type": "user", "sessionId": "s1", "message": {"role": "user", "content": "hi"}},
            assistant("s1", "msg_1", "text"),
            assistant("s1", "msg_1", "tool_use"),
            assistant("s1", "msg_2"),
        ],
        f"{projects(login)}/s1/subagents/agent-a1.jsonl": [
            assistant("s1", "msg_3", sidechain=True)
        ],
    }
    result = base_result()
    # when
    await run(login, sandbox, tmp_path, result)
    # then every call of the log is counted once, and the usage says where it came from
    ar = result["agent_result"]
    assert tokens(ar) == calls_of(3)
    assert (ar["n_calls"], ar["usage_source"], ar["cost_usd"]) == (3, "agent_session_log", None)
    assert result["model"] == "sonnet"


async def test_a_login_stopped_at_its_timeout_keeps_the_usage_of_the_calls_it_made(
    tmp_path, login, sandbox
):
    # given an agent that made one call and then runs a tool until it is stopped: no result line
    sandbox.stdout = [init("s1")]
    sandbox.logs = {f"{projects(login)}/s1.jsonl": [assistant("s1", "msg_1", "tool_use")]}
    sandbox.hang = True
    result = base_result()
    # when its task's timeout stops it
    outcome = await run(login, sandbox, tmp_path, result, toml="[agent]\ntimeout_sec = 0.2\n")
    # then
    assert outcome.timed_out and result["error_category"] == "timeout"
    assert tokens(result["agent_result"]) == calls_of(1)
    assert result["agent_result"]["usage_source"] == "agent_session_log"


async def test_without_a_session_log_the_result_line_is_the_usage(tmp_path, login, sandbox):
    sandbox.stdout = [init("s1"), result_line("s1", USAGE)]
    result = base_result()

    await run(login, sandbox, tmp_path, result)

    assert tokens(result["agent_result"]) == calls_of(1)
    assert result["agent_result"]["usage_source"] == "agent_result_line"


async def test_a_login_that_left_neither_keeps_its_empty_usage(tmp_path, login, sandbox):
    sandbox.hang = True  # stopped before it printed anything
    result = base_result()

    await run(login, sandbox, tmp_path, result, toml="[agent]\ntimeout_sec = 0.2\n")

    assert result["agent_result"] == base_result()["agent_result"]


@pytest.mark.parametrize(
    ("_case", "entries", "expected"),
    [
        ("another session only", [assistant("s2", "m1")], None),
        (
            "the session, no call yet",
            [{"type": "user", "sessionId": "s1"}],
            {**dict.fromkeys(USAGE, 0), "calls": 0},
        ),
        (
            "a message's later entry has its final output count",
            [
                assistant("s1", "m1", usage={**USAGE, "output_tokens": 1}),
                assistant("s1", "m1", "tool_use"),
            ],
            {**USAGE, "calls": 1},
        ),
        (
            "another session's calls are left out",
            [assistant("s1", "m1"), assistant("s2", "m2"), assistant("s1", "m3")],
            {**{k: 2 * v for k, v in USAGE.items()}, "calls": 2},
        ),
        (
            "lines that are no entry are skipped",
            [
                "not json",
                "[]",
                assistant("s1", "m1"),
                {"type": "assistant", "sessionId": "s1", "message": "x"},
            ],
            {**USAGE, "calls": 1},
        ),
    ],
)
def test_session_log_usage(_case, entries, expected):
    lines = [e if isinstance(e, str) else json.dumps(e) for e in entries]
    assert session_log_usage(lines, "s1") == expected


async def test_the_steps_of_a_multi_step_login_trial_add_up(tmp_path, login, sandbox):
    # given a first step whose session made one call
    sandbox.stdout = [init("s1"), result_line("s1", USAGE)]
    sandbox.logs = {f"{projects(login)}/s1.jsonl": [assistant("s1", "msg_1")]}
    result = base_result()
    await run(login, sandbox, tmp_path, result)
    # when the second step, in the same sandbox (the first step's log still there), makes two more
    sandbox.stdout = [init("s2"), result_line("s2", {**USAGE, "input_tokens": 200})]
    sandbox.logs = {
        f"{projects(login)}/s2.jsonl": [assistant("s2", "msg_2"), assistant("s2", "msg_3")]
    }
    await run(login, sandbox, tmp_path, result)
    # then the trial's usage is both steps', each call once
    assert tokens(result["agent_result"]) == calls_of(3)
    assert result["agent_result"]["n_calls"] == 3


async def test_result_lines_of_steps_without_a_session_log_add_up(tmp_path, login, sandbox):
    result = base_result()
    for session in ("s1", "s2"):
        sandbox.stdout = [init(session), result_line(session, USAGE)]
        await run(login, sandbox, tmp_path, result)

    assert tokens(result["agent_result"]) == calls_of(2)
