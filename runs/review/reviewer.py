"""`bench review`: a reviewer agent audits trials against a rubric, and never changes a reward.

Each trial to review becomes a task of a review job of its own (its folder under the reviewed
job's review-runs/, a job like any other: its tokens and cost are counted there, never in the
reviewed job's cost line or caps). The task's sandbox holds, under /review, the trial's saved
outputs (artifacts/, agent/ and verifier/ of its attempt, bounded), its transcript (the event
stream as text), the task's instruction, the trial's reward and the rubric as the reviewer sees it
(no descriptions); the reviewer writes /app/review.json, which the task's check copies out. Then
each answer is checked (every criterion answered), scored (runs/review/rubric.py) and written:
the attempt's review.json (the trial page's Rubric tab) and the run's review_report.json.

`-m mock/oracle` needs no provider: the task's solution writes every criterion as passed when the
trial's reward is 1, failed otherwise, and the proxy's mock model makes the agent run it with its
own shell tool, so the reviewer really works through the proxy.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runs.jobfolder import read_object, write_json
from runs.problems import UserError
from runs.results import event_stream
from runs.results.job_documents import is_job_folder
from runs.results.load import load_job
from runs.review import rubric as rb

RUNS = "review-runs"
REPORT = "review_report.json"
ATTEMPT_REVIEW = "review.json"
OUTPUT_FILE_MAX = 5 << 20
OUTPUTS_MAX = 50 << 20
TRANSCRIPT_EVENTS = 3_000
TRANSCRIPT_BYTES = 4 << 20
RUBRIC_FILES = ("verifier/rubric.json", "tests/rubric.json")
BASE_IMAGE = "debian:bookworm-slim"


@dataclass
class Target:
    trial_name: str
    task_name: str
    rollout_name: str
    folder: Path
    reward: float | None
    errored: bool
    task_path: str | None


@dataclass
class Plan:
    job_dir: Path
    review_id: str
    tasks_dir: Path  # the review job's tasks, one a trial
    targets: list[Target]
    rubrics: dict[str, rb.Rubric]  # trial name -> its rubric
    skipped: list[str] = field(default_factory=list)


def find_targets(
    path: Path, which: str = "all", trials: Collection[str] | None = None
) -> tuple[Path, list[Target]]:
    """The trials of a job folder (their best attempts), or the one attempt folder given;
    `which` passing (reward 1) / failing / all."""
    path = path.resolve()
    if is_job_folder(path):
        job_dir, only = path, None
    elif is_job_folder(path.parent):
        job_dir, only = path.parent, path.name
    else:
        raise UserError(f"{path} is neither a job folder nor a trial's attempt folder of one")
    job = load_job(job_dir)
    out: list[Target] = []
    for trial in job.best_trials:
        chosen = trial.chosen
        if chosen is None or chosen.result is None:
            continue
        if only is not None and only not in (chosen.folder, trial.trial_name):
            continue
        if which == "passing" and trial.reward != 1.0 or which == "failing" and trial.reward == 1.0:
            continue
        if trials is not None and trial.trial_name not in trials:
            continue
        config = read_object(Path(chosen.path) / "config.json") or {}
        out.append(
            Target(
                trial.trial_name,
                trial.task,
                chosen.folder,
                Path(chosen.path),
                trial.reward,
                bool(trial.error),
                config.get("task_path") if isinstance(config.get("task_path"), str) else None,
            )
        )
    if only is not None and not out:
        raise UserError(f"{path.name}: no scored attempt of that name in {job_dir.name}")
    return job_dir, out


def task_rubric(target: Target) -> rb.Rubric | None:
    """The rubric the trial's task ships (verifier/rubric.json, or tests/rubric.json)."""
    if not target.task_path:
        return None
    for rel in RUBRIC_FILES:
        found = Path(target.task_path) / rel
        if found.is_file():
            return rb.load_rubric(found)
    return None


def transcript_text(folder: Path) -> str:
    """The attempt's event stream as plain text, bounded."""
    paths = [
        str(p.relative_to(folder))
        for p in (folder / "agent" / "sessions").rglob("*.jsonl")
        if p.is_file()
    ] + ([event_stream.TRAJECTORY] if (folder / event_stream.TRAJECTORY).is_file() else [])
    source = event_stream.find_source(folder, paths)
    cursor, lines, size = event_stream.Cursor(), [], 0
    while source is not None and cursor.n < TRANSCRIPT_EVENTS and size < TRANSCRIPT_BYTES:
        page = event_stream.stream_page(folder, source, cursor)
        for e in page.events:
            head = f"[e{e.n} {e.offset} {e.kind}{' ' + e.title if e.title else ''}"
            head += f" {e.status}]" if e.status else "]"
            text = "\n".join(x for x in (head, e.text, e.output and "-> " + e.output) if x)
            lines.append(text)
            size += len(text)
        cursor = page.cursor
        if page.done:
            break
    return "\n\n".join(lines) or "(no transcript: the attempt kept no model calls)"


