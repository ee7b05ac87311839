"""summary.json and the console lines; each seed-page output line is reproduced exactly."""

from __future__ import annotations

import pytest

from runs.results import summary as s
from runs.results import summary_render as sr

WYCKOFF = {
    "task_name": "crystallographic-wyckoff-position-analysis",
    "trial_name": "crystallographic-wyckoff-position-analysis",
    "rewards": {"reward": 1.0},
    "n_tool_calls": 35,
    "error": None,
    "agent_result": {"total_tokens": 1_801_711, "cost_usd": 0.0385},
}
ECON_ERROR = (
    "trial budget reached: the token budget of 60,000 is spent (63,260 tokens, 6 turns "
    "used when the model proxy refused the next call); the agent was stopped and the "
    "verifier graded what it left"
)
ECON = {
    "task_name": "econ-detrending-correlation",
    "trial_name": "econ-detrending-correlation",
    "rewards": {"reward": 0.0},
    "n_tool_calls": 7,
    "error": ECON_ERROR,
    "error_category": "trial_budget",
    "agent_result": {"total_tokens": 63_260, "cost_usd": 0.0101},
    "trial_budget": {
        "budget": {"tokens": 60_000, "turns": None},
        "source": {"tokens": "run"},
        "used": {"tokens": 63_260, "turns": 6},
        "subagents": None,
        "stopped_by": "tokens",
        "stopped_at": 63_260,
        "refused_calls": 1,
    },
}
CAP_BUDGET = {
    "caps": {
        "max_cost_usd": 0.004,
        "max_sandbox_seconds": None,
        "max_tokens": None,
        "max_rollouts": None,
    },
    "spent": {
        "cost_usd": 0.0385,
        "sandbox_seconds": 230.0,
        "tokens": 1_801_711,
        "rollouts": 1,
        "usd_unknown_trials": 0,
        "tokens_unknown_trials": 0,
    },
    "stopped": True,
    "reason": "budget reached: $0.0385 USD spent of a $0.0040 cap",
    "cancelled": [],
    "not_started": ["econ-detrending-correlation"],
}


def cap_summary():
    return s.build_summary(
        job_name="2026-11-04__18-18-39",
        results=[WYCKOFF],
        settings={"agent": "opencode", "model": "deepseek/deepseek-v4-flash"},
        plan_total=2,
        not_run=["econ-detrending-correlation"],
        budget=CAP_BUDGET,
        elapsed_sec=234.0,
        n_attempts=1,
    )


def result(name, reward=None, error=None, verifier_error=None, **extra):
    return {
        "task_name": name,
        "trial_name": name,
        "n_tool_calls": 1,
        "error": error,
        "rewards": None if reward is None else {"reward": reward},
        "verifier_error": verifier_error,
        **extra,
    }


# --- the seed page's lines ---------------------------------------------------------------------


def test_seed_pass_line():
    assert (
        sr.trial_line(WYCKOFF)
        == "[PASS] crystallographic-wyckoff-position-analysis (reward=1.00, tools=35)"
    )


def test_seed_fail_line_with_the_trial_budget_error():
    assert sr.trial_line(ECON) == (
        "[FAIL] econ-detrending-correlation (reward=0.00, tools=7) "
        "(trial budget reached: the token budget of 60,000…)"
    )


def test_seed_job_complete_line_against_the_plan():
    assert sr.job_complete_line(cap_summary(), 2, 234.0) == (
        "Job complete: 1/1 (100.0%) run, 1/2 (50.0%) of the plan, mean_reward=1.00, errors=0, "
        "idle_timeouts=0, time=3.9min"
    )


def test_job_complete_line_without_a_budget_is_the_0_7_form():
    summary = s.build_summary(job_name="j", results=[result("a", 1.0), result("b", 1.0)])
    assert sr.job_complete_line(summary, 2, 6.0) == (
        "Job complete: 2/2 (100.0%), mean_reward=1.00, errors=0, idle_timeouts=0, time=0.1min"
    )


