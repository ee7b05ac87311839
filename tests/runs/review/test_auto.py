"""The automatic rubric review's pure part: the scoring record and the gated result.json, and
which finished attempts are queued for review."""

from __future__ import annotations

import asyncio
from pathlib import Path

from runs.review import auto
from runs.review import rubric as rb
from runs.spec import RunSpec

RUBRIC = rb.parse_rubric(
    {
        "criteria": [
            {"name": "safe", "description": "d", "guidance": "g", "blocker": 1, "weight": 1},
            {"name": "tidy", "description": "d", "guidance": "g", "blocker": 0, "weight": 3},
            {"name": "clear", "description": "d", "guidance": "g", "blocker": 0, "weight": 1},
        ]
    }
)
REVIEWER = {"agent": "claude", "model": "mock/oracle", "run": "scoring/run"}
USAGE = {"cost_usd": 0.01, "total_tokens": 900}


def solver(reward: float, error: str | None = None) -> dict:
    return {
        "rollout_name": "t__1",
        "trial_name": "t",
        "rewards": {"reward": reward, "x": 2},
        "error": error,
    }


def answer(**verdicts: str) -> dict:
    return {
        "criteria": [{"name": k, "verdict": v, "explanation": "e"} for k, v in verdicts.items()]
    }


def test_a_passing_trial_whose_blockers_pass_gets_the_raw_quality_as_its_reward():
    record = auto.scoring_record(
        RUBRIC, solver(1.0), answer(safe="pass", tidy="pass", clear="fail"), None, REVIEWER, USAGE
    )
    doc = auto.gated_result(solver(1.0), record, "scoring/t__1.json")

    assert record["raw_quality"] == record["gated_quality"] == 0.75
    assert record["band"] == "presentable_with_revisions" and record["solver_reward"] == 1.0
    assert doc["rewards"] == {"reward": 0.75, "x": 2}
    assert doc["scoring"]["gated_quality"] == 0.75 and doc["scoring"]["solver_reward"] == 1.0
    assert (
        doc["scoring"]["reviewer_usage"] == USAGE and doc["scoring"]["file"] == "scoring/t__1.json"
    )


def test_a_failed_blocker_a_partial_reward_or_an_error_gates_the_reward_to_zero():
    good = answer(safe="pass", tidy="pass", clear="pass")
    cases = [
        (solver(1.0), answer(safe="fail", tidy="pass", clear="pass")),
        (solver(0.5), good),
        (solver(1.0, error="agent timed out"), good),
    ]
    for solved, given in cases:
        record = auto.scoring_record(RUBRIC, solved, given, None, REVIEWER, USAGE)
        assert record["raw_quality"] > 0 and record["gated_quality"] == 0.0
        assert auto.gated_result(solved, record, "f")["rewards"]["reward"] == 0.0


def test_a_review_that_failed_or_left_a_criterion_unanswered_keeps_the_solvers_reward():
    for given, failure in (
        (None, "the reviewer's run passed 300s"),
        (answer(safe="pass"), None),
    ):
        record = auto.scoring_record(RUBRIC, solver(1.0), given, failure, REVIEWER, USAGE)
        doc = auto.gated_result(solver(1.0), record, "f")
        assert record["error"].startswith("scoring error: ") and not record["complete"]
        assert doc["rewards"]["reward"] == 1.0
        assert doc["scoring"]["error"] == record["error"]
        assert "gated_quality" not in doc["scoring"]


def test_only_verified_attempts_of_tasks_shipping_a_rubric_are_queued(tmp_path: Path):
    async def queued() -> list[str]:
        review = auto.AutoReview(
            RunSpec(tasks_dir=tmp_path, reviewer_model="mock/oracle"),
            tmp_path,
            {"ruled": RUBRIC},
            {},
            lambda e: None,
        )
        seen: list[str] = []

        async def fake(attempt: Path, task: str) -> None:
            seen.append(attempt.name)

        review._review = fake  # type: ignore[method-assign]
        review.queue("ruled__1", "ruled", 1.0)
        review.queue("ruled__2", "ruled", None)  # errored before its verifier: no reward
        review.queue("plain__1", "plain", 1.0)  # its task ships no rubric
        await review.drain()
        return seen

    assert asyncio.run(queued()) == ["ruled__1"]


