"""Multi-step trials: each `[[steps]]` entry is one agent turn and one grading, all in one sandbox.

The trial's reward is the steps' `mean` (a step not run counts 0) or the `final` step's; a step
whose rewards fall below its `min_reward` ends the trial early.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol

from runs.agents.base import Agent
from runs.gateway import ModelGateway
from runs.results.trial_result import StepRecord, TrialResult
from runs.sandboxes.files import populate
from runs.spec import RunSpec
from runs.tasks.config import Step
from runs.tasks.load import Task
from runs.trials.agent_run import AgentRun, run_agent
from runs.trials.artifacts import collect
from runs.trials.environment_setup import EnvironmentSetupError, wait_healthy
from runs.trials.judge import JudgeAccess
from runs.trials.prepared import Prepared
from runs.trials.rewards import TOLERANCE
from runs.trials.trial_budget import TrialBudget, budget_stop_text, trial_budget_for
from runs.trials.verifier import VerifierOutcome, run_verifier
from runs.trials.workspace import EVIDENCE, save_workspace


class StepRunner(Protocol):
    """What the step loop needs of the attempt runner (runs/trials/attempt.py AttemptRunner)."""

    spec: RunSpec
    agent: Agent
    proxy: ModelGateway | None

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def staging(self, attempt_dir: Path) -> Path: ...

    def emit_phase(self, prepared: Prepared, phase: str, step: str | None = None) -> None: ...

    def judged(
        self, prepared: Prepared, task: Task, result: TrialResult
    ) -> AbstractAsyncContextManager[JudgeAccess | None]: ...

    def on_tool(self, prepared: Prepared) -> Callable[[str], None]: ...


STEPS_DIR = "steps"  # <attempt>/steps/<name>/{agent,verifier}: each step's own logs and grading
MinReward = float | Mapping[str, float] | None


# --- pure parts ------------------------------------------------------------------------------


def meets_min_reward(rewards: Mapping[str, float], min_reward: MinReward) -> bool:
    """Whether a step's rewards reach its min_reward: a number is held against `reward`, a table
    key by key against reward.json's keys (a key the verifier did not write is not met)."""
    if min_reward is None:
        return True
    wanted = {"reward": min_reward} if isinstance(min_reward, int | float) else min_reward
    return all(
        key in rewards and rewards[key] >= floor - TOLERANCE for key, floor in wanted.items()
    )


def trial_reward(step_rewards: Sequence[float | None], strategy: str) -> float:
    """`mean` of every step's reward, or the `final` step's; a step not run (None) counts 0."""
    scores = [0.0 if r is None else r for r in step_rewards]
    if not scores:
        return 0.0
    return scores[-1] if strategy == "final" else sum(scores) / len(scores)


def step_budget(
    trial: TrialBudget, own: tuple[int | None, int | None], spent: tuple[int, int]
) -> TrialBudget:
    """The budget for the next step: what the trial's budget has left after `spent` (tokens, turns),
    within the step's own cap `own` (None: no cap of its own)."""

    def left(total: int | None, cap: int | None, used: int) -> int | None:
        found = [x for x in (None if total is None else total - used, cap) if x is not None]
        return min(found) if found else None

    tokens, turns = left(trial.tokens, own[0], spent[0]), left(trial.turns, own[1], spent[1])
    source = {
        "tokens": trial.source.get("tokens") or ("task" if tokens is not None else None),
        "turns": trial.source.get("turns") or ("task" if turns is not None else None),
    }
    return TrialBudget(tokens, turns, source)


def budget_exhausted(budget: TrialBudget) -> bool:
    return any(x is not None and x <= 0 for x in (budget.tokens, budget.turns))


def step_view(task: Task, step: Step) -> Task:
    """The task as one step sees it: the step's prompt, [agent], [verifier] and solution."""
    return dataclasses.replace(
        task,
        instruction=step.instruction,
        agent=step.agent,
        verifier=step.verifier,
        tests_dir=step.tests_dir or task.tests_dir,
        solution_dir=step.solution_dir or task.solution_dir,
        steps=(),
    )


def step_tests_dirs(task: Task, step: Step) -> list[Path]:
    """The task's tests/ with the step's tests/ layered over it (either may be absent)."""
    return [d for d in (task.tests_dir, step.tests_dir) if d is not None and d.is_dir()]