def test_seed_final_block_of_a_job_its_cost_cap_stopped():
    lines = sr.render_final_block(
        cap_summary(), "jobs/2026-11-04__18-18-39", reused=0, elapsed_s=234.0, color=False
    )
    assert lines[:4] == [
        "• Score: 1/1 run (100.0%), mean reward 1.00, errors=0; 1 of 2 planned tasks not run "
        "(budget), so 1/2 (50.0%) of the plan",
        "Budget: budget reached: $0.0385 USD spent of a $0.0040 cap; 0 running trial(s) cancelled, "
        "1 not started (not counted as failures; resume the job to run them)",
        "Outcomes: 1 scored (1 passed, 0 failed), 0 unscored, 0 errored",
        "Cost:      $0.04, 1,801,711 tokens",
    ]


def test_seed_final_block_of_a_trial_its_token_budget_stopped():
    summary = s.build_summary(job_name="j", results=[ECON], settings={})
    lines = sr.render_final_block(summary, "jobs/j", reused=0, elapsed_s=130, color=False)
    start = lines.index("Outcomes: 1 scored (0 passed, 1 failed), 0 unscored, 0 errored")
    assert lines[start + 1 : start + 4] == [
        "  1 stopped at their trial budget (1 by tokens; each counts 0 unless its tests passed): "
        "econ-detrending-correlation",
        "      next: trial_budget in each trial's result.json has what it used; raise "
        "--token-budget or --turn-budget if the task needs more",
        "Cost:      $0.01, 63,260 tokens",
    ]


def test_seed_run_card_per_trial_line_after_the_run():
    summary = s.build_summary(job_name="j", results=[ECON])
    assert sr.trial_budget_card_line(summary) == (
        "  Per trial: budget 60,000 tokens; 1 of 1 trials stopped at it (1 by tokens); tokens "
        "used: median 63,260, most 63,260; turns used: median 6, most 6"
    )


# --- summary.json ------------------------------------------------------------------------------

MIXED = [
    result("p", 1.0),
    result("f", 0.0),
    result("late", 0.5, error="Agent timed out after 900s"),
    result("e", error="ACP error: Invalid API key (HTTP 401)"),
    result("v", verifier_error="verifier crashed: exit 2"),
    result("n"),  # no verdict at all
]


def test_summary_buckets_add_up_to_the_total():
    summary = s.build_summary(job_name="j", results=MIXED)
    buckets = [summary[k] for k in ("passed", "failed", "errored", "verifier_errored")]
    assert buckets == [1, 2, 2, 1] and sum(buckets) == summary["total"] == 6
    assert (summary["pass"], summary["fail"], summary["error"]) == (1, 2, 2)
    assert summary["score"] == "16.7%" and summary["score_ratio"] == 0.1667
    assert summary["score_excl_errors"] == "33.3%"
    assert summary["mean_reward"] == 0.5
    assert summary["error_categories"] == {"timeout": 1, "provider_auth": 1}
    assert summary["verifier_error_categories"] == {"verifier_failure": 1}


def test_trials_kept_from_running_are_listed_apart_and_not_counted():
    summary = cap_summary()
    assert (summary["total"], summary["failed"], summary["errored"]) == (1, 0, 0)
    assert summary["not_run"] == ["econ-detrending-correlation"]
    assert summary["budget"]["not_started"] == ["econ-detrending-correlation"]
    assert summary["planned"] == 2


def test_budget_block_only_when_a_cap_was_set():
    assert "budget" not in s.build_summary(job_name="j", results=MIXED)


def test_cost_is_null_when_no_trial_reported_one():
    summary = s.build_summary(job_name="j", results=[result("a", 1.0)])
    assert summary["total_cost_usd"] is None and summary["avg_cost_per_trial_usd"] is None
    assert summary["total_tokens"] is None


