"""The Verifier tab: a run's rewards, exit code, output and CTRF tests; a regrade beside it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from runs.results import verifier_tab as vt


def ctrf(tests: list[dict], summary: dict | None = None) -> str:
    results: dict = {"tool": {"name": "pytest"}, "tests": tests}
    if summary is not None:
        results["summary"] = summary
    return json.dumps({"results": results})


def test_ctrf_tests_put_failures_first_with_their_message(tmp_path: Path) -> None:
    # given a verifier that wrote output and a CTRF report
    verifier = tmp_path / "verifier"
    verifier.mkdir()
    (verifier / "test-stdout.txt").write_text("collected 3 items")
    (verifier / "ctrf.json").write_text(
        ctrf(
            [
                {"name": "test_a", "status": "passed", "duration": 12},
                {"name": "test_b", "status": "failed", "message": "assert 1 == 2"},
                {"name": "test_c", "status": "skipped"},
            ],
            {"tests": 3, "passed": 1, "failed": 1, "skipped": 1},
        )
    )
    result = SimpleNamespace(rewards={"reward": 0.0, "tests": 0.33}, verifier_exit_code=1)
    # when
    run = vt.original_run(tmp_path, result, 0.0)
    # then
    assert [(t.name, t.status, t.message) for t in run.tests] == [
        ("test_b", "failed", "assert 1 == 2"),
        ("test_a", "passed", ""),
        ("test_c", "skipped", ""),
    ]
    assert run.summary == {"tests": 3, "passed": 1, "failed": 1, "skipped": 1}
    assert run.exit_code == 1 and run.rewards == [("reward", 0.0), ("tests", 0.33)]
    assert run.stdout == "collected 3 items" and run.stderr == ""


def test_a_report_without_a_summary_is_counted_and_a_broken_one_said_so(tmp_path: Path) -> None:
    (tmp_path / "verifier").mkdir()
    (tmp_path / "verifier/ctrf.json").write_text(ctrf([{"name": "t", "status": "failed"}]))
    assert vt.original_run(tmp_path, None, None).summary == {"tests": 1, "failed": 1}
    (tmp_path / "verifier/ctrf.json").write_text('{"results": ')
    broken = vt.original_run(tmp_path, None, None)
    assert broken.ctrf_unreadable and broken.tests == []


def test_a_huge_report_shows_its_first_tests_and_counts_the_rest(tmp_path: Path) -> None:
    (tmp_path / "verifier").mkdir()
    many = [{"name": f"t{i}", "status": "passed"} for i in range(vt.TESTS_SHOWN + 7)]
    (tmp_path / "verifier/ctrf.json").write_text(ctrf(many))
    run = vt.original_run(tmp_path, None, 1.0)
    assert len(run.tests) == vt.TESTS_SHOWN and run.tests_more == 7


def test_the_latest_regrade_reads_from_its_own_folder(tmp_path: Path) -> None:
    out = tmp_path / "regrade/r2/verifier"
    out.mkdir(parents=True)
    (out / "test-stdout.txt").write_text("now failing")
    (out / "ctrf.json").write_text(ctrf([{"name": "t", "status": "failed", "message": "no"}]))
    regrades = {
        "regrades": [
            {"id": "r1", "output_dir": "regrade/r1", "new_reward": 1.0},
            {
                "id": "r2",
                "created_at": "2026-12-04T10:00:00",
                "output_dir": "regrade/r2",
                "new_reward": 0.0,
                "new_rewards": {"reward": 0.0},
                "verifier_exit_code": 1,
            },
        ]
    }
    run = vt.latest_regrade(tmp_path, regrades)
    assert run is not None and run.label.startswith("regrade r2")
    assert (run.reward, run.exit_code, run.stdout) == (0.0, 1, "now failing")
    assert run.tests[0].message == "no"
    # an output folder outside regrade/ is not read
    regrades["regrades"][-1]["output_dir"] = "../../etc"
    assert vt.latest_regrade(tmp_path, regrades).stdout == ""  # type: ignore[union-attr]
    assert vt.latest_regrade(tmp_path, None) is None
