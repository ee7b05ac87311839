"""A model call still streaming when the runner stops the agent is counted in the trial's result.

The real model proxy runs in-process over a fake upstream that streams slowly; the "sandbox" is
this machine's loopback, its agent a thread making calls with the official Anthropic SDK.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from benchflow_site.gateway import ProxyGateway
from proxy.server import ProxyServer
from runs.agents.controls import ScriptAgent
from runs.gateway import calls_settled
from runs.sandboxes.docker import ExecResult
from runs.tasks.load import load_task
from runs.trials.agent_run import run_agent
from runs.trials.trial_budget import trial_budget_for
from tests.conftest import record_into, write_task
from tests.proxy.fake_upstream import MESSAGES_USAGE, FakeUpstream

MODEL = "anthropic/claude-sonnet-4-5"
CALL_TOKENS = sum(MESSAGES_USAGE.values())  # input, cache read, cache write and output


class LoopbackSandbox:
    """A sandbox whose network namespace is the host's: its agent streams one Messages call,
    and while that call is still streaming makes a second, which the trial's budget refuses;
    stopped, it drops the stream unread, as a killed agent's connection is dropped."""

    id = "loopback"

    def __init__(self) -> None:
        self.port = 0
        self.stopped = threading.Event()
        self.first_event: str | None = None
        self.refused: str | None = None

    def listen(self, pid: int, port: int) -> socket.socket:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        return sock

    def pid(self) -> int:
        return os.getpid()

    def exec(self, argv: list[str], *, env: dict[str, str], **_: Any) -> ExecResult:
        client = anthropic.Anthropic(
            base_url=f"http://127.0.0.1:{self.port}",
            auth_token=env["ANTHROPIC_AUTH_TOKEN"],
            max_retries=0,
        )
        ask = {
            "model": "claude-test",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "hi"}],
        }
        with client.messages.stream(**ask) as stream:  # type: ignore[arg-type]
            for event in stream:
                self.first_event = event.type
                break
            try:
                client.messages.create(**ask)  # type: ignore[arg-type]
            except anthropic.BadRequestError as exc:
                self.refused = str(exc)
            self.stopped.wait(30)
        return ExecResult(137)

    def stop_processes(self) -> None:
        self.stopped.set()

    def oom_kills(self) -> int | None:
        return None


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    fake = await FakeUpstream(frame_pause=0.25).start()  # one answer streams for about 1.75 s
    yield fake
    await fake.stop()


@pytest.fixture
async def gateway(upstream: FakeUpstream) -> AsyncIterator[ProxyGateway]:
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-upstream",
        "BENCHFLOW_UPSTREAM_ANTHROPIC_BASE_URL": upstream.url,
    }
    gateway = ProxyGateway()
    gateway.server = ProxyServer(env=env)
    gateway.port = await gateway.server.start("127.0.0.1", 0)
    yield gateway
    await gateway.stop()


def base_result() -> dict[str, Any]:
    return {
        "error": None,
        "error_category": None,
        "trial_budget": None,
        "agent_result": {"total_tokens": None, "cost_usd": None, "usage_source": "unavailable"},
    }


async def test_a_call_still_streaming_when_the_agent_is_stopped_is_in_the_recorded_usage(
    tmp_path, monkeypatch, upstream, gateway
):
    # given an agent whose second call the turn budget refuses while its first is still streaming
    task = load_task(write_task(tmp_path / "tasks", "t", test_sh="true\n"))
    sandbox = LoopbackSandbox()
    monkeypatch.setattr("runs.trials.agent_run.listen_in_netns", sandbox.listen)
    agent = ScriptAgent(tmp_path / "agent.sh", model=MODEL)
    attempt_dir = tmp_path / "job" / "t__attempt1"
    attempt_dir.mkdir(parents=True)
    result = base_result()
    # when the runner stops it for its budget
    run = await run_agent(
        agent=agent,
        task=task,
        instruction="hi",
        sandbox=sandbox,  # type: ignore[arg-type]
        attempt_dir=attempt_dir,
        agent_env={},
        proxy=gateway,
        budget=trial_budget_for(task, None, 1),
        on_tool=lambda _title: None,
    )
    record_into(run, result)
    # then the agent was stopped mid-stream
    assert run.budget_stopped and sandbox.first_event == "message_start"
    assert sandbox.refused and "trial_budget_spent" in sandbox.refused
    # and the call it left streaming is in the usage, the budget's count and the cost all the same
    ar = result["agent_result"]
    assert (ar["total_tokens"], ar["n_calls"], ar["usage_source"]) == (
        CALL_TOKENS,
        1,
        "provider_response",
    )
    assert ar["n_output_tokens"] == MESSAGES_USAGE["output_tokens"]  # the stream's final count
    assert ar["cost_usd"] > 0
    assert result["trial_budget"]["used"] == {"tokens": CALL_TOKENS, "turns": 1}
    assert result["error_category"] == "trial_budget" and "usage_incomplete_info" not in result
    # and the trajectory says the same
    lines = (attempt_dir / "trajectory" / "llm_trajectory.jsonl").read_text().splitlines()
    calls = [json.loads(line) for line in lines]
    assert [c["usage"]["total_tokens"] for c in calls if not c["refused"]] == [CALL_TOKENS]
    assert upstream.finished == 1


class InFlight:
    """A gateway's in-flight count: `counts` in turn, then the last one for good."""

    def __init__(self, *counts: int) -> None:
        self.counts = list(counts)
        self.asked: list[str] = []

    def in_flight(self, attempt_id: str) -> int:
        self.asked.append(attempt_id)
        return self.counts.pop(0) if len(self.counts) > 1 else self.counts[0]


async def test_the_usage_is_taken_once_no_call_of_the_attempt_is_in_flight():
    gateway = InFlight(2, 1, 1, 0)

    left = await calls_settled(gateway, "t__a1", timeout_s=10)  # type: ignore[arg-type]

    assert left == 0 and gateway.asked == ["t__a1"] * 4


async def test_a_call_that_never_ends_is_given_up_on_and_counted_as_still_in_flight():
    gateway = InFlight(1)

    left = await calls_settled(gateway, "t__a1", timeout_s=0.2)  # type: ignore[arg-type]

    assert left == 1
