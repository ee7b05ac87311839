"""Job caps as the seed table says: what counts, when checked, cancel or finish, across resumes."""

import asyncio
import json

import pytest

from runs.events import CostUnknown
from runs.jobs.budgets import JobBudget
from runs.jobs.console import USD_UNKNOWN_WARNING
from runs.jobs.plan import best_results, plan_job
from runs.tasks.load import load_task
from tests.conftest import said, write_task


def finished(cost=None, tokens=None, seconds=1.0):
    return {
        "agent_result": {"cost_usd": cost, "total_tokens": tokens},
        "timing": {"total": seconds},
    }


def test_cost_cap_line_matches_the_seed_page():
    budget = JobBudget(max_cost_usd=0.004)
    asyncio.run(budget.admit(lambda: 0))
    assert budget.on_finish(finished(cost=0.0385, tokens=1_801_711)) is True
    assert said(budget.reached_event(running=0)) == [
        "budget reached: $0.0385 USD spent of a $0.0040 cap; stopping: no new rollouts, 0 running trial(s) cancelled"
    ]
    assert budget.cancels_running()


def test_token_cap_counts_finished_trials_with_thousands_separators():
    budget = JobBudget(max_tokens=1500)
    budget.on_finish(finished(tokens=1000))
    assert not budget.reached
    budget.on_finish(finished(tokens=2000))
    assert budget.reason == "budget reached: 3,000 tokens spent of a 1,500 cap"


def test_rollout_cap_is_checked_at_each_start_and_lets_running_trials_finish():
    budget = JobBudget(max_rollouts=2)
    assert asyncio.run(budget.admit(lambda: 0))
    assert asyncio.run(budget.admit(lambda: 1))
    assert budget.on_start() is False
    assert budget.on_start() is True
    assert budget.reason == "budget reached: 2 rollouts started of a 2 cap"
    assert not asyncio.run(budget.admit(lambda: 0))
    assert said(budget.reached_event(running=2))[0].endswith(
        "; stopping: no new rollouts, 2 running trial(s) finish"
    )
    assert not budget.cancels_running()


def test_sandbox_seconds_count_running_trials_too():
    budget = JobBudget(max_sandbox_seconds=100.0)
    budget.on_finish(finished(seconds=60.0))
    assert not budget.check_running([20.0])
    assert budget.check_running([20.0, 25.0])
    assert budget.reason == "budget reached: 105.0 sandbox-seconds spent of a 100.0 cap"
    assert budget.cancels_running()


def test_spend_across_resumes_stops_at_once():
    # given an earlier run of the job that spent past the cap (one attempt folder has no result.json)
    budget = JobBudget(max_cost_usd=0.004)
    budget.seed([finished(cost=0.0385), None])
    # then
    assert budget.reached
    assert budget.spent.rollouts == 2
    assert not asyncio.run(budget.admit(lambda: 0))


def test_projection_holds_back_a_start_that_would_pass_the_cap():
    budget = JobBudget(max_cost_usd=1.0)
    asyncio.run(budget.admit(lambda: 0))
    budget.on_finish(finished(cost=0.3))

    async def scenario():
        # 0.3 spent + (2 running + 1) x 0.3 mean = 1.2 >= 1.0: waits until a running one finishes
        waiter = asyncio.create_task(budget.admit(lambda: 2))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        budget.on_finish(finished(cost=0.8))  # now past the cap
        return await waiter

    assert asyncio.run(scenario()) is False
    assert budget.reached


def test_projection_counts_trials_still_setting_up_their_sandbox():
    # given three trials admitted (their sandboxes being prepared) and one finished at $0.002
    budget = JobBudget(max_cost_usd=0.005)
    for _ in range(3):
        assert asyncio.run(budget.admit(lambda: 0))
    budget.on_finish(finished(cost=0.002))

    async def scenario():
        # when a fourth asks while no agent runs yet: 0.002 + (2 in set-up + 1) x 0.002 >= 0.005
        waiter = asyncio.create_task(budget.admit(lambda: 0))
        await asyncio.sleep(0.05)
        held = not waiter.done()
        budget.on_discard(started=False)  # the two in set-up never ran
        budget.on_discard(started=False)
        return held, await waiter

    # then it waits, and starts once they are gone
    assert asyncio.run(scenario()) == (True, True)


def test_nothing_running_starts_the_next_trial_while_under_the_cap():
    budget = JobBudget(max_cost_usd=1.0)
    budget.on_finish(finished(cost=0.9))
    assert asyncio.run(budget.admit(lambda: 0))


def test_unpriced_rollouts_warn_once_and_are_counted_apart():
    events = []
    budget = JobBudget(max_cost_usd=1.0, emit=events.append)
    budget.on_finish(finished(cost=None, tokens=5))
    budget.on_finish(finished(cost=None, tokens=5))
    assert events == [CostUnknown()] and said(*events) == [USD_UNKNOWN_WARNING]
    block = budget.summary_block(cancelled=[], not_started=["b"])
    assert block["spent"]["usd_unknown_trials"] == 2
    assert block["not_started"] == ["b"]
    assert block["stopped"] is False