def instruction_for(task: Task) -> str:
    """The prompt the agent gets: the task's (or step's) instruction after [agent] prompt_prefix."""
    if task.agent.prompt_prefix:
        return f"{task.agent.prompt_prefix}\n\n{task.instruction}"
    return task.instruction


# --- folders ---------------------------------------------------------------------------------


def _sizes(folder: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


def _keep_new_bytes(folder: Path, dest: Path, before: dict[Path, int]) -> None:
    """What the step added to the agent's logs (they are appended to), copied into dest."""
    for path, size in _sizes(folder).items():
        start = before.get(path, 0)
        if size <= start:
            continue
        out = dest / path.relative_to(folder)
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "rb") as src, open(out, "wb") as fh:
            src.seek(start)
            shutil.copyfileobj(src, fh)


def _copy_tree(src: Path, dest: Path) -> None:
    """A copy of src; a link planted in the sandbox is copied as a link, not followed."""
    shutil.copytree(src, dest, symlinks=True)


def _empty(folder: Path) -> None:
    """Remove what is inside a bind-mounted folder; the folder itself is the mount and stays."""
    for entry in os.scandir(folder) if folder.is_dir() else ():
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.unlink(entry.path)


# --- running ---------------------------------------------------------------------------------


def _spent(result: TrialResult) -> tuple[int, int]:
    ar = result.agent_result
    return int(ar.total_tokens or 0), int(ar.n_calls or 0)


def _trial_budget_record(result: TrialResult, trial: TrialBudget, before: tuple[int, int]) -> None:
    """Each step records its own budget and use; the trial's record counts all steps."""
    record = result.trial_budget
    if record is None or not trial.active:  # only a step's own cap: its record stands
        return
    tokens, turns = _spent(result)
    record.budget = {"tokens": trial.tokens, "turns": trial.turns}
    record.source = trial.source
    record.used = {"tokens": tokens, "turns": turns}
    if record.stopped_at:
        at = {
            "tokens": record.stopped_at["tokens"] + before[0],
            "turns": record.stopped_at["turns"] + before[1],
        }
        record.stopped_at = at
        if result.error_category == "trial_budget":
            result.error = budget_stop_text(record.stopped_by, at, trial)


def _graded(outcome: VerifierOutcome, run: AgentRun) -> dict[str, float] | None:
    """The step's rewards; an agent stopped at its limit is graded on what it left (no reward: 0)."""
    if outcome.rewards is None and run.stopped:
        if outcome.error_category in ("verifier_no_reward", None):
            return {"reward": 0.0}
    return outcome.rewards


async def run_steps(runner: StepRunner, prepared: Prepared, result: TrialResult) -> None:
    """Run a task's steps one after another in the prepared sandbox; fills result's rewards and `steps`."""
    plan, sandbox, attempt_dir = prepared.plan, prepared.sandbox, prepared.attempt_dir
    assert sandbox is not None
    task, spec = plan.task, runner.spec
    trial_budget = trial_budget_for(task, spec.token_budget, spec.turn_budget)
    staged_tests = runner.staging(attempt_dir) / "tests"
    entries = [StepRecord(s.name) for s in task.steps]
    scores: list[float | None] = [None] * len(task.steps)
    result.steps = entries
    timing = prepared.timing
    timing.agent_setup, timing.agent_execution, timing.verifier = 0.0, 0.0, 0.0

    for i, step in enumerate(task.steps):
        own = (
            None if spec.token_budget is not None else step.agent.token_budget,
            None if spec.turn_budget is not None else step.agent.turn_budget,
        )
        before = _spent(result)
        budget = step_budget(trial_budget, own, before)
        if i and budget_exhausted(budget):
            entries[i - 1].stopped_early = True
            break
        run, outcome, agent_s, verifier_s = await _run_step(runner, prepared, result, step, budget)
        # the agent was refused before it started: no reward, the error says why
        if outcome is None:
            result.rewards = None
            return
        _trial_budget_record(result, trial_budget, before)
        timing.add("agent_execution", agent_s)
        timing.add("verifier", verifier_s)
        result.verifier_exit_code = outcome.exit_code
        rewards = _graded(outcome, run)
        entry = entries[i]
        entry.ran, entry.rewards = True, rewards
        entry.reward = None if rewards is None else rewards["reward"]
        entry.verifier_error = None if rewards is not None else outcome.error
        entry.agent_timed_out = run.timed_out or run.idle_stopped
        entry.timing = {"agent_execution": round(agent_s, 3), "verifier": round(verifier_s, 3)}
        if rewards is None:
            result.rewards = None
            result.verifier_error = f"step {step.name!r}: {outcome.error}"
            result.verifier_error_category = outcome.error_category
            return
        scores[i] = rewards["reward"]
        if i == len(task.steps) - 1:
            break
        if run.budget_stopped or not meets_min_reward(rewards, step.min_reward):
            entry.stopped_early = True
            break
        # the next agent turn sees neither these tests nor their output
        await runner.call(_empty, attempt_dir / "verifier")
        await runner.call(populate, staged_tests, [])

    result.rewards = {
        "reward": trial_reward(scores, task.multi_step_reward_strategy),
        **{
            s.name: x
            for s, x in zip(task.steps, scores, strict=True)
            if x is not None and s.name != "reward"
        },
    }


