"""The coordinator against a fake attempt runner (our own seam): retries, slots, warm pool, caps."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from runs.jobs.budgets import JobBudget
from runs.jobs.console import effective_warm_pool, job_line
from runs.jobs.coordinator import Coordinator, TrialPlan
from runs.results.trial_result import TrialResult
from runs.trials.prepared import Prepared
from tests.conftest import Said


@dataclass
class FakeRunner:
    """Scripted outcomes per task name: a list of results consumed attempt by attempt."""

    outcomes: dict[str, list[dict[str, Any]]]
    run_seconds: float = 0.0
    prepared: list[str] = field(default_factory=list)
    events: list[tuple[str, str, float]] = field(default_factory=list)
    n: int = 0

    async def prepare(self, plan: Any) -> Prepared:
        self.n += 1
        self.prepared.append(plan.task.name)
        self.events.append(("prepare", plan.task.name, time.monotonic()))
        now = time.monotonic()
        return Prepared(
            plan, Path(f"/tmp/{plan.task.name}__{self.n:08x}"), "now", now, ready_at=now
        )

    async def run(self, prepared: Prepared) -> TrialResult:
        self.events.append(("run", prepared.plan.task.name, time.monotonic()))
        await asyncio.sleep(self.run_seconds)
        outcome = dict(self.outcomes[prepared.plan.task.name].pop(0))
        outcome.setdefault("rewards", None)
        outcome.update(
            task_name=prepared.plan.task.name,
            trial_name=prepared.plan.trial_name,
            attempt=prepared.plan.attempt,
            rollout_name=prepared.attempt_dir.name,
        )
        outcome.setdefault("timing", {"total": self.run_seconds})
        outcome.setdefault("agent_result", {"cost_usd": None, "total_tokens": None})
        outcome.update(trial_index=0, agent="fake", agent_name="fake", model=None, started_at="now")
        return TrialResult.from_json(outcome)

    def discard(self, prepared: Prepared) -> None:
        self.events.append(("discard", prepared.plan.task.name, time.monotonic()))


def trial(name: str) -> TrialPlan:
    return TrialPlan(SimpleNamespace(name=name), 0, name, "sha256:x")


def coordinator(
    runner: FakeRunner,
    *,
    j: int = 1,
    warm: int = 0,
    retries: int = 2,
    budget=None,
    lines: Said | None = None,
):
    return Coordinator(runner, j, warm, retries, budget or JobBudget(), lines or Said())


PASS = {"rewards": {"reward": 1.0}}
SANDBOX_FAILED = {
    "error": "sandbox startup failed: cannot start container",
    "error_category": "sandbox_setup",
}
TIMED_OUT = {
    "error": "agent timed out after 3s (prompt exceeded wall-clock budget)",
    "error_category": "timeout",
    "rewards": {"reward": 0.0},
}


def test_a_sandbox_start_that_fails_once_is_retried_and_passes(monkeypatch):
    monkeypatch.setattr("runs.errors.backoff_seconds", lambda attempt: 0.0)
    lines = Said()  # the reporter's lines, as the console prints them
    runner = FakeRunner({"t": [SANDBOX_FAILED, PASS]})
    results = asyncio.run(coordinator(runner, lines=lines).run([[trial("t")]]))
    assert [r.attempt for r in results] == [1, 2]
    assert results[-1].rewards == {"reward": 1.0}
    assert "Retrying t (attempt 2): sandbox startup failed: cannot start container" in lines.lines
    assert "Retry backoff: 0.0s before attempt 2" in lines.lines


def test_a_timeout_is_not_retried():
    runner = FakeRunner({"t": [TIMED_OUT, PASS]})
    results = asyncio.run(coordinator(runner).run([[trial("t")]]))
    assert len(results) == 1 and results[0].error_category == "timeout"


def test_retry_attempts_zero_turns_retries_off():
    runner = FakeRunner({"t": [SANDBOX_FAILED, PASS]})
    results = asyncio.run(coordinator(runner, retries=0).run([[trial("t")]]))
    assert len(results) == 1


def test_retries_stop_after_retry_attempts(monkeypatch):
    monkeypatch.setattr("runs.errors.backoff_seconds", lambda attempt: 0.0)
    runner = FakeRunner({"t": [SANDBOX_FAILED] * 5})
    results = asyncio.run(coordinator(runner, retries=2).run([[trial("t")]]))
    assert len(results) == 3  # the first attempt and two more


def test_a_wrong_answer_is_not_retried():
    runner = FakeRunner({"t": [{"rewards": {"reward": 0.0}}, PASS]})
    assert len(asyncio.run(coordinator(runner).run([[trial("t")]]))) == 1


def test_concurrency_caps_running_trials():
    runner = FakeRunner({f"t{i}": [PASS] for i in range(6)}, run_seconds=0.05)
    c = coordinator(runner, j=2)
    peak = 0

    async def scenario():
        nonlocal peak
        task = asyncio.create_task(c.run([[trial(f"t{i}") for i in range(6)]]))
        while not task.done():
            peak = max(peak, len(c.running))
            await asyncio.sleep(0.005)
        return await task

    results = asyncio.run(scenario())
    assert len(results) == 6 and peak == 2


def test_warm_pool_prepares_ahead_of_the_turn():
    runner = FakeRunner({f"t{i}": [PASS] for i in range(3)}, run_seconds=0.1)
    asyncio.run(coordinator(runner, j=2, warm=1).run([[trial(f"t{i}") for i in range(3)]]))
    # the third sandbox was prepared while the first two still ran
    third_prepared = next(
        t for kind, name, t in runner.events if kind == "prepare" and name == "t2"
    )
    first_ran = next(t for kind, name, t in runner.events if kind == "run" and name == "t0")
    assert third_prepared < first_ran + 0.1


def test_the_warm_pool_shown_on_the_job_line():
    assert effective_warm_pool(1, 1) == 0
    assert effective_warm_pool(1, 4) == 1
    assert effective_warm_pool(3, 2) == 1
    assert (
        job_line(5, 2, 3, 1, 1)
        == "Job: 5 tasks, 2 done, 3 to run (concurrency=1, warm pool: up to 0 prepared sandboxes)"
    )
    assert (
        job_line(1, 1, 0, 4, 1)
        == "Job: 1 task, 1 done, 0 to run (concurrency=4, warm pool: up to 1 prepared sandboxes)"
    )


def test_trials_repeats_run_one_after_another():
    runner = FakeRunner({"t": [PASS, PASS]}, run_seconds=0.02)
    waves = [
        [TrialPlan(SimpleNamespace(name="t"), i, "t" if i == 0 else f"t#{i}", "x")]
        for i in range(2)
    ]
    results = asyncio.run(coordinator(runner, j=4).run(waves))
    assert [r.trial_name for r in results] == ["t", "t#1"]


def test_rollout_cap_lets_running_trials_finish_and_lists_the_rest_apart():
    lines = Said()  # the reporter's lines, as the console prints them
    runner = FakeRunner({f"t{i}": [PASS] for i in range(3)}, run_seconds=0.05)
    c = coordinator(runner, j=2, budget=JobBudget(max_rollouts=2), lines=lines)
    results = asyncio.run(c.run([[trial(f"t{i}") for i in range(3)]]))
    assert len(results) == 2
    assert c.not_started == ["t2"] and c.cancelled == []
    assert any(
        line.startswith("budget reached: 2 rollouts started of a 2 cap; stopping: no new rollouts")
        for line in lines.lines
    )


def test_cost_cap_cancels_running_trials():
    lines = Said()  # the reporter's lines, as the console prints them
    outcomes = {
        "cheap": [
            {"rewards": {"reward": 1.0}, "agent_result": {"cost_usd": 1.0, "total_tokens": 10}}
        ],
        "slow": [PASS],
    }
    runner = FakeRunner(outcomes)

    async def scenario():
        c = coordinator(runner, j=2, budget=JobBudget(max_cost_usd=0.5), lines=lines)
        original_run = runner.run

        async def run(prepared):
            if prepared.plan.task.name == "slow":
                await asyncio.sleep(5)
            return await original_run(prepared)

        runner.run = run  # type: ignore[method-assign]
        results = await c.run([[trial("cheap"), trial("slow")]])
        return c, results

    c, results = asyncio.run(scenario())
    assert [r.task_name for r in results] == ["cheap"]
    assert c.cancelled == ["slow"]
    assert (
        "budget reached: $1.0000 USD spent of a $0.5000 cap; stopping: no new rollouts, 1 running trial(s) cancelled"
        in lines.lines
    )


INSTALL_FAILED = {
    "error": "install failed: the agent's command could not run (exit 127)",
    "error_category": "install_failure",
}


def test_an_errored_trial_whose_retry_the_rollout_cap_blocks_counts_as_errored_not_as_not_started(
    monkeypatch,
):
    # given two trials whose agents cannot start (a retryable error), -j 1 and a cap of two rollouts
    monkeypatch.setattr("runs.errors.backoff_seconds", lambda attempt: 0.0)
    runner = FakeRunner({"a1": [INSTALL_FAILED] * 3, "b1": [INSTALL_FAILED] * 3})
    c = coordinator(runner, budget=JobBudget(max_rollouts=2))
    # when
    results = asyncio.run(c.run([[trial("a1"), trial("b1")]]))
    # then each ran once; the cap kept their retries from running, so they are errored trials
    assert sorted(r.trial_name for r in results) == ["a1", "b1"]
    assert c.not_started == [] and c.cancelled == []
    assert sorted(c.retries_stopped) == ["a1", "b1"]


def test_an_errored_trial_cancelled_in_its_retry_backoff_counts_as_errored(monkeypatch):
    # given a trial that fails fast and waits out a long backoff while a costly one reaches the cap
    monkeypatch.setattr("runs.errors.backoff_seconds", lambda attempt: 30.0)
    outcomes = {
        "costly": [
            {"rewards": {"reward": 1.0}, "agent_result": {"cost_usd": 1.0, "total_tokens": 10}}
        ],
        "flaky": [SANDBOX_FAILED, PASS],
    }
    runner = FakeRunner(outcomes)
    original_run = runner.run

    async def run(prepared):
        if prepared.plan.task.name == "costly":
            await asyncio.sleep(0.1)
        return await original_run(prepared)

    runner.run = run  # type: ignore[method-assign]
    c = coordinator(runner, j=2, budget=JobBudget(max_cost_usd=0.5))
    # when
    results = asyncio.run(asyncio.wait_for(c.run([[trial("costly"), trial("flaky")]]), 10))
    # then the cap cancelled the backoff: flaky's one attempt counts, and it is not listed as not started
    assert sorted(r.trial_name for r in results) == ["costly", "flaky"]
    assert c.not_started == [] and c.cancelled == []
    assert c.retries_stopped == ["flaky"]


def test_a_resumed_trial_with_an_errored_attempt_kept_out_by_a_spent_cap_is_not_listed_as_not_started():
    # given a resume whose cap was spent before; one trial errored then, the other never ran
    budget = JobBudget(max_rollouts=1)
    budget.seed([{"error": "install failed", "agent_result": {}, "timing": {"total": 1.0}}])
    errored_before = TrialPlan(
        SimpleNamespace(name="a1"), 0, "a1", "x", previous_attempts=1, finished_before=True
    )
    c = coordinator(FakeRunner({}), budget=budget)
    # when
    asyncio.run(c.run([[errored_before, trial("b1")]]))
    # then
    assert c.not_started == ["b1"] and c.retries_stopped == ["a1"]


def test_a_warm_pool_sandbox_that_never_ran_is_no_rollout():
    # given -j 2 with a warm pool: gamma's sandbox is prepared while alpha and beta run, and beta
    # reaches the cost cap, which cancels alpha and gamma before gamma takes a slot
    outcomes = {
        "alpha": [PASS],
        "beta": [{"rewards": {"reward": 1.0}, "agent_result": {"cost_usd": 1.0}}],
        "gamma": [PASS],
        "delta": [PASS],
    }
    runner = FakeRunner(outcomes)
    original_run = runner.run

    async def run(prepared):
        await asyncio.sleep(5 if prepared.plan.task.name == "alpha" else 0.05)
        return await original_run(prepared)

    runner.run = run  # type: ignore[method-assign]
    budget = JobBudget(max_cost_usd=0.5)
    c = coordinator(runner, j=2, warm=1, budget=budget)
    # when
    asyncio.run(
        asyncio.wait_for(c.run([[trial(n) for n in ("alpha", "beta", "gamma", "delta")]]), 10)
    )
    # then two rollouts started; gamma's prepared sandbox was discarded and is not counted
    assert "gamma" in runner.prepared
    assert ("discard", "gamma") in [(kind, name) for kind, name, _ in runner.events]
    assert c.cancelled == ["alpha"] and sorted(c.not_started) == ["delta", "gamma"]
    assert budget.spent.rollouts == 2
    assert budget.summary_block(c.cancelled, c.not_started)["spent"]["rollouts"] == 2


def test_a_trial_a_spend_cap_cancels_is_told_the_cap_before_it_is_cancelled():
    # given a slow trial beside one whose cost reaches the cap
    outcomes = {
        "cheap": [{"rewards": {"reward": 1.0}, "agent_result": {"cost_usd": 1.0}}],
        "slow": [PASS],
    }
    runner = FakeRunner(outcomes)
    original_run = runner.run
    seen: dict[str, Prepared] = {}

    async def run(prepared):
        seen[prepared.plan.task.name] = prepared
        if prepared.plan.task.name == "slow":
            await asyncio.sleep(5)
        return await original_run(prepared)

    runner.run = run  # type: ignore[method-assign]
    # when
    c = coordinator(runner, j=2, budget=JobBudget(max_cost_usd=0.5))
    asyncio.run(asyncio.wait_for(c.run([[trial("cheap"), trial("slow")]]), 10))
    # then its runner is told why (its timing.json says so, no result.json); the finished one is untouched
    assert seen["slow"].cancelled_by == "budget reached: $1.0000 USD spent of a $0.5000 cap"
    assert seen["cheap"].cancelled_by is None
    assert c.cancelled == ["slow"]


def test_what_a_trial_spent_before_a_cap_cancelled_it_counts_in_the_spend():
    # given a trial that called the model and works on when a finished one reaches the token cap
    outcomes = {
        "alpha": [
            {"rewards": {"reward": 1.0}, "agent_result": {"cost_usd": 0.002, "total_tokens": 2021}}
        ],
        "beta": [PASS],
    }
    runner = FakeRunner(outcomes)
    original_run = runner.run

    async def run(prepared):
        if prepared.plan.task.name == "beta":
            try:
                await asyncio.sleep(5)
            # as AttemptRunner.run: a timing.json with what the proxy counted
            except asyncio.CancelledError:
                prepared.cancelled_record = {
                    "total": 0.1,
                    "cancelled": True,
                    "cancelled_by": prepared.cancelled_by,
                    "agent_result": {"cost_usd": 0.002, "total_tokens": 2021},
                }
                raise
        return await original_run(prepared)

    runner.run = run  # type: ignore[method-assign]
    budget = JobBudget(max_tokens=1000)
    c = coordinator(runner, j=2, budget=budget)
    # when
    asyncio.run(asyncio.wait_for(c.run([[trial("alpha"), trial("beta")]]), 10))
    # then
    assert c.cancelled == ["beta"]
    assert budget.spent.tokens == 4042 and round(budget.spent.cost_usd, 6) == 0.004
    assert budget.reason == "budget reached: 2,021 tokens spent of a 1,000 cap"


def test_a_trial_clock_starts_when_it_takes_its_slot_not_while_its_warm_sandbox_waits():
    # given three trials at -j 2 with one sandbox prepared ahead of its turn
    runner = FakeRunner({f"t{i}": [PASS] for i in range(3)}, run_seconds=0.4)
    original_run = runner.run
    clock: dict[str, float] = {}

    async def run(prepared):
        clock[prepared.plan.task.name] = time.monotonic() - prepared.t0  # its clock when it starts
        return await original_run(prepared)

    runner.run = run  # type: ignore[method-assign]
    # when
    asyncio.run(coordinator(runner, j=2, warm=1).run([[trial(f"t{i}") for i in range(3)]]))
    # then t2's sandbox was ready while t0 and t1 ran, yet its clock starts at its slot
    t2_prepared = next(t for kind, name, t in runner.events if kind == "prepare" and name == "t2")
    t2_ran = next(t for kind, name, t in runner.events if kind == "run" and name == "t2")
    assert t2_ran - t2_prepared >= 0.3  # it waited for a slot
    assert clock["t2"] < 0.1


def test_the_clock_keeps_set_up_and_leaves_out_the_wait_for_a_slot():
    # set-up from 100 to 105, the sandbox waits until 160 for a slot, and the trial ends at 170
    prepared = Prepared(SimpleNamespace(), Path("/tmp/t__1"), "now", 100.0, ready_at=105.0)
    prepared.begin(now=160.0)
    assert 170.0 - prepared.t0 == 15.0  # 5 s set-up + 10 s run
    prepared.begin(now=165.0)  # once only
    assert prepared.t0 == 155.0
