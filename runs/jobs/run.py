"""A job from start to end: choose or resume the folder, plan, run the coordinator, summarise."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runs.agents.base import Agent
from runs.gateway import ModelGateway
from runs.index import Index, outcome_of
from runs.jobfolder import JobLock, latest_auto_job, read_json, unique_job_dir, write_json
from runs.jobs.budgets import JobBudget, caps_card_line, per_trial_card_line
from runs.jobs.console import Reporter
from runs.jobs.coordinator import Coordinator, TrialPlan, job_line, remove_all
from runs.results import attempts as attempt_results
from runs.results import summary as job_summary
from runs.results import summary_render
from runs.sandboxes.docker import Sandbox, SandboxFactory, reap_orphans
from runs.spec import RESUME_KEYS, RunSpec
from runs.tasks.load import Task, environment_digest
from runs.trials.agent_run import uses_proxy
from runs.trials.attempt import AttemptRunner

SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143}


@dataclass
class JobChoice:
    job_dir: Path
    resumed: bool
    messages: list[str] = field(default_factory=list)


def shown(path: Path) -> str:
    """Paths in messages: as the user gave them, with ./ before a relative one."""
    text = str(path)
    return text if path.is_absolute() or text.startswith(".") else f"./{text}"


def _mismatch(recorded: dict[str, Any], spec: RunSpec) -> str | None:
    current = spec.recorded()
    for key in RESUME_KEYS:
        old, new = recorded.get(key), current.get(key)
        if key == "tasks_dir" and old and new and Path(old).resolve() == Path(new).resolve():
            continue
        if old != new:
            return f"ran {key}={old!r} (this run: {new!r})"
    return None


def choose_job(spec: RunSpec) -> JobChoice:
    """--job NAME, --fresh, or the latest job in --jobs-dir when its settings match."""
    jobs_dir = spec.jobs_dir
    resume_note = (
        "(finished tasks are reused; pass a new job_name, or --fresh on the CLI, for a new run)"
    )
    if spec.job:
        job_dir = jobs_dir / spec.job
        if (job_dir / "evaluation.json").is_file():
            return JobChoice(
                job_dir, True, [f"Resuming into existing job directory: {spec.job} {resume_note}"]
            )
        return JobChoice(job_dir, False)
    if spec.fresh:
        return JobChoice(unique_job_dir(jobs_dir), False)
    latest = latest_auto_job(jobs_dir)
    if latest is None:
        return JobChoice(unique_job_dir(jobs_dir), False)
    try:
        recorded = read_json(latest / "evaluation.json")
    except (OSError, ValueError):
        return JobChoice(unique_job_dir(jobs_dir), False)
    why = _mismatch(recorded, spec)
    if why is None:
        return JobChoice(
            latest, True, [f"Resuming into existing job directory: {latest.name} {resume_note}"]
        )
    new = unique_job_dir(jobs_dir)
    return JobChoice(
        new,
        False,
        [
            f"Starting a new job {new.name}: the latest job in {jobs_dir} ({latest.name}) {why}. "
            f"Its results stay in their own job; bench eval resume {jobs_dir / latest.name} finishes it with its own settings."
        ],
    )


def budget_block(budgets: dict[int, JobBudget], c: Coordinator) -> dict[str, Any]:
    """summary.json's budget: the job's, or with --trials the repeats' together (each had its own cap)."""
    if len(budgets) == 1:
        return next(iter(budgets.values())).summary_block(
            c.cancelled, c.not_started, c.retries_stopped
        )
    blocks = {i: b.summary_block([], []) for i, b in sorted(budgets.items())}
    first = next(iter(blocks.values()))
    spent = {k: sum(b["spent"][k] for b in blocks.values()) for k in first["spent"]}
    reasons = [f"repeat {i}: {b['reason']}" for i, b in blocks.items() if b["reason"]]
    return {
        "caps": first["caps"],
        "spent": spent,
        "stopped": any(b["stopped"] for b in blocks.values()),
        "reason": "; ".join(reasons) or None,
        "cancelled": list(c.cancelled),
        "not_started": list(c.not_started),
        "retries_stopped": list(c.retries_stopped),
        "per_repeat": {
            str(i): {"spent": b["spent"], "stopped": b["stopped"], "reason": b["reason"]}
            for i, b in blocks.items()
        },
    }


def trial_names(task: Task, trials: int) -> list[tuple[int, str]]:
    return [(i, task.name if i == 0 else f"{task.name}#{i}") for i in range(trials)]