def _copy_outputs(src: Path, dst: Path) -> None:
    budget = OUTPUTS_MAX
    for sub in ("artifacts", "agent", "verifier"):
        base = src / sub
        if not base.is_dir() or base.is_symlink():
            continue
        for f in sorted(base.rglob("*")):
            if f.is_symlink() or not f.is_file():
                continue
            size = f.stat().st_size
            if size > OUTPUT_FILE_MAX or size > budget:
                continue
            budget -= size
            target = dst / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)


def oracle_answer(rubric: rb.Rubric, reward: float | None) -> dict[str, Any]:
    """mock/oracle's review: every criterion passes when the reward is 1, fails otherwise."""
    verdict = "pass" if reward == 1.0 else "fail"
    why = f"mock/oracle: the trial's reward is {reward}"
    return {
        "criteria": [
            {"name": c.name, "verdict": verdict, "explanation": why} for c in rubric.criteria
        ]
    }


INSTRUCTION = """You are reviewing what an AI agent did on a task. Do not fix anything.

Everything is under /review:
- /review/trial.json: the task, the trial, its reward and outcome;
- /review/instruction.md: what the agent was asked;
- /review/transcript.txt: what it did, step by step ([eN +m:ss kind] headers);
- /review/outputs/: the files it left (artifacts/, agent/ logs, verifier/ output);
- /review/rubric.json: the criteria to judge, each with guidance{weights}.

For EVERY criterion in /review/rubric.json decide one verdict: "pass", "fail" or
"not_applicable", with a short explanation citing the evidence (an eN step or a file).
Write your answer to /app/review.json exactly as:
{{"criteria": [{{"name": "<criterion name>", "verdict": "pass", "explanation": "..."}}]}}
"""

TEST = """#!/bin/bash
# the review's answer, copied out for bench review to check and score (the reward says only
# whether an answer was written)
if [ -s /app/review.json ]; then
  cp /app/review.json /logs/verifier/review.json && echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""

TOML = """version = "1.0"

[metadata]
category = "review"

[agent]
timeout_sec = {timeout_sec}

[verifier]
timeout_sec = 60

