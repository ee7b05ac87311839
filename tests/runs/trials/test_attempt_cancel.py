"""An attempt cancelled while it runs writes no result.json (as BenchFlow's job folder has none), only
timing.json: the seconds it ran, and for a job cap also why and what its agent spent."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from runs import errors
from runs.agents.base import Agent
from runs.spec import RunSpec
from runs.tasks.load import load_task
from runs.trials.attempt import AttemptRunner
from runs.trials.prepared import AttemptPlan, Prepared
from tests.conftest import write_task

REASON = "budget reached: 2,021 tokens spent of a 1,000 cap"


class ScriptAgent(Agent):
    name = "script"


class FakeSandbox:
    id = "fake-sandbox"

    def __init__(self) -> None:
        self.removed = False

    def remove(self) -> None:
        self.removed = True


class FakeGateway:
    """The model gateway seam: one registered key, and what the proxy counted for it."""

    port = 0

    def __init__(self, usage: SimpleNamespace) -> None:
        self.usage = usage
        self.registered: dict[str, str] = {}

    def register(self, *, attempt_id: str, **_: object) -> str:
        self.registered[f"bf-{attempt_id}"] = attempt_id
        return f"bf-{attempt_id}"

    def unregister(self, key: str) -> SimpleNamespace | None:
        return self.usage if self.registered.pop(key, None) else None

    def unregister_attempt(self, attempt_id: str) -> SimpleNamespace | None:
        return self.unregister(f"bf-{attempt_id}")

    def in_flight(self, attempt_id: str) -> int:
        return 0


USAGE = SimpleNamespace(
    input_tokens=2000,
    output_tokens=21,
    cache_read_tokens=0,
    cache_creation_tokens=0,
    total_tokens=2021,
    turns=1,
    cost_usd=0.002037,
    usage_source="provider_response",
    price_source="benchflow-price-table",
    in_flight=0,
    busy_seconds=0.5,
)


def runner_and_prepared(
    tmp_path: Path, gateway: FakeGateway | None = None
) -> tuple[AttemptRunner, Prepared, FakeSandbox]:
    task = load_task(write_task(tmp_path / "tasks", "beta", test_sh="true\n"))
    runner = AttemptRunner(
        RunSpec(tasks_dir=tmp_path / "tasks", agent="script:./a.sh"),
        ScriptAgent(),
        None,
        tmp_path / "job",
        lambda *a, **k: None,
        set(),
        gateway,
    )  # type: ignore[arg-type]
    attempt_dir = tmp_path / "job" / "beta__00000001"
    attempt_dir.mkdir(parents=True)
    sandbox = FakeSandbox()
    prepared = Prepared(
        AttemptPlan(task, "beta", 0, 1, "x"),
        attempt_dir,
        "2026-11-29T10:00:00.000",
        time.monotonic(),
        sandbox=sandbox,
    )  # type: ignore[arg-type]

    async def agent_runs_on(prepared: Prepared, result: dict) -> None:
        if runner.proxy is not None:  # the agent's key, as run_agent registers it
            runner.proxy.register(
                attempt_id=attempt_dir.name,
                model="mock/oracle",
                log_path=attempt_dir,
                token_budget=None,
                turn_budget=None,
                solution_text=None,
                on_budget_spent=lambda _id: None,
            )
        await asyncio.sleep(60)

    runner._agent_and_verifier = agent_runs_on  # type: ignore[method-assign]
    return runner, prepared, sandbox


async def run_then_cancel(
    runner: AttemptRunner, prepared: Prepared, cancelled_by: str | None
) -> None:
    task = asyncio.create_task(runner.run(prepared))
    await asyncio.sleep(0.05)
    prepared.cancelled_by = cancelled_by
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await runner.drain()


async def test_an_attempt_a_job_cap_cancels_writes_no_result_json_and_says_why_in_its_timing_json(
    tmp_path,
):
    runner, prepared, sandbox = runner_and_prepared(tmp_path)
    # when
    await run_then_cancel(runner, prepared, REASON)
    # then
    assert not (prepared.attempt_dir / "result.json").exists()
    timing = json.loads((prepared.attempt_dir / "timing.json").read_text())
    assert (timing["cancelled"], timing["cancelled_by"]) == (True, REASON)
    assert timing["total"] >= 0 and "agent_result" in timing
    assert prepared.cancelled_record == timing
    assert sandbox.removed
    # and bench explain's class for it is still budget_cancelled
    assert (
        errors.error_category({"error": f"cancelled by the job budget: {REASON}"})
        == "budget_cancelled"
    )


async def test_an_attempt_a_signal_cancels_writes_only_its_seconds(tmp_path):
    runner, prepared, sandbox = runner_and_prepared(tmp_path)
    await run_then_cancel(runner, prepared, None)
    assert not (prepared.attempt_dir / "result.json").exists()
    timing = json.loads((prepared.attempt_dir / "timing.json").read_text())
    assert timing["cancelled"] is True and "cancelled_by" not in timing
    assert prepared.cancelled_record is None
    assert sandbox.removed


async def test_a_cancelled_attempt_records_what_the_proxy_counted_for_its_agent(tmp_path):
    gateway = FakeGateway(USAGE)
    runner, prepared, _ = runner_and_prepared(tmp_path, gateway)
    # when a cap cancels it after its agent's model call
    await run_then_cancel(runner, prepared, REASON)
    # then its usage is in timing.json (no result.json), and its key is unregistered
    assert not (prepared.attempt_dir / "result.json").exists()
    timing = json.loads((prepared.attempt_dir / "timing.json").read_text())
    usage = timing["agent_result"]
    assert (usage["total_tokens"], usage["cost_usd"], usage["n_calls"]) == (2021, 0.002037, 1)
    assert (usage["n_input_tokens"], usage["n_output_tokens"]) == (2000, 21)
    assert gateway.registered == {}
    assert prepared.cancelled_record == timing