@pytest.mark.parametrize(
    "cap", ["max_cost_usd", "max_tokens", "max_sandbox_seconds", "max_rollouts"]
)
def test_a_budget_with_any_cap_is_active(cap):
    assert JobBudget(**{cap: 1}).active
    assert not JobBudget().active


def test_a_rollout_counts_when_it_starts_not_when_its_sandbox_is_prepared():
    # given a rollout admitted (its warm-pool sandbox prepared) that is discarded before it starts
    budget = JobBudget(max_rollouts=2)
    assert asyncio.run(budget.admit(lambda: 0))
    budget.on_discard(started=False)
    # then it spent no rollout
    assert budget.spent.rollouts == 0 and not budget.reached
    assert budget.summary_block([], [])["spent"]["rollouts"] == 0


def test_admission_waits_while_prepared_rollouts_would_fill_the_cap():
    budget = JobBudget(max_rollouts=1)

    async def scenario():
        assert await budget.admit(lambda: 0)
        # a second one waits: the first, once it starts, fills the cap
        waiter = asyncio.create_task(budget.admit(lambda: 0))
        await asyncio.sleep(0.02)
        assert not waiter.done()
        # the first is discarded before it starts: the second may go
        budget.on_discard(started=False)
        assert await asyncio.wait_for(waiter, 1) is True
        budget.on_start()
        return await budget.admit(lambda: 1)

    assert asyncio.run(scenario()) is False
    assert (
        budget.spent.rollouts == 1
        and budget.reason == "budget reached: 1 rollouts started of a 1 cap"
    )


def cancelled(cost=None, tokens=None, seconds=1.0):
    """A cap-cancelled attempt's timing.json (it has no result.json)."""
    return {
        "total": seconds,
        "cancelled": True,
        "cancelled_by": "budget reached: ...",
        "agent_result": {"cost_usd": cost, "total_tokens": tokens},
    }


def test_what_a_cancelled_attempt_spent_counts_live_and_on_resume():
    # live: alpha finished and reached the cap; beta, cancelled then, had spent too
    live = JobBudget(max_tokens=1000)
    asyncio.run(live.admit(lambda: 0))
    live.on_start()
    live.on_finish(finished(cost=0.002, tokens=2021))
    live.on_cancelled(cancelled(cost=0.002, tokens=2021, seconds=3.0))
    assert (live.spent.tokens, round(live.spent.cost_usd, 6)) == (4042, 0.004)
    assert live.spent.sandbox_seconds == 1.0  # a cancelled trial's seconds were counted as it ran
    # on resume: both attempts' spend, and both their seconds
    again = JobBudget(max_tokens=5000)
    again.seed([finished(cost=0.002, tokens=2021), cancelled(cost=0.002, tokens=2021, seconds=3.0)])
    assert (again.spent.tokens, again.spent.sandbox_seconds, again.spent.rollouts) == (4042, 4.0, 2)
    # a cancelled attempt is no finished trial: the projection's mean is over finished ones
    assert again.spent.finished == 1 and again.spent.tokens_unknown_trials == 0


def test_a_resume_counts_a_cap_cancelled_attempt_from_its_timing_json_and_reruns_it(tmp_path):
    # given a job whose alpha passed and whose beta a token cap cancelled: timing.json, no result.json
    job = tmp_path / "job"
    alpha, beta = job / "alpha__00000001", job / "beta__00000002"
    alpha.mkdir(parents=True)
    beta.mkdir()
    (alpha / "result.json").write_text(
        json.dumps(
            {
                "task_name": "alpha",
                "trial_name": "alpha",
                "trial_index": 0,
                "rewards": {"reward": 1.0},
                "finished_at": "2026-11-29T11:00:00",
                **finished(cost=0.002, tokens=2021),
            }
        )
    )
    (beta / "config.json").write_text(
        json.dumps({"task_name": "beta", "trial_name": "beta", "trial_index": 0})
    )
    (beta / "timing.json").write_text(json.dumps(cancelled(cost=0.002, tokens=2021, seconds=3.0)))
    tasks = [
        load_task(write_task(tmp_path / "tasks", name, test_sh="true\n"))
        for name in ("alpha", "beta")
    ]
    # when
    plan = plan_job(job, tasks, 1)
    budget = JobBudget(max_tokens=4042)
    budget.seed(r for _, r in plan.earlier)
    best, spent_by_cancelled = best_results(job)
    # then the cap counts both attempts' spend and stops at once; beta is to run again, never finished
    assert (budget.spent.tokens, budget.spent.rollouts, budget.spent.sandbox_seconds) == (
        4042,
        2,
        4.0,
    )
    assert budget.reason == "budget reached: 4,042 tokens spent of a 4,042 cap"
    assert list(plan.done) == ["alpha"]
    [[rerun]] = plan.waves
    assert (rerun.trial_name, rerun.finished_before) == ("beta", False)
    assert list(best) == ["alpha"]
    assert [r["agent_result"]["total_tokens"] for r in spent_by_cancelled] == [2021]
