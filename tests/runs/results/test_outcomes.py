"""The outcomes grid's compact data, pass@1 with its interval, and the Pareto frontier (pure)."""

from __future__ import annotations

import pytest

from runs.results.outcomes import (
    TrialRow,
    code,
    column,
    grid,
    keep_row,
    pareto,
    pareto_point,
    pass_at_1,
    task_rows,
)


def row(name="t", reward=None, state="done", outcome="", n=1, cause="", task=None, index=0, **kw):
    return TrialRow(name, task or name.split("#")[0], index, state, outcome, reward, n, cause, **kw)


@pytest.mark.parametrize(
    ("trial", "char"),
    [
        (row(reward=1.0, outcome="passed"), "k"),
        (row(reward=0.0, outcome="failed"), "a"),
        (row(reward=0.25, outcome="failed"), "c"),  # rounded to tenths (half to even): 0.2
        (row(reward=1.0, outcome="passed", n=2), "K"),  # retried: the bar
        (row(reward=0.0, outcome="failed", cause="agent timed out (agent problem)"), "l"),
        (row(reward=1.0, outcome="passed", cause="x", n=3), "V"),
        (row(outcome="errored", cause="no space (task problem)"), "x"),
        (row(outcome="verifier_errored", n=2), "X"),
        (row(state="running"), "R"),
        (row(state="waiting"), "W"),
        (row(state="not_run"), "N"),
        (row(outcome="cancelled"), "C"),
    ],
)
def test_each_trial_is_one_character_saying_its_outcome(trial, char):
    assert code(trial) == char


def test_a_column_keeps_what_a_character_cannot_say_in_its_sparse_extra():
    trials = [
        row("a", 1.0, outcome="passed"),
        row("a#1", 0.55, outcome="failed", index=1),
        row("b", None, outcome="errored", cause="no space (task problem)"),
        row("harbor-c__x1", 0.0, outcome="failed", task="c"),
    ]
    col = column("j~1", "agent / model · j", "/jobs/j~1/", trials, ["a", "b", "c", "d"])
    assert col.cells == ["kg", "x", "a", ""]
    assert col.extra == {
        "1": [None, 0.55, None],
        "2": [None, None, "no space (task problem)"],
        "3": ["harbor-c__x1", None, None],
    }


def test_pass_at_1_averages_tasks_and_gives_an_interval_over_them():
    trials = [row("a", 1.0, outcome="passed"), row("a#1", 0.0, outcome="failed", index=1)]
    trials += [row("b", 1.0, outcome="passed"), row("c", 0.0, outcome="failed")]
    trials += [row("d", None, outcome="errored")]  # no scored trial: not a task of pass@1
    value, ci, n = pass_at_1(trials)
    assert value == pytest.approx(0.5) and n == 3
    assert ci is not None and ci[0] <= 0.5 <= ci[1] and 0.0 <= ci[0] and ci[1] <= 1.0


def test_rows_are_every_task_in_plan_order_and_the_filter_keeps_the_rows_asked_for():
    a = [row("x", 1.0, outcome="passed"), row("y", 0.0, outcome="failed")]
    b = [row("z", None, outcome="errored"), row("x", 0.0, outcome="failed")]
    tasks = task_rows([a, b])
    assert tasks == ["x", "y", "z"]
    cols = [column("a", "A", "/a/", a, tasks), column("b", "B", "/b/", b, tasks)]
    assert grid(cols, tasks, "differ")["tasks"] == ["x"]
    assert grid(cols, tasks, "unsolved")["tasks"] == ["y", "z"]
    assert grid(cols, tasks, "errored")["tasks"] == ["z"]
    doc = grid(cols, tasks)
    assert doc["kind"] == "benchflow.outcomes" and "starts" not in doc["columns"][1]
    assert grid(cols, tasks, "unsolved")["columns"][1]["starts"] == [1, 1]
    assert keep_row(["", ""], "all")


def test_a_hundred_thousand_trials_are_about_a_byte_each():
    import json

    trials = [
        row(
            f"t{i // 10}#{i % 10}" if i % 10 else f"t{i // 10}",
            1.0,
            outcome="passed",
            task=f"t{i // 10}",
            index=i % 10,
        )
        for i in range(100_000)
    ]
    tasks = task_rows([trials])
    doc = grid([column("j", "J", "/j/", trials, tasks)], tasks)
    assert len(json.dumps(doc)) < 400_000  # ~1 byte per trial and the task names


def test_the_frontier_holds_the_jobs_no_other_beats_on_both_cost_and_reward():
    cheap = [row(f"t{i}", 0.0, outcome="failed", cost_usd=0.01) for i in range(4)]
    good = [row(f"t{i}", 1.0, outcome="passed", cost_usd=0.10) for i in range(4)]
    worse = [row(f"t{i}", 0.0, outcome="failed", cost_usd=0.20) for i in range(4)]
    doc = pareto(
        [pareto_point(k, k, t) for k, t in (("cheap", cheap), ("good", good), ("worse", worse))]
    )
    frontier = {p["key"]: p["frontier"]["cost_usd"] for p in doc["points"]}
    assert frontier == {"cheap": True, "good": True, "worse": False}
    good_point = doc["points"][1]
    assert good_point["reward"] == 1.0 and good_point["means"]["cost_usd"] == pytest.approx(0.10)
    assert good_point["cis"]["cost_usd"] == pytest.approx((0.10, 0.10))
    assert good_point["means"]["sandbox_s"] is None and not good_point["frontier"]["sandbox_s"]


def test_unscored_trials_count_as_zero_reward_in_the_pareto_view():
    p = pareto_point("j", "j", [row("a", 1.0, outcome="passed"), row("b", None, outcome="errored")])
    assert p.reward == 0.5 and p.n == 2


def test_a_large_interval_is_the_normal_one_and_agrees_with_the_bootstrap():
    from runs.results.compare import paired_bootstrap_ci
    from runs.results.outcomes import BOOTSTRAP_MAX, mean_interval

    values = [float(i % 3 == 0) for i in range(BOOTSTRAP_MAX + 1)]
    low, high = mean_interval(values)
    b_low, b_high = paired_bootstrap_ci(values)
    assert low == pytest.approx(b_low, abs=0.01) and high == pytest.approx(b_high, abs=0.01)
