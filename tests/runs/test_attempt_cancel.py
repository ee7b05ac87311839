"""An attempt cancelled while it runs: by a job cap it writes a budget_cancelled result.json; by a
signal, only the seconds it ran."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from runs import errors
from runs.agents.base import Agent
from runs.attempt import AttemptPlan, AttemptRunner, Prepared
from runs.spec import RunSpec
from runs.tasks import load_task
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


def runner_and_prepared(tmp_path: Path) -> tuple[AttemptRunner, Prepared, FakeSandbox]:
    task = load_task(write_task(tmp_path / "tasks", "beta", test_sh="true\n"))
    runner = AttemptRunner(RunSpec(tasks_dir=tmp_path / "tasks", agent="script:./a.sh"), ScriptAgent(),
                           None, tmp_path / "job", lambda *a, **k: None, set())  # type: ignore[arg-type]
    attempt_dir = tmp_path / "job" / "beta__00000001"
    attempt_dir.mkdir(parents=True)
    sandbox = FakeSandbox()
    prepared = Prepared(AttemptPlan(task, "beta", 0, 1, "x"), attempt_dir, "2026-11-29T10:00:00.000",
                        time.monotonic(), sandbox=sandbox)  # type: ignore[arg-type]

    async def agent_runs_on(prepared: Prepared, result: dict) -> None:
        await asyncio.sleep(60)

    runner._agent_and_verifier = agent_runs_on  # type: ignore[method-assign]
    return runner, prepared, sandbox


async def run_then_cancel(runner: AttemptRunner, prepared: Prepared, cancelled_by: str | None) -> None:
    task = asyncio.create_task(runner.run(prepared))
    await asyncio.sleep(0.05)
    prepared.cancelled_by = cancelled_by
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await runner.drain()


async def test_an_attempt_a_job_cap_cancels_says_so_in_its_result_json(tmp_path):
    runner, prepared, sandbox = runner_and_prepared(tmp_path)
    # when
    await run_then_cancel(runner, prepared, REASON)
    # then
    result = json.loads((prepared.attempt_dir / "result.json").read_text())
    assert result["error"] == f"cancelled by the job budget: {REASON}"
    assert result["error_category"] == "budget_cancelled"
    assert errors.error_category(result) == "budget_cancelled"
    assert result["rewards"] is None and result["finished_at"]
    assert result["timing"]["total"] > 0
    assert sandbox.removed


async def test_an_attempt_a_signal_cancels_writes_only_its_seconds(tmp_path):
    runner, prepared, sandbox = runner_and_prepared(tmp_path)
    await run_then_cancel(runner, prepared, None)
    assert not (prepared.attempt_dir / "result.json").exists()
    assert json.loads((prepared.attempt_dir / "timing.json").read_text())["cancelled"] is True
    assert sandbox.removed
