"""BenchFlow's automatic rubric review (§2.7): `bench run --reviewer-model M` reviews each attempt
of a task that ships a rubric (verifier/rubric.json, or tests/rubric.json) as soon as it is
verified, while the job's other trials go on, and gates its reward on the review.

The job's coordinator emits AttemptFinished when an attempt's result.json is written and counted;
`AutoReview.observe` queues a review of it, at most --reviewer-concurrency at once, and the job
awaits `drain()` before it writes its summary. A review is a job of its own (`bench _operate
reviewer`, the reviewer's settings on its stdin, so a secret --reviewer-agent-env value is never on a
command line or in a file) under the attempt's scoring/ folder: its tokens and cost are counted
there, never in the reviewed job's cost line or caps; its result.json is marked `purpose:
reviewer` with `parent_rollout`, which every reader of a job's attempts leaves out.

Then the attempt keeps solver.json (its result as the solver left it) and
scoring/<attempt>.json (verdicts, raw and gated quality, band, the reviewer's usage and run), and
its result.json's reward becomes the gated quality, with a `scoring` block. A review that fails
or times out is recorded as a scoring error and the solver's reward stays.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runs import events as ev
from runs.jobfolder import read_object, write_json
from runs.problems import UserError
from runs.requests import Request
from runs.results.attempt_folder import RESULT, read_attempt
from runs.results.trial_result import TrialResult
from runs.review import reviewer
from runs.review import rubric as rb
from runs.spec import RunSpec, spec_payload
from runs.tasks.load import Task

SCORING = "scoring"
SOLVER = "solver.json"
RUN = "run"  # the reviewer's job folder, under the attempt's scoring/
LOG = "reviewer.log"
# past the reviewer agent's own timeout: its sandbox's build, the check, the clean-up
GRACE_S = 600.0
STOP_WAIT_S = 60.0


def task_rubric(task: Task) -> rb.Rubric | None:
    """The rubric the task ships; a broken one is no rubric here (the review is skipped; the
    preflight's task check is where a task's files are judged)."""
    for rel in reviewer.RUBRIC_FILES:
        found = task.path / rel
        if found.is_file():
            try:
                return rb.load_rubric(found)
            except UserError:
                return None
    return None


def scoring_record(
    rubric: rb.Rubric,
    solver: dict[str, Any],
    answer: Any,
    failure: str | None,
    reviewer_block: dict[str, Any],
    usage: dict[str, Any],
) -> dict[str, Any]:
    """scoring/<attempt>.json: the reviewer's verdicts and the gated reward they give (the solver's
    reward kept, with `error`, when the review failed or left a criterion unanswered)."""
    rewards = solver.get("rewards")
    reward = rewards.get("reward") if isinstance(rewards, dict) else None
    solver_reward = float(reward) if isinstance(reward, (int, float)) else None
    errored = bool(solver.get("error") or solver.get("verifier_error"))
    answers, problems = rb.check_answers(rubric, answer) if answer is not None else ([], [])
    if failure is not None or answer is None:
        problems = [failure or "the reviewer wrote no /app/review.json"]
    record: dict[str, Any] = {
        "rollout_name": solver.get("rollout_name"),
        "rubric_version": rubric.version,
        "reviewer": reviewer_block,
        "reviewer_usage": usage,
        "solver_reward": solver_reward,
        "complete": not problems,
        "problems": problems,
        "criteria": rb.verdicts(rubric, answers),
        "scored_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if problems:
        record["error"] = "scoring error: " + "; ".join(problems)
        record["reward"] = solver_reward
    else:
        record.update(rb.score(rubric, answers, solver_reward, errored))
        record["reward"] = record["gated_quality"]
    return record


def gated_result(solver: dict[str, Any], record: dict[str, Any], file: str) -> dict[str, Any]:
    """The attempt's result.json once scored: the reward the gated quality (kept on a scoring
    error), and a `scoring` block saying where it came from."""
    doc = dict(solver)
    block: dict[str, Any] = {"file": file, "solver_reward": record["solver_reward"]}
    if record.get("error"):
        block["error"] = record["error"]
    else:
        rewards = dict(solver.get("rewards") or {})
        rewards["reward"] = record["gated_quality"]
        doc["rewards"] = rewards
        for key in ("raw_quality", "gated_quality", "band", "gates"):
            block[key] = record[key]
    block["reviewer_usage"] = record["reviewer_usage"]
    block["reviewer_run"] = record["reviewer"].get("run")
    doc["scoring"] = block
    return doc


class AutoReview:
    """The job's review queue: fed by AttemptFinished, drained before the summary."""

    def __init__(
        self,
        spec: RunSpec,
        job_dir: Path,
        rubrics: dict[str, rb.Rubric],
        tasks: dict[str, Task],
        emit: Callable[[ev.Event], None],
        on_server: bool = False,
    ):
        self.spec, self.job_dir, self.rubrics, self.tasks, self.emit = (
            spec,
            job_dir,
            rubrics,
            tasks,
            emit,
        )
        self.on_server = on_server  # the job was launched from bench serve: so is its reviewer
        self.slots = asyncio.Semaphore(spec.reviewer_concurrency)
        self.pending: set[asyncio.Task[None]] = set()
        self.procs: set[asyncio.subprocess.Process] = set()
        self.stopping = False

    @classmethod
    def for_job(
        cls,
        spec: RunSpec,
        job_dir: Path,
        tasks: list[Task],
        emit: Callable[[ev.Event], None],
        on_server: bool = False,
    ) -> AutoReview | None:
        """None without --reviewer-model or when no task ships a rubric."""
        if not spec.reviewer_model:
            return None
        rubrics = {t.name: r for t in tasks if (r := task_rubric(t)) is not None}
        if not rubrics:
            return None
        return cls(spec, job_dir, rubrics, {t.name: t for t in tasks}, emit, on_server)

    def observe(self, event: ev.Event) -> None:
        if isinstance(event, ev.AttemptFinished):
            self.queue(event.rollout_name, event.result.task_name, event.result.reward)

    def queue(self, rollout: str, task: str, reward: float | None) -> None:
        """Review a verified attempt (one with a reward) of a task that ships a rubric."""
        if task not in self.rubrics or reward is None:
            return
        job = asyncio.create_task(self._review(self.job_dir / rollout, task))
        self.pending.add(job)
        job.add_done_callback(self.pending.discard)

    def resume_pending(self) -> None:
        """A resumed job's verified attempts that were never scored (BenchFlow resumes pending
        reviews first)."""
        for entry in sorted(self.job_dir.iterdir()):
            if "__" not in entry.name or not entry.is_dir() or (entry / SOLVER).exists():
                continue
            record = read_attempt(str(entry))
            doc = record.document if record.kind == "ok" else None
            if doc is not None and "scoring" not in doc and record.source == "benchflow":
                self.queue(entry.name, record.task, record.result.reward if record.result else None)

    async def drain(self) -> None:
        """Wait for every queued review (the job's summary must see the gated rewards)."""
        while self.pending:
            await asyncio.gather(*list(self.pending), return_exceptions=True)

    def stop(self) -> None:
        """A signal: the reviewers' runs are asked to stop, and a review cut short records
        nothing (the attempt keeps its solver's result; a resume reviews it)."""
        self.stopping = True
        for proc in list(self.procs):
            _signal(proc, signal.SIGTERM)

    async def _review(self, attempt: Path, task: str) -> None:
        async with self.slots:
            if self.stopping:
                return
            record = read_attempt(str(attempt))
            solver = record.document if record.kind == "ok" else None
            if solver is None:
                return
            rubric = self.rubrics[task]
            try:
                failure, answer, usage = await self._run_reviewer(attempt, task, solver, rubric)
            except Exception as exc:  # noqa: BLE001 - the review's fault, recorded; the job goes on
                failure, answer, usage = f"the review could not run ({exc})", None, {}
            if self.stopping:
                return
            block = {
                "agent": self.spec.reviewer_agent,
                "model": self.spec.reviewer_model,
                "reasoning_effort": self.spec.reviewer_reasoning_effort,
                "run": f"{SCORING}/{RUN}",  # under the attempt: it moves with the job
            }
            scored = scoring_record(rubric, solver, answer, failure, block, usage)
            self.emit(ev.AttemptScored(*self._write(attempt, solver, scored)))

    def _write(
        self, attempt: Path, solver: dict[str, Any], record: dict[str, Any]
    ) -> tuple[str, str, TrialResult, str | None, str | None, float | None, float | None]:
        """solver.json first (the solver's result as it was), then scoring/<attempt>.json, then
        result.json with the gated reward."""
        write_json(attempt / SOLVER, solver)
        file = f"{SCORING}/{attempt.name}.json"
        write_json(attempt / file, record)
        doc = gated_result(solver, record, file)
        write_json(attempt / RESULT, doc)
        result = TrialResult.from_json(doc, attempt.name)
        return (
            result.trial_name,
            attempt.name,
            result,
            record.get("error"),
            record.get("band"),
            record.get("gated_quality"),
            record.get("raw_quality"),
        )

    def reviewer_spec(self, tasks_dir: Path, scoring: Path) -> RunSpec:
        """The reviewer's run: one task, its own job `scoring/run`, the --reviewer-* settings
        (the agent's timeout and network are its task's, written by reviewer.write_task)."""
        return RunSpec(
            tasks_dir=tasks_dir,
            agent=self.spec.reviewer_agent,
            model=self.spec.reviewer_model,
            concurrency=1,
            jobs_dir=scoring,
            job=RUN,
            quiet=True,
            agent_env=dict(self.spec.reviewer_agent_env),
            agent_idle_timeout=self.spec.reviewer_idle_timeout,
            workers="off",
            retry_attempts=0,
        )

    async def _run_reviewer(
        self, attempt: Path, task: str, solver: dict[str, Any], rubric: rb.Rubric
    ) -> tuple[str | None, Any, dict[str, Any]]:
        """The reviewer's run: (why it failed or None, its answer, its usage)."""
        scoring = attempt / SCORING
        run_dir = scoring / RUN
        target = reviewer.Target(
            str(solver.get("trial_name") or task),
            task,
            attempt.name,
            attempt,
            TrialResult.from_json(solver, attempt.name).reward,
            bool(solver.get("error")),
            str(self.tasks[task].path),
        )
        task_dir = scoring / "tasks" / reviewer.task_name(target)
        network = self.tasks[task].sandbox.network_mode
        reviewer.write_task(
            task_dir,
            target,
            rubric,
            image=self.spec.reviewer_image,
            timeout_sec=self.spec.reviewer_timeout_sec,
            network_mode="public" if self.spec.reviewer_open_network else network,
        )
        spec = self.reviewer_spec(task_dir.parent, scoring)
        run_dir.mkdir(parents=True, exist_ok=True)
        body = {**spec_payload(spec), "on_server": self.on_server}
        request = Request("reviewer", str(run_dir), body, "reviewer")
        failure = await self._launch(request, scoring / LOG)
        (scoring / "summary.json").unlink(missing_ok=True)  # the run's copy for its "jobs folder"
        # the copy of the attempt's outputs the review's image was built from: the attempt has them
        shutil.rmtree(task_dir / "environment" / "review" / "outputs", ignore_errors=True)
        answer: Any = None
        usage: dict[str, Any] = {"cost_usd": None, "total_tokens": None}
        for entry in sorted(run_dir.iterdir()) if run_dir.is_dir() else []:
            record = read_attempt(str(entry)) if "__" in entry.name and entry.is_dir() else None
            if record is None or record.kind != "ok" or record.raw is None:
                continue
            mark_reviewer(entry, record.raw, attempt.name)
            typed = record.result
            assert typed is not None
            usage = {
                "cost_usd": typed.agent_result.cost_usd,
                "total_tokens": typed.agent_result.total_tokens,
            }
            try:
                answer = json.loads((entry / "verifier" / "review.json").read_text())
            except (OSError, ValueError):
                failure = failure or typed.error or "the reviewer wrote no /app/review.json"
        return failure, answer, usage

    async def _launch(self, request: Any, log: Path) -> str | None:
        """`bench _operate reviewer` with the request on stdin, its output in scoring/reviewer.log;
        stopped past --reviewer-timeout-sec (and the grace its sandbox needs)."""
        with open(log, "ab") as out:
            proc = await asyncio.create_subprocess_exec(
                *[sys.executable, "-m", "benchflow_site.cli", "_operate", "reviewer"],
                stdin=asyncio.subprocess.PIPE,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.add(proc)
        try:
            assert proc.stdin is not None
            proc.stdin.write(request.to_json().encode())
            await proc.stdin.drain()
            proc.stdin.close()
            limit = self.spec.reviewer_timeout_sec + GRACE_S
            try:
                code = await asyncio.wait_for(proc.wait(), limit)
            except TimeoutError:
                await _stop(proc)
                return f"the reviewer's run passed {self.spec.reviewer_timeout_sec:g}s"
            except asyncio.CancelledError:
                await asyncio.shield(_stop(proc))
                raise
        finally:
            self.procs.discard(proc)
        return None if code in (0, 1) else f"the reviewer's run ended with code {code}"


def mark_reviewer(folder: Path, doc: dict[str, Any], parent: str) -> None:
    """The reviewer's rollout named as such (result.json and config.json): no reader of a job's
    attempts counts it."""
    write_json(folder / RESULT, {**doc, "purpose": "reviewer", "parent_rollout": parent})
    config = read_object(folder / "config.json")
    if config is not None:
        write_json(
            folder / "config.json", {**config, "purpose": "reviewer", "parent_rollout": parent}
        )


def _signal(proc: asyncio.subprocess.Process, sig: int) -> None:
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, sig)  # its own session: the run and what it started
        except ProcessLookupError:
            pass


async def _stop(proc: asyncio.subprocess.Process) -> None:
    _signal(proc, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), STOP_WAIT_S)
    except TimeoutError:
        _signal(proc, signal.SIGKILL)
        await proc.wait()