@dataclass
class Plan:
    total: int  # trials planned (tasks x repeats)
    done: dict[str, dict[str, Any]]  # trial_name -> best (scored) earlier result
    waves: list[list[TrialPlan]]
    # (repeat, result) of every earlier attempt; for one cancelled while it ran (no result.json): the
    # timing.json of one a job cap cancelled (`cancelled_by`, what its agent spent), else its seconds
    earlier: list[tuple[int, dict[str, Any] | float | None]]

    @property
    def to_run(self) -> int:
        return sum(len(w) for w in self.waves)


def _without_result(attempt: attempt_results.Attempt) -> dict[str, Any] | float | None:
    """An attempt cancelled while it ran wrote timing.json, not result.json: a job cap's cancel with
    what its agent spent, else just its seconds."""
    if attempt.budget_cancelled:
        return attempt.timing
    try:
        return float((attempt.timing or {})["total"])
    except (ValueError, KeyError, TypeError):
        return None


def plan_job(job_dir: Path, tasks: list[Task], trials: int) -> Plan:
    """Tasks x repeats, minus the trials whose best attempt has a reward (even 0)."""
    by_trial: dict[str, list[attempt_results.Attempt]] = {}
    for attempt in attempt_results.read_attempts(job_dir) if job_dir.is_dir() else []:
        by_trial.setdefault(attempt.trial_name, []).append(attempt)
    earlier = [
        (a.trial_index, a.result if a.result is not None else _without_result(a))
        for attempts in by_trial.values()
        for a in attempts
    ]
    done: dict[str, dict[str, Any]] = {}
    waves: list[list[TrialPlan]] = [[] for _ in range(trials)]
    for task in tasks:
        digest = environment_digest(task) if task.environment_dir else ""
        for index, name in trial_names(task, trials):
            attempts = by_trial.get(name, [])
            best = attempt_results.best_attempt(attempts) if attempts else None
            if (
                best is not None
                and best.result is not None
                and outcome_of(best.result) in ("passed", "failed")
            ):
                done[name] = best.result
                continue
            finished_before = any(a.result is not None for a in attempts)
            waves[index].append(
                TrialPlan(task, index, name, digest, len(attempts), finished_before)
            )
    return Plan(len(tasks) * trials, done, [w for w in waves if w], earlier)


def best_results(job_dir: Path) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """trial_name -> its best attempt's result (the same rule as resume and bench results), and the
    timing.json records of every attempt a job cap cancelled (what their agents spent); a trial whose
    every attempt a cap cancelled has no best result: it was kept from running."""
    by_trial: dict[str, list[attempt_results.Attempt]] = {}
    cancelled = []
    for attempt in attempt_results.read_attempts(job_dir):
        by_trial.setdefault(attempt.trial_name, []).append(attempt)
        if attempt.budget_cancelled and attempt.timing is not None:
            cancelled.append(attempt.timing)
    best = {}
    for name, attempts in by_trial.items():
        chosen = attempt_results.best_attempt(attempts)
        if chosen.result is not None:
            best[name] = chosen.result
    return best, cancelled


