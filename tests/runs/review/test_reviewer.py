"""bench review's preparation: what the reviewer's sandbox holds, and mock/oracle's answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runs.problems import UserError
from runs.review import reviewer
from runs.review import rubric as rb
from tests.jobfolders import result_doc, write_attempt, write_job, write_summary
from tests.trajectories import trajectory

RUBRIC = {"criteria": [{"name": "ok", "description": "secret-desc", "guidance": "is it ok?"}]}


def a_job(tmp_path: Path) -> Path:
    job = write_job(tmp_path / "jobs", plan=["hello", "broken"])
    hello = write_attempt(job, "hello__00000001", result_doc("hello", "hello__00000001", 1.0))
    (hello / "artifacts").mkdir(exist_ok=True)
    (hello / "artifacts" / "out.txt").write_text("made it")
    trajectory(hello, 3)
    write_attempt(job, "broken__00000002", result_doc("broken", "broken__00000002", 0.0))
    write_summary(job)
    return job


def test_each_trial_becomes_a_task_holding_its_outputs_transcript_and_the_rubric_shown(
    tmp_path: Path,
) -> None:
    job = a_job(tmp_path)
    (tmp_path / "r.json").write_text(json.dumps(RUBRIC))
    plan = reviewer.prepare(job, tmp_path / "r.json")
    assert [t.trial_name for t in plan.targets] == ["hello", "broken"]
    review = plan.tasks_dir / "hello" / "environment" / "review"
    assert (review / "outputs" / "artifacts" / "out.txt").read_text() == "made it"
    transcript = (review / "transcript.txt").read_text()
    assert "[e1 +0:00 system system prompt]" in transcript and "out 1" in transcript
    assert "secret-desc" not in (review / "rubric.json").read_text()
    assert json.loads((review / "trial.json").read_text())["reward"] == 1.0
    assert (plan.tasks_dir / "hello" / "tests" / "test.sh").is_file()
    # --failing keeps the failed trials only
    failing = reviewer.prepare(job, tmp_path / "r.json", "failing")
    assert [t.trial_name for t in failing.targets] == ["broken"]


def test_mock_oracle_passes_everything_at_reward_1_and_fails_it_otherwise() -> None:
    rubric = rb.parse_rubric(RUBRIC)
    assert reviewer.oracle_answer(rubric, 1.0)["criteria"][0]["verdict"] == "pass"
    assert reviewer.oracle_answer(rubric, 0.5)["criteria"][0]["verdict"] == "fail"
    assert reviewer.oracle_answer(rubric, None)["criteria"][0]["verdict"] == "fail"


def test_without_a_rubric_the_fix_is_named(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="fix: bench review ... -r rubric.json"):
        reviewer.prepare(a_job(tmp_path), None)


def test_collect_scores_a_complete_answer_and_reports_an_unanswered_one(tmp_path: Path) -> None:
    job = a_job(tmp_path)
    (tmp_path / "r.json").write_text(json.dumps(RUBRIC))
    plan = reviewer.prepare(job, tmp_path / "r.json")
    # a review run whose hello answered and broken did not
    run = plan.tasks_dir.parent / "run"
    done = write_job(plan.tasks_dir.parent, name="run", plan=["hello", "broken"])
    assert done == run
    answered = write_attempt(run, "hello__0000000a", result_doc("hello", "hello__0000000a", 1.0))
    (answered / "verifier" / "review.json").write_text(
        json.dumps(reviewer.oracle_answer(rb.parse_rubric(RUBRIC), 1.0))
    )
    write_attempt(run, "broken__0000000b", result_doc("broken", "broken__0000000b", 0.0))
    report = reviewer.collect(plan, run, "claude", "mock/oracle", None)
    by = {r["trial_name"]: r for r in report["reviews"]}
    assert by["hello"]["complete"] and by["hello"]["band"] == "publishable"
    assert not by["broken"]["complete"] and "gated_quality" not in by["broken"]
    assert json.loads((job / "hello__00000001" / "review.json").read_text())["raw_quality"] == 1.0
    assert (job / "review_report.json").is_file()
