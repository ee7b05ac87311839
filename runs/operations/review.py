"""A rubric review from the dashboard: an operator reviews a job or the ticked trials, as `bench
review` does. Checked in the request, run out of it (`bench _operate review`): the review job,
then each answer scored into the attempt's review.json; rewards are never changed."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from runs.gateway import ModelGateway
from runs.operations import control
from runs.operations.process import Launcher, Request
from runs.operations.run import run_job
from runs.problems import UserError
from runs.review import reviewer
from runs.review import rubric as rb
from runs.spec import RunSpec


def start_review(
    job_dir: Path,
    trials: Collection[str] | None,
    *,
    agent: str,
    model: str | None,
    rubric_text: str,
    launcher: Launcher,
    by: str = "",
) -> str:
    """Check (the job has ended; the rubric, when given, is one), then hand it to the launcher."""
    if control.is_running(job_dir):
        raise UserError(f"{job_dir.name} is running; review it once it has ended")
    if not agent.strip():
        raise UserError("the reviewer agent is empty; fix: name one (claude, opencode, codex)")
    try:
        rubric = json.loads(rubric_text) if rubric_text.strip() else None
    except ValueError as exc:
        raise UserError(f"the rubric is not JSON ({exc}); fix: paste a rubric.json") from None
    if rubric is not None:
        rb.parse_rubric(rubric, "the rubric")
    body = {
        "trials": sorted(trials) if trials is not None else None,
        "agent": agent.strip(),
        "model": (model or "").strip() or None,
        "rubric": rubric,
    }
    return launcher.start(Request("review", str(job_dir), body, by))


def run_review(
    job_dir: Path,
    body: Mapping[str, Any],
    *,
    setup_django: Callable[[], None],
    gateway: ModelGateway | None,
) -> int:
    rubric_file = None
    if body.get("rubric"):
        rubric_file = job_dir / reviewer.RUNS / "rubric.json"
        rubric_file.parent.mkdir(parents=True, exist_ok=True)
        rubric_file.write_text(json.dumps(body["rubric"]))
    trials = body.get("trials")
    plan = reviewer.prepare(job_dir, rubric_file, trials=trials)
    agent, model = str(body["agent"]), body.get("model")
    spec = RunSpec(
        tasks_dir=plan.tasks_dir,
        agent=agent,
        model=model,
        jobs_dir=plan.tasks_dir.parent,
        job="run",
        quiet=True,
    )
    run_job(spec, setup_django=setup_django, gateway=gateway)
    report = reviewer.collect(plan, plan.tasks_dir.parent / "run", agent, model, None)
    done = sum(1 for r in report["reviews"] if r["complete"])
    print(f"Reviewed {done} of {len(report['reviews'])} trials of {job_dir.name}.", flush=True)
    return 0 if done == len(report["reviews"]) else 1