def test_usage_tool_and_timing_totals():
    rows = [
        dict(
            result("a", 1.0),
            n_tool_calls=4,
            agent_result={
                "n_input_tokens": 90,
                "n_output_tokens": 10,
                "total_tokens": 100,
                "cost_usd": 0.5,
            },
            timing={
                "environment_setup": 1.0,
                "agent_execution": 2.0,
                "verifier": 0.5,
                "total": 3.5,
            },
        ),
        dict(
            result("b", 0.0),
            n_tool_calls=2,
            agent_result={"total_tokens": 50, "cost_usd": None},
            timing={"environment_setup": 3.0, "total": 4.5},
        ),
    ]
    summary = s.build_summary(job_name="j", results=rows)
    assert (summary["total_tokens"], summary["total_input_tokens"]) == (150, 90)
    assert (summary["total_cost_usd"], summary["avg_cost_per_trial_usd"]) == (0.5, 0.5)
    assert summary["usage_coverage"] == {"trials": 2, "with_tokens": 2, "with_cost": 1}
    assert (
        summary["total_tool_calls"],
        summary["avg_tool_calls_per_task"],
        summary["max_tool_calls_per_task"],
    ) == (6, 3.0, 4)
    assert (
        summary["environment_setup_time_sec"],
        summary["avg_environment_setup_time_sec"],
        summary["max_total_time_sec"],
    ) == (4.0, 2.0, 4.5)


def test_retries_count_attempts_beyond_the_first():
    rows = [dict(result("a", 1.0), attempt=3), result("b", 0.0)]
    assert s.build_summary(job_name="j", results=rows)["retries"] == 2
    assert s.build_summary(job_name="j", results=rows, n_attempts=5)["retries"] == 3


def test_trial_budget_stops_are_counted_beside_the_score():
    summary = s.build_summary(job_name="j", results=[ECON, WYCKOFF])
    assert (summary["budget_stops"], summary["budget_stop_rate"]) == (1, 0.5)
    check = summary["run_checks"]["trial_budget"]
    assert {k: check[k] for k in ("trials", "stopped", "by_tokens", "by_turns")} == {
        "trials": 1,
        "stopped": 1,
        "by_tokens": 1,
        "by_turns": 0,
    }
    assert check["tokens_used"] == {"median": 63_260, "max": 63_260}


def test_repeated_trials_add_pass_at_k_and_the_standard_error():
    rows = [dict(result("a", r), trial_name=n) for r, n in [(1.0, "a"), (0.0, "a#1"), (1.0, "a#2")]]
    rows.append(dict(result("a"), error="Connection lost", trial_name="a#3"))
    summary = s.build_summary(job_name="j", results=rows, settings={"trials": 4})
    assert summary["pass_at_k"]["1"] == pytest.approx(2 / 3, abs=1e-4)
    assert summary["pass_at_k"]["3"] == 1.0
    assert summary["mean_reward_stderr"] == pytest.approx(0.3333, abs=1e-4)
    assert summary["mean_reward_with_errors"] == 0.5
    assert "pass_at_k" not in s.build_summary(job_name="j", results=MIXED)


# --- the console block -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "first"),
    [
        ([result("a", 1.0)], "✓ Score: 1/1 (100.0%), mean reward 1.00, errors=0"),
        ([result("a", 1.0), result("b", 0.0)], "• Score: 1/2 (50.0%), mean reward 0.50, errors=0"),
        (
            [result("a", 0.0), result("b", error="Connection lost")],
            "✗ Score: 0/2 (0.0%), mean reward 0.00, errors=1",
        ),
        (
            [result("a", 1.0), result("b", verifier_error="verifier timed out")],
            "• Score: 1/2 (50.0%), mean reward 1.00, errors=0 verifier-errors=1",
        ),
        ([result("b", error="Connection lost")], "✗ Score: 0/1 (0.0%), errors=1"),
    ],
)
def test_score_line_mark_and_errors(rows, first):
    summary = s.build_summary(job_name="j", results=rows)
    assert sr.render_final_block(summary, "jobs/j", reused=0, elapsed_s=1, color=False)[0] == first