class JobRun:
    """Everything one `bench run` holds while the job runs."""

    def __init__(
        self,
        spec: RunSpec,
        tasks: list[Task],
        agent: Agent,
        reporter: Reporter,
        client: Any,
        gateway: ModelGateway | None = None,
    ):
        self.spec, self.tasks, self.agent, self.reporter, self.client = (
            spec,
            tasks,
            agent,
            reporter,
            client,
        )
        self.gateway = gateway
        self.live: set[Sandbox] = set()
        self.index = Index()
        self.signals: list[str] = []
        self.coordinator: Coordinator | None = None
        self._progress_at: dict[str, float] = {}

    def execute(self) -> int:
        choice = choose_job(self.spec)
        job_dir = choice.job_dir
        job_dir.mkdir(parents=True, exist_ok=True)
        lock = JobLock(job_dir)
        lock.acquire()
        try:
            # uvloop: the model proxy shares this loop, and its figures are uvloop's.
            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                return runner.run(self._run(choice))
        finally:
            lock.release()
            self.index.close()

    async def _run(self, choice: JobChoice) -> int:
        spec, reporter, job_dir = self.spec, self.reporter, choice.job_dir
        loop = asyncio.get_running_loop()
        loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(
                max_workers=max(16, 3 * (spec.concurrency + spec.warm_pool) + 4)
            )
        )
        for msg in choice.messages:
            reporter.line(msg)
        await loop.run_in_executor(None, reap_orphans, self.client)
        plan = plan_job(job_dir, self.tasks, spec.trials)
        settings = {
            **spec.recorded(),
            "plan": [t.name for t in self.tasks],
            "job_name": job_dir.name,
        }
        if not (job_dir / "evaluation.json").is_file():
            settings["created_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
            write_json(job_dir / "evaluation.json", settings)
        self.index.open_job(job_dir, settings)

        budgets: dict[int, JobBudget] = {}

        def budget_for(repeat: int) -> JobBudget:
            """With --trials each repeat is a job with its own cap; everything it spent before counts."""
            if repeat not in budgets:
                budgets[repeat] = JobBudget(**spec.budget_caps(), warn=reporter.warn)
                budgets[repeat].seed(r for i, r in plan.earlier if i == repeat or spec.trials == 1)
            return budgets[repeat]

        budget = budget_for(0)
        factory = SandboxFactory(self.client, job_dir.name)
        proxy = await self._start_proxy()
        runner = AttemptRunner(spec, self.agent, factory, job_dir, self._on_event, self.live, proxy)
        coordinator = Coordinator(
            runner,
            spec.concurrency,
            spec.warm_pool,
            spec.retry_attempts,
            budget,
            reporter.line,
            progress=not spec.quiet,
            uses_model=proxy is not None,
            in_flight=proxy.in_flight if proxy is not None else (lambda _key: 0),
        )
        self.coordinator = coordinator
        reporter.line(
            job_line(plan.total, len(plan.done), plan.to_run, spec.concurrency, spec.warm_pool)
        )
        card = [
            line
            for line in (
                caps_card_line(spec.budget_caps()),
                per_trial_card_line(
                    spec.token_budget,
                    spec.turn_budget,
                    [(t.agent.token_budget, t.agent.turn_budget) for t in self.tasks],
                ),
            )
            if line
        ]
        if card:
            reporter.line(
                f"Run card: {spec.agent}" + (f", model {spec.model}" if spec.model else "")
            )
            for line in card:
                reporter.line(line)
        for name in ("SIGINT", "SIGTERM"):
            loop.add_signal_handler(getattr(signal, name), self._on_signal, name)
        reporter.start_live(self._live_rows, lambda: self._counts(plan))
        t0 = time.monotonic()
        try:
            await coordinator.run(plan.waves, budget_for)
        finally:
            reporter.stop_live()
            await runner.drain()
            await remove_all(self.live)
            runner.remove_never_started()
            if proxy is not None:
                await proxy.stop()
        stopped = coordinator.stopped_running
        elapsed = time.monotonic() - t0
        return self._finish(
            job_dir, plan, budgets, coordinator, elapsed, stopped, resumed=choice.resumed
        )

    async def _start_proxy(self) -> ModelGateway | None:
        """The model gateway, in this loop, when the agent calls a model."""
        if hasattr(self.agent, "model"):  # a Claude login too is told its model
            self.agent.model = self.spec.model or ""
        if not uses_proxy(self.agent, self.spec.model) or self.gateway is None:
            return None
        port = await self.gateway.start()
        self.agent.proxy_url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
        return self.gateway

    def _on_signal(self, name: str) -> None:
        self.signals.append(name)
        if len(self.signals) == 1:
            self.reporter.warn(f"{name}: stopping the running trials and removing their sandboxes…")
            if self.coordinator is not None:
                self.coordinator.interrupt()
        elif len(self.signals) >= 3:
            os._exit(SIGNAL_EXIT.get(self.signals[0], 1))
        # a second signal during clean-up is ignored

    def _on_event(self, kind: str, **data: Any) -> None:
        plan = data["plan"]
        if kind == "attempt_created":
            self.index.attempt_created(
                plan.trial_name,
                plan.task.name,
                plan.trial_index,
                data["attempt_dir"].name,
                plan.attempt,
            )
        elif kind == "attempt_finished":
            self.index.attempt_finished(data["result"], None)
        elif (
            kind == "attempt_cancelled"
        ):  # by a job cap or a signal: not left "running" in the index
            self.index.attempt_cancelled(plan.trial_name, data["attempt_dir"].name)
        elif kind == "tool_call" and self.coordinator is not None:
            rollout = data["attempt_dir"].name
            self.coordinator.note_tool_call(rollout, data["title"])
            run = self.coordinator.running.get(rollout)
            now = time.monotonic()
            if run is not None and now - self._progress_at.get(rollout, 0.0) >= 1.0:
                # the dashboard's progress line: at most one row write a second per attempt
                self._progress_at[rollout] = now
                self.index.phase_changed(plan.trial_name, rollout, run.phase, run.tool_calls)
        elif kind == "phase" and self.coordinator is not None:
            rollout = data["attempt_dir"].name
            self.coordinator.note_phase(rollout, data["phase"])
            run = self.coordinator.running.get(rollout)
            self.index.phase_changed(
                plan.trial_name, rollout, data["phase"], run.tool_calls if run else 0
            )

    def _live_rows(self) -> list[tuple[str, str, float, int, str]]:
        if self.coordinator is None:
            return []
        now = time.monotonic()
        return [
            (r.plan.trial_name, r.phase, now - r.started, r.tool_calls, r.last_tool or "")
            for r in self.coordinator.running.values()
        ]

    def _counts(self, plan: Plan) -> str:
        c = self.coordinator
        results = c.results if c else []
        passed = sum(1 for r in results if outcome_of(r) == "passed")
        failed = sum(1 for r in results if outcome_of(r) == "failed")
        errored = len(results) - passed - failed
        running = len(c.running) if c else 0
        return f"{len(plan.done) + passed + failed}/{plan.total} scored · {passed} passed · {failed} failed · {errored} errored · {running} running"

    def _finish(
        self,
        job_dir: Path,
        plan: Plan,
        budgets: dict[int, JobBudget],
        c: Coordinator,
        elapsed: float,
        stopped: int,
        *,
        resumed: bool,
    ) -> int:
        spec, reporter = self.spec, self.reporter
        best, cancelled = best_results(job_dir)
        kept_out = [n for n in c.not_started + c.cancelled if n not in best]
        summary = job_summary.build_summary(
            job_name=job_dir.name,
            results=list(best.values()),
            settings=spec.recorded(),
            plan_total=plan.total,
            not_run=kept_out,
            budget=budget_block(budgets, c) if spec.has_job_cap() else None,
            elapsed_sec=elapsed,
            n_attempts=len(plan.earlier) + len(c.results),
            job_dir=str(job_dir),
            cancelled=cancelled,
        )
        write_json(job_dir / "summary.json", summary)
        write_json(spec.jobs_dir / "summary.json", summary)
        interrupted = bool(self.signals)
        self.index.finish_job(summary, "interrupted" if interrupted else "finished")
        if interrupted:
            name = self.signals[0]
            word = "Interrupted" if name == "SIGINT" else "Terminated"
            if stopped == 0:
                what = "no trial was running."
            elif stopped == 1:
                what = "stopped 1 running trial and removed its sandbox."
            else:
                what = f"stopped {stopped} running trials and removed their sandboxes."
            reporter.line(f"{word} ({name}): {what}")
            reporter.line(f"Partial summary (what finished): {shown(job_dir / 'summary.json')}")
            reporter.line(f"Resume with: bench eval resume {shown(job_dir)}")
            return SIGNAL_EXIT[name]
        reporter.line(summary_render.job_complete_line(summary, plan.total, elapsed))
        if after := summary_render.trial_budget_card_line(summary):
            reporter.line("Run card, after the run:")
            reporter.line(after)
        reporter.line("")
        for line in summary_render.render_final_block(
            summary, job_dir, reused=len(plan.done), elapsed_s=elapsed, color=reporter.tty
        ):
            reporter.line(line)
        if resumed:
            ran = len({r["trial_name"] for r in c.results})
            if kept_out:
                why = "budget" if spec.has_job_cap() else "stopped"
                reporter.warn(
                    f"Resumed job {job_dir}: {len(plan.done)} finished task(s) reused, {ran} ran now, "
                    f"{len(kept_out)} kept from running ({why}). Pass --fresh (or a new --job) for a new run."
                )
            elif ran == 0:
                reporter.warn(
                    f"Resumed job {job_dir}: all {len(plan.done)} task(s) were already finished, so nothing ran "
                    "and these are the earlier results. Pass --fresh (or a new --job) for a new run."
                )
            else:
                reporter.warn(
                    f"Resumed job {job_dir}: {len(plan.done)} finished task(s) reused, {ran} ran now. "
                    "Pass --fresh (or a new --job) for a new run."
                )
        errored = (summary.get("errored") or 0) + (summary.get("verifier_errored") or 0)
        return 1 if errored else 0


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; asyncio's loop also works
        return None
    return uvloop.new_event_loop