def test_a_reviewed_attempt_keeps_the_solvers_result_its_scoring_and_the_gated_reward(
    tmp_path: Path,
):
    from runs import events as ev
    from runs.results.attempt_folder import read_attempt
    from runs.results.load import load_job
    from tests.jobfolders import result_doc, write_attempt, write_job

    job = write_job(tmp_path / "jobs")
    attempt = write_attempt(job, "t__00000001", result_doc("t", "t__00000001", 1.0))
    events: list = []
    review = auto.AutoReview(
        RunSpec(tasks_dir=tmp_path, reviewer_model="mock/oracle"),
        job,
        {"t": RUBRIC},
        {},
        events.append,
    )

    async def reviewed(attempt: Path, task: str, solver: dict, rubric: rb.Rubric):
        return None, answer(safe="pass", tidy="pass", clear="fail"), USAGE

    review._run_reviewer = reviewed  # type: ignore[method-assign]

    async def run() -> None:
        review.queue(attempt.name, "t", 1.0)
        await review.drain()

    asyncio.run(run())

    solver = read_attempt(str(attempt))
    assert solver.raw is not None and solver.raw["rewards"]["reward"] == 0.75
    assert solver.raw["scoring"]["file"] == "scoring/t__00000001.json"
    assert (attempt / "solver.json").is_file()
    assert (attempt / "scoring" / "t__00000001.json").is_file()
    [scored] = events
    assert isinstance(scored, ev.AttemptScored) and scored.result.reward == 0.75
    assert scored.band == "presentable_with_revisions"
    assert [t.reward for t in load_job(job).best_trials] == [0.75]


def test_a_review_that_could_not_run_is_a_scoring_error_and_the_reward_stays(tmp_path: Path):
    from runs.results.attempt_folder import read_attempt
    from tests.jobfolders import result_doc, write_attempt, write_job

    job = write_job(tmp_path / "jobs")
    attempt = write_attempt(job, "t__00000001", result_doc("t", "t__00000001", 1.0))
    review = auto.AutoReview(
        RunSpec(tasks_dir=tmp_path, reviewer_model="mock/oracle"),
        job,
        {"t": RUBRIC},
        {},
        lambda e: None,
    )

    async def broken(*args: object):
        raise OSError("no space left on device")

    review._run_reviewer = broken  # type: ignore[method-assign]

    async def run() -> None:
        review.queue(attempt.name, "t", 1.0)
        await review.drain()

    asyncio.run(run())

    doc = read_attempt(str(attempt)).raw
    assert doc is not None and doc["rewards"]["reward"] == 1.0
    assert "scoring error: the review could not run (no space left" in doc["scoring"]["error"]


def test_the_reviewer_settings_reach_the_reviews_task_and_its_run(tmp_path: Path):
    from runs.review import reviewer
    from runs.tasks.load import load_task

    spec = RunSpec(
        tasks_dir=tmp_path,
        reviewer_model="mock/oracle",
        reviewer_agent="claude",
        reviewer_idle_timeout=None,
        reviewer_agent_env={"NOTE": "sk-live-abcdefghijklmnop"},
    )
    attempt = tmp_path / "t__1"
    attempt.mkdir()
    target = reviewer.Target("t", "t", "t__1", attempt, 1.0, False, None)
    task_dir = tmp_path / "scoring" / "tasks" / "t"
    reviewer.write_task(
        task_dir, target, RUBRIC, image="alpine:3", timeout_sec=300.0, network_mode="no-network"
    )

    task = load_task(task_dir)
    assert (task_dir / "environment" / "Dockerfile").read_text().startswith("FROM alpine:3\n")
    assert task.agent.timeout_sec == 300 and task.sandbox.network_mode == "no-network"
    run = auto.AutoReview(spec, tmp_path, {}, {}, lambda e: None).reviewer_spec(
        task_dir.parent, tmp_path / "scoring"
    )
    assert (run.agent, run.model, run.agent_idle_timeout) == ("claude", "mock/oracle", None)
    assert run.agent_env == {"NOTE": "sk-live-abcdefghijklmnop"}
    assert (run.jobs_dir, run.job, run.workers) == (tmp_path / "scoring", "run", "off")


def test_no_more_than_reviewer_concurrency_reviews_run_at_once(tmp_path: Path):
    from tests.jobfolders import result_doc, write_attempt, write_job

    job = write_job(tmp_path / "jobs")
    names = [f"t__0000000{i}" for i in range(5)]
    for name in names:
        write_attempt(job, name, result_doc("t", name, 1.0))
    review = auto.AutoReview(
        RunSpec(tasks_dir=tmp_path, reviewer_model="mock/oracle", reviewer_concurrency=2),
        job,
        {"t": RUBRIC},
        {},
        lambda e: None,
    )
    running: set[str] = set()
    most = 0
    go_on = asyncio.Event()

    async def held(attempt: Path, task: str, solver: dict, rubric: rb.Rubric):
        nonlocal most
        running.add(attempt.name)
        most = max(most, len(running))
        await go_on.wait()
        running.discard(attempt.name)
        return None, answer(safe="pass", tidy="pass", clear="pass"), USAGE

    review._run_reviewer = held  # type: ignore[method-assign]

    async def run() -> int:
        for name in names:
            review.queue(name, "t", 1.0)
        for _ in range(20):  # every queued review gets its turn to start, if it may
            await asyncio.sleep(0)
        started = len(running)
        go_on.set()
        await review.drain()
        return started

    # while the first reviews are held, only two have started; all five end
    assert asyncio.run(run()) == 2
    assert most == 2
    assert all((job / name / "solver.json").is_file() for name in names)