def test_failure_lines_show_five_then_and_n_more():
    rows = [dict(result(f"t{i}", 0.0), rollout_name=f"t{i}__0000000{i}") for i in range(7)]
    rows[0]["rewards"] = {"reward": 0.0, "tests": 0.25, "lint": 1.0}
    lines = sr.render_final_block(
        s.build_summary(job_name="j", results=rows), "jobs/j", reused=0, elapsed_s=1, color=False
    )
    assert lines[1] == "  ✗ t0: reward 0.0 — tests 0.25, lint 1.0"
    assert lines[5] == "  ✗ t4: reward 0.0"
    assert lines[6] == "  … and 2 more"
    assert lines[7] == "  (details: jobs/j/t0__00000000/verifier)"


def test_cause_groups_name_whose_problem_up_to_five_tasks_and_the_next_step():
    rows = [result(f"t{i}", error="ACP error: rate limit (HTTP 429)") for i in range(7)]
    rows.append(result("v", verifier_error="verifier timed out after 600s"))
    lines = sr.render_final_block(
        s.build_summary(job_name="j", results=rows), "jobs/j", reused=0, elapsed_s=1, color=False
    )
    start = lines.index("Outcomes: 0 scored (0 passed, 0 failed), 1 unscored, 7 errored")
    assert lines[start + 1 : start + 5] == [
        "  1 unscored: the verifier timed out (task problem): v",
        "      next: raise the task's verifier timeout (task.md verifier.timeout_sec)",
        "  7 errored: the model provider rate-limited the run (infrastructure problem): "
        "t0, t1, t2, t3, t4 and 2 more",
        "      next: lower --concurrency, then `bench eval resume jobs/j`",
    ]


@pytest.mark.parametrize(
    ("rows", "text"),
    [
        (
            [
                dict(result("a", 1.0), agent_result={"total_tokens": 1000, "cost_usd": 0.75}),
                dict(result("b", 1.0), agent_result={"total_tokens": 0, "cost_usd": None}),
            ],
            "$0.75, 1,000 tokens (1 of 2 trials reported no cost)",
        ),
        (
            [dict(result("a", 1.0), agent_result={"total_tokens": 5_000, "cost_usd": None})],
            "not reported in USD (subscription logins and unpriced models report tokens only), 5,000 tokens",
        ),
        (
            [dict(result("a", 1.0), agent_result={"total_tokens": 0})],
            "none: no model tokens were used",
        ),
        (
            [dict(result("a", 1.0), agent_result={"total_tokens": 0}), result("b", 1.0)],
            "not reported (1 of 2 trials reported no usage); the others used no model tokens",
        ),
        ([result("a", 1.0)], "not reported"),
    ],
)
def test_cost_line_variants(rows, text):
    assert sr.cost_text(s.build_summary(job_name="j", results=rows)) == text


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (59.6, "1m 0s"), (130, "2m 10s"), (3725, "1h 2m")]
)
def test_duration_formats(seconds, text):
    assert sr.duration(seconds) == text


def test_time_artifacts_summary_and_view_lines():
    lines = sr.render_final_block(
        s.build_summary(job_name="j", results=[result("a", 1.0)]),
        "jobs/run",
        reused=2,
        elapsed_s=130,
        color=False,
    )
    assert lines[-4:] == [
        "Time:      2m 10s (this run; 2 task(s) reused from before)",
        "Artifacts: jobs/run",
        "Summary:   jobs/run/summary.json",
        "View:      bench view jobs/run",
    ]


