"""Two jobs compared: paired bootstrap interval, McNemar's exact test, and `bench results --compare`."""

from __future__ import annotations

import json

import pytest

from runs.results.compare import Side, compare, mcnemar_exact, paired_bootstrap_ci
from tests.conftest import run_bench
from tests.jobfolders import result_doc, write_attempt, write_job


@pytest.mark.parametrize(
    ("_case", "only_a", "only_b", "p"),
    [
        ("no discordant pairs", 0, 0, None),
        ("six to none", 0, 6, 0.03125),
        ("balanced", 3, 3, 1.0),
        ("one each", 1, 1, 1.0),
        ("ten to two", 10, 2, 0.0385742),
    ],
)
def test_mcnemar_exact(_case, only_a, only_b, p):
    got = mcnemar_exact(only_a, only_b)
    assert got == p if p is None else got == pytest.approx(p, abs=1e-6)


def test_bootstrap_interval_of_a_constant_difference_is_that_difference():
    assert paired_bootstrap_ci([1.0] * 30) == (1.0, 1.0)


def test_bootstrap_interval_of_a_balanced_difference_holds_zero():
    low, high = paired_bootstrap_ci([1.0, -1.0] * 20)
    assert low < 0 < high


def test_compare_pairs_by_trial_and_leaves_unpaired_and_unscored_out():
    side = lambda r: Side(r, 0.01, 100, "passed" if r == 1.0 else "failed")  # noqa: E731
    a = {f"t{i}": side(0.0) for i in range(12)} | {
        "only-a": side(1.0),
        "err": Side(None, None, None, "errored"),
    }
    b = {f"t{i}": side(1.0) for i in range(12)} | {"only-b": side(0.0), "err": side(1.0)}
    c = compare(a, b)
    assert (c.n_scored, c.mean_diff, c.only_b_passed, c.only_a_passed) == (12, 1.0, 12, 0)
    assert c.only_in_a == ["only-a"] and c.only_in_b == ["only-b"]
    assert c.significant and c.mcnemar_p == pytest.approx(2 / 2**12)
    assert "real" in c.verdict()


def test_bench_results_compare_prints_the_table_and_the_verdict(tmp_path, bench_env):
    # given two jobs over the same three tasks; B passes two more
    for name, rewards in (("A", [0.0, 0.0, 1.0]), ("B", [1.0, 1.0, 1.0])):
        job = write_job(tmp_path, name, plan=["x", "y", "z"])
        for task, reward in zip("xyz", rewards, strict=True):
            write_attempt(
                job, f"{task}__0000000{name}", result_doc(task, f"{task}__0000000{name}", reward)
            )
    # when
    out = run_bench(["results", "--compare", "A", "B"], env=bench_env, cwd=tmp_path)
    doc = run_bench(["results", "--compare", "A", "B", "--json"], env=bench_env, cwd=tmp_path)
    # then
    assert out.returncode == 0, out.stderr
    assert "x" in out.stdout and "+1.00" in out.stdout and "95% CI" in out.stdout
    assert "McNemar p=0.5" in out.stdout and "2 passed only in B" in out.stdout
    data = json.loads(doc.stdout)
    assert data["kind"] == "benchflow.comparison" and data["n_paired_scored"] == 3
    assert data["mean_diff"] == pytest.approx(2 / 3)


def test_bench_results_compare_names_a_folder_that_is_no_job(tmp_path, bench_env):
    write_job(tmp_path, "A", plan=[])
    out = run_bench(["results", "--compare", "A", "nope"], env=bench_env, cwd=tmp_path)
    assert out.returncode == 2 and "nope is not a job folder" in out.stderr


def test_flipped_tasks_are_the_scored_pairs_that_passed_in_one_job_only_sorted():
    side = lambda r: Side(r, None, None, "passed" if r == 1.0 else "failed")  # noqa: E731
    a = {"b": side(1.0), "a": side(1.0), "c": side(0.0), "d": side(1.0), "e": side(1.0)}
    b = {"b": side(0.0), "a": side(0.5), "c": side(1.0), "d": side(1.0)} | {
        "e": Side(None, None, None, "errored")
    }
    c = compare(a, b)
    assert [p.name for p in c.flipped_a] == ["a", "b"]  # e is unscored in B: not a flip
    assert [p.name for p in c.flipped_b] == ["c"]
    assert (c.only_a_passed, c.only_b_passed) == (2, 1)