async def _run_step(
    runner: StepRunner,
    prepared: Prepared,
    result: TrialResult,
    step: Step,
    budget: TrialBudget,
) -> tuple[AgentRun, VerifierOutcome | None, float, float]:
    """One step: the agent's turn, then the step's verifier; its logs kept under steps/<name>/.

    No verifier outcome when the agent was refused before it started.
    """
    plan, sandbox, attempt_dir = prepared.plan, prepared.sandbox, prepared.attempt_dir
    assert sandbox is not None
    spec, agent = runner.spec, runner.agent
    view, here = step_view(plan.task, step), attempt_dir / STEPS_DIR / step.name

    instruction = instruction_for(view)
    if files := agent.files(view, instruction):  # e.g. a script agent's instruction.md
        await runner.call(sandbox.put_files, files)
    if step.healthcheck is not None:  # beside the task's, which passed before the first step
        try:
            await runner.call(wait_healthy, sandbox, step.healthcheck, view.sandbox.workdir)
        except EnvironmentSetupError as exc:
            result.fail(f"environment setup failed: step {step.name!r}: {exc}", "environment_setup")
            return AgentRun(), None, 0.0, 0.0
    runner.emit_phase(prepared, "agent", step.name)
    sizes, t = _sizes(attempt_dir / "agent"), time.monotonic()
    run = await run_agent(
        agent=agent,
        task=view,
        instruction=instruction,
        sandbox=sandbox,
        attempt_dir=attempt_dir,
        agent_env=spec.agent_env,
        proxy=runner.proxy,
        budget=budget,
        on_tool=runner.on_tool(prepared),
        idle_timeout=spec.agent_idle_timeout,
        command=agent.command_for_step(view, step, instruction),
    )
    run.record(result)
    agent_s = time.monotonic() - t
    if run.withheld:  # e.g. a task budget its calls would bypass, or a program that cannot run
        return run, None, agent_s, 0.0
    await runner.call(_keep_new_bytes, attempt_dir / "agent", here / "agent", sizes)
    if spec.save_outputs and prepared.workdir:
        # each step saves over the last: the trial keeps what its last agent turn left
        shutil.rmtree(attempt_dir / EVIDENCE, ignore_errors=True)
        await runner.call(save_workspace, sandbox, prepared.workdir, attempt_dir)

    runner.emit_phase(prepared, "verifier", step.name)
    t = time.monotonic()
    staged_tests = runner.staging(attempt_dir) / "tests"
    tests_dirs = step_tests_dirs(plan.task, step)
    async with runner.judged(prepared, view, result) as judge:
        outcome = await run_verifier(
            sandbox,
            view,
            attempt_dir,
            tests_dirs=tests_dirs,
            staged_tests=staged_tests,
            judge=judge,
        )
    verifier_s = time.monotonic() - t
    await runner.call(_copy_tree, attempt_dir / "verifier", here / "verifier")
    await runner.call(collect, sandbox, step.artifacts, here / "artifacts")
    return run, outcome, agent_s, verifier_s