def test_color_only_when_asked():
    summary = s.build_summary(job_name="j", results=[result("a", 1.0)])
    plain = sr.render_final_block(summary, "j", reused=0, elapsed_s=1, color=False)
    colored = sr.render_final_block(summary, "j", reused=0, elapsed_s=1, color=True)
    assert not any("\x1b[" in line for line in plain)
    assert colored[0].startswith("\x1b[1;32m✓ Score: 1/1 (100.0%)\x1b[0m")


@pytest.mark.parametrize(
    ("row", "line"),
    [
        (
            result(
                "a",
                error="Agent idle for 600s with no new tool call, message, or thought (last activity 612s ago)",
            ),
            "[ERR] a (Agent idle for 600s with no new tool call, messag…)",
        ),
        (result("a", verifier_error="verifier timed out"), "[ERR] a (verifier timed out)"),
        (result("a"), "[ERR] a (no verdict)"),
        (dict(result("a", 1.0), n_tool_calls=None), "[PASS] a (reward=1.00, tools=0)"),
        (dict(result("a", 0.25), trial_name="a#2"), "[FAIL] a#2 (reward=0.25, tools=1)"),
    ],
)
def test_trial_lines(row, line):
    assert sr.trial_line(row) == line


def test_the_budget_line_says_errored_trials_whose_retry_the_cap_stopped_count_by_their_last_attempt():
    budget = {
        **CAP_BUDGET,
        "reason": "budget reached: 2 rollouts started of a 2 cap",
        "not_started": [],
        "retries_stopped": ["a1", "b1"],
    }
    errored = [
        result("a1", error="install failed: exit 127"),
        result("b1", error="install failed: exit 127"),
    ]
    summary = s.build_summary(
        job_name="j", results=errored, plan_total=2, not_run=[], budget=budget
    )
    lines = sr.render_final_block(summary, "jobs/j", reused=0, elapsed_s=5.0, color=False)
    assert (
        "Budget: budget reached: 2 rollouts started of a 2 cap; 0 running trial(s) cancelled, 0 not started "
        "(not counted as failures; resume the job to run them); 2 errored trial(s) not retried (the cap "
        "stopped their retry; their last attempt counts)"
    ) in lines
    assert "Outcomes: 0 scored (0 passed, 0 failed), 0 unscored, 2 errored" in lines
    assert summary["not_run"] == [] and summary["errored"] == 2


def test_the_cost_line_counts_what_cap_cancelled_attempts_spent():
    beta = {
        "total": 3.0,
        "cancelled": True,
        "cancelled_by": "budget reached: ...",  # its timing.json
        "agent_result": {"total_tokens": 2021, "cost_usd": 0.002037},
    }
    alpha = result("alpha", 1.0, agent_result={"total_tokens": 2021, "cost_usd": 0.002037})
    summary = s.build_summary(job_name="j", results=[alpha], not_run=["beta"], cancelled=[beta])
    assert (summary["total"], summary["errored"], summary["not_run"]) == (1, 0, ["beta"])
    assert (summary["total_tokens"], summary["total_cost_usd"]) == (4042, 0.004074)
    assert summary["avg_cost_per_trial_usd"] == 0.002037
    assert sr.cost_text(summary) == "$0.00, 4,042 tokens"


def test_no_budget_line_when_a_cap_met_exactly_by_the_plan_kept_nothing_from_running():
    # given --max-rollouts 2 over two tasks: the cap is met at the second start, and nothing is left
    budget = {
        **CAP_BUDGET,
        "reason": "budget reached: 2 rollouts started of a 2 cap",
        "not_started": [],
        "cancelled": [],
        "retries_stopped": [],
    }
    passed = [result("a", 1.0), result("b", 1.0)]
    summary = s.build_summary(job_name="j", results=passed, plan_total=2, not_run=[], budget=budget)
    # when the final block is rendered
    lines = sr.render_final_block(summary, "jobs/j", reused=0, elapsed_s=5.0, color=False)
    # then no Budget line tells the user to resume for trials that do not exist
    assert not any(line.startswith("Budget:") for line in lines), lines