[environment]
network_mode = "{network_mode}"
"""


def task_name(target: Target) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in target.trial_name)[:150]


def prepare(
    path: Path,
    rubric_file: Path | None,
    which: str = "all",
    now: datetime | None = None,
    trials: Collection[str] | None = None,
) -> Plan:
    """The review job's tasks, one a trial to review, under the job's review-runs/<id>/tasks."""
    job_dir, targets = find_targets(path, which, trials)
    if not targets:
        raise UserError(f"{path}: no trial to review (scored ones only; check --passing/--failing)")
    given = rb.load_rubric(rubric_file) if rubric_file else None
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%d__%H-%M-%S")
    plan = Plan(job_dir, stamp, job_dir / RUNS / stamp / "tasks", [], {})
    for target in targets:
        rubric = given or task_rubric(target)
        if rubric is None:
            plan.skipped.append(f"{target.trial_name}: its task ships no rubric (pass -r)")
            continue
        plan.targets.append(target)
        plan.rubrics[target.trial_name] = rubric
        write_task(plan.tasks_dir / task_name(target), target, rubric)
    if not plan.targets:
        raise UserError(
            "no rubric: the tasks ship no verifier/rubric.json or tests/rubric.json; "
            "fix: bench review ... -r rubric.json"
        )
    return plan


def write_task(
    task: Path,
    target: Target,
    rubric: rb.Rubric,
    *,
    image: str | None = None,
    timeout_sec: float = 900,
    network_mode: str = "public",
) -> None:
    """The review's task: the trial's evidence under /review in `image` (default BASE_IMAGE), the
    reviewer's instruction, the check that copies its answer out, and mock/oracle's solution."""
    review = task / "environment" / "review"
    review.mkdir(parents=True, exist_ok=True)
    _copy_outputs(target.folder, review / "outputs")
    instruction = ""
    if target.task_path:
        for name in ("instruction.md", "task.md"):
            found = Path(target.task_path) / name
            if found.is_file():
                instruction = found.read_text(errors="replace")[:200_000]
                break
    (review / "instruction.md").write_text(instruction or "(the task's instruction was not found)")
    (review / "transcript.txt").write_text(transcript_text(target.folder))
    write_json(review / "rubric.json", {"criteria": rubric.for_reviewer()})
    trial = {
        "task": target.task_name,
        "trial": target.trial_name,
        "attempt": target.rollout_name,
        "reward": target.reward,
        "errored": target.errored,
    }
    write_json(review / "trial.json", trial)
    (task / "environment" / "Dockerfile").write_text(
        f"FROM {image or BASE_IMAGE}\nWORKDIR /app\nCOPY review /review\n"
    )
    weights = "; v0.2: blocker 1 means it must pass, weight 1..10 its importance"
    text = INSTRUCTION.format(weights=weights if rubric.version == "0.2" else "")
    (task / "instruction.md").write_text(text)
    (task / "task.toml").write_text(
        TOML.format(timeout_sec=f"{timeout_sec:g}", network_mode=network_mode)
    )
    (task / "tests").mkdir(parents=True, exist_ok=True)
    (task / "tests" / "test.sh").write_text(TEST)
    answer = json.dumps(oracle_answer(rubric, target.reward), indent=1)
    (task / "solution").mkdir(parents=True, exist_ok=True)
    (task / "solution" / "solve.sh").write_text(
        f"#!/bin/bash\ncat > /app/review.json <<'BENCH_REVIEW_EOF'\n{answer}\nBENCH_REVIEW_EOF\n"
    )


def collect(
    plan: Plan, review_job: Path, agent: str, model: str | None, out: Path | None
) -> dict[str, Any]:
    """Each reviewed trial's answer checked and scored; the attempt's review.json and the
    run's review_report.json written (never a reward)."""
    by_task: dict[str, dict[str, Any]] = {}
    if review_job.is_dir():
        for trial in load_job(review_job).best_trials:
            if trial.chosen is not None:
                by_task[trial.task] = {
                    "folder": Path(trial.chosen.path),
                    "cost_usd": trial.cost_usd,
                    "total_tokens": trial.total_tokens,
                    "error": trial.error,
                }
    reviews: list[dict[str, Any]] = []
    for target in plan.targets:
        rubric = plan.rubrics[target.trial_name]
        run = by_task.get(task_name(target), {})
        answer_file = run["folder"] / "verifier" / "review.json" if run else None
        try:
            doc = json.loads(answer_file.read_text()) if answer_file else None
        except (OSError, ValueError):
            doc = None
        answers, problems = rb.check_answers(rubric, doc) if doc is not None else ([], [])
        if doc is None:
            problems = [run.get("error") or "the reviewer wrote no /app/review.json"]
        review: dict[str, Any] = {
            "trial_name": target.trial_name,
            "rollout_name": target.rollout_name,
            "reward": target.reward,
            "rubric_version": rubric.version,
            "reviewer": {"agent": agent, "model": model, "run": str(run.get("folder") or "")},
            "reviewer_usage": {
                "cost_usd": run.get("cost_usd"),
                "total_tokens": run.get("total_tokens"),
            },
            "complete": not problems,
            "problems": problems,
            "criteria": rb.verdicts(rubric, answers),
            "reviewed_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        if not problems:
            review.update(rb.score(rubric, answers, target.reward, target.errored))
        write_json(target.folder / ATTEMPT_REVIEW, review)
        reviews.append(review)
    costs = [r["reviewer_usage"]["cost_usd"] for r in reviews if r["reviewer_usage"]["cost_usd"]]
    tokens = [
        r["reviewer_usage"]["total_tokens"] for r in reviews if r["reviewer_usage"]["total_tokens"]
    ]
    report = {
        "job": plan.job_dir.name,
        "review_id": plan.review_id,
        "review_job": str(review_job),
        "reviewer": {"agent": agent, "model": model},
        "reviewer_usage": {
            "cost_usd": sum(costs) if costs else None,
            "total_tokens": sum(tokens) if tokens else None,
        },
        "skipped": plan.skipped,
        "reviews": reviews,
    }
    write_json(
        review_job.parent / REPORT if review_job.is_dir() else plan.tasks_dir.parent / REPORT,
        report,
    )
    write_json(out or plan.job_dir / REPORT, report)
    return report
