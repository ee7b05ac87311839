"""The coordinator: one per job; starts attempts while -j slots are free and the budget allows.

A warm pool prepares up to N sandboxes ahead of their turn; retries follow the error table;
a signal cancels the running attempts and removes their sandboxes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from runs import errors
from runs import events as ev
from runs.jobfolder import machine_error
from runs.jobs.budgets import JobBudget
from runs.jobs.console import effective_warm_pool
from runs.jobs.utilization import Sample, Utilization
from runs.results.trial_result import TrialResult
from runs.sandboxes.docker import Sandbox
from runs.trials.attempt import AttemptPlan, Prepared

HEARTBEAT_S = 45.0


class Runner(Protocol):
    """What runs attempts for the coordinator: runs.trials.attempt.AttemptRunner in process,
    runs.workers.dispatch.RemoteRunner on workers."""

    async def prepare(self, plan: AttemptPlan) -> Prepared: ...

    async def run(self, prepared: Prepared) -> TrialResult: ...

    def discard(self, prepared: Prepared) -> None: ...


@dataclass
class TrialPlan:
    """A trial still to run: a task and which repeat, plus how many attempts it already had."""

    task: Any  # runs.tasks.load.Task
    trial_index: int
    trial_name: str
    env_digest: str
    previous_attempts: int = 0
    finished_before: bool = False  # an earlier run gave it a finished attempt (a result.json)


@dataclass
class Running:
    plan: AttemptPlan
    started: float
    prepared: Prepared | None = None
    phase: str = "setup"
    last_beat: float = 0.0
    tool_calls: int = 0
    last_tool: str | None = None
    usage: tuple[int, int] = (0, 0)  # (turns, tokens) last said in a UsageCounted event


@dataclass
class Coordinator:
    runner: Runner
    concurrency: int
    warm_pool: int
    retry_attempts: int
    budget: JobBudget
    emit: Callable[[ev.Event], None]
    results: list[TrialResult] = field(default_factory=list)
    running: dict[str, Running] = field(default_factory=dict)
    stopping: bool = False
    not_started: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    # errored trials whose retry the budget kept from running or cancelled: their last attempt counts
    retries_stopped: list[str] = field(default_factory=list)
    stopped_running: int = 0  # running attempts cancelled (a cap or a signal), retries included
    _finished: set[str] = field(default_factory=set)  # trials with a finished attempt in this run
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _breaker: errors.CircuitBreaker = field(default_factory=errors.CircuitBreaker)
    _announced: bool = False
    in_flight: Callable[[str], int] = lambda _rollout: 0  # model requests in flight, from the proxy
    usage_of: Callable[[str], Any] = lambda _rollout: None  # what the proxy counted so far
    uses_model: bool = False
    waiting: int = 0

    async def run(
        self, waves: list[list[TrialPlan]], budget_for: Callable[[int], JobBudget] | None = None
    ) -> list[TrialResult]:
        """Run each wave (one per --trials repeat) in turn, -j at a time; each repeat has its own cap."""
        beat = asyncio.create_task(self._heartbeat())
        try:
            for wave in waves:
                if budget_for is not None:
                    self.budget, self._announced = budget_for(wave[0].trial_index), False
                if self.budget.reached:  # spent before this run (a resume): stops at once
                    self._announce_budget()
                if self.stopping or self.budget.reached:
                    for t in wave:
                        self._kept_from_running(t)
                    continue
                await self._run_wave(wave)
        finally:
            beat.cancel()
        return self.results

    async def _run_wave(self, wave: list[TrialPlan]) -> None:
        self.waiting += len(wave)
        run_slots = asyncio.Semaphore(self.concurrency)
        sandbox_slots = asyncio.Semaphore(
            self.concurrency + effective_warm_pool(self.warm_pool, self.concurrency)
        )
        for trial in wave:
            task = asyncio.create_task(self._trial(trial, run_slots, sandbox_slots))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        watcher = asyncio.create_task(self._watch_budget())
        try:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        finally:
            watcher.cancel()

    async def _trial(
        self, trial: TrialPlan, run_slots: asyncio.Semaphore, sandbox_slots: asyncio.Semaphore
    ) -> None:
        try:
            await self._attempts(trial, run_slots, sandbox_slots)
        except asyncio.CancelledError:
            # cancelled before its agent ran (waiting for admission, a slot, its sandbox or a retry's
            # backoff): kept from running
            self._kept_from_running(trial)
            raise
        except Exception as exc:
            # the machine's fault, not the task's (a full disk, a read-only file system, too many
            # open files): the job stops as on a signal, and this trial counts as not run
            if (err := machine_error(exc)) is None:
                raise
            if self.machine_error is None:
                self.machine_error = err
                self.interrupt()
            self._kept_from_running(trial)

    async def _attempts(
        self, trial: TrialPlan, run_slots: asyncio.Semaphore, sandbox_slots: asyncio.Semaphore
    ) -> None:
        attempt = trial.previous_attempts + 1
        retries_left = self.retry_attempts
        first = True
        while True:
            async with sandbox_slots:
                admitted = not (self.stopping or self._breaker.open) and await self.budget.admit(
                    lambda: len(self.running)
                )
                if first:
                    self.waiting -= 1
                    first = False
                if not admitted:
                    self._announce_budget()
                    self._kept_from_running(trial)
                    return
                plan = AttemptPlan(
                    trial.task, trial.trial_name, trial.trial_index, attempt, trial.env_digest
                )
                prepared: Prepared | None = None
                started = False
                try:
                    prepared = await self.runner.prepare(plan)
                    async with run_slots:
                        if (self.stopping or self.budget.reached) and not prepared.running:
                            self._never_started(prepared)
                            self._kept_from_running(trial)
                            return
                        started = True
                        prepared.begin()  # its clock starts with its slot, not while it waited for one
                        if self.budget.on_start():  # the rollout cap is checked at each start
                            self._announce_budget()
                        result = await self._run_prepared(prepared, trial)
                except asyncio.CancelledError:
                    if not started:  # cancelled while its sandbox was prepared or waited for a slot
                        self._never_started(prepared)
                    raise
            document = result.to_json()
            self._breaker.record(document)
            retry = retries_left > 0 and errors.should_retry(document) and not self.stopping
            if retry and self.budget.reached:
                # no retry starts after the cap: its last attempt counts
                self._kept_from_running(trial)
            elif retry:
                retries_left -= 1
                wait = errors.backoff_seconds(attempt)
                preview = (result.error or result.verifier_error or "")[:60]
                self.emit(ev.RetryScheduled(trial.trial_name, attempt + 1, preview, wait))
                attempt += 1
                await asyncio.sleep(wait)
                continue
            return

    def _never_started(self, prepared: Prepared | None) -> None:
        """An admitted attempt that never took its slot: no rollout; its sandbox and folder go."""
        self.budget.on_discard(started=False)
        if prepared is not None:
            self.runner.discard(prepared)

    async def _run_prepared(self, prepared: Prepared, trial: TrialPlan) -> TrialResult:
        key = prepared.attempt_dir.name
        self.running[key] = Running(
            prepared.plan, prepared.t0, prepared, last_beat=time.monotonic()
        )
        try:
            result = await self.runner.run(prepared)
        except asyncio.CancelledError:
            self.stopped_running += 1
            if self._has_finished(trial):
                self._kept_from_running(trial)
            else:
                self.cancelled.append(trial.trial_name)
            # what it spent before the cap cancelled it counts
            if prepared.cancelled_record is not None:
                self.budget.on_cancelled(prepared.cancelled_record)
            else:
                self.budget.on_discard()
            raise
        finally:
            self.running.pop(key, None)
        self.results.append(result)
        self._finished.add(trial.trial_name)
        if self.budget.on_finish(result.to_json()):
            self._announce_budget()
        name = prepared.plan.trial_name
        if result.agent_oom_killed:
            memory = prepared.plan.task.sandbox.memory_mb
            self.emit(ev.AgentOutOfMemory(name, key, memory))
        self.emit(ev.AttemptFinished(name, key, result))
        return result

    def _announce_budget(self) -> None:
        """The `budget reached: ...; stopping: ...` line, once; spend caps cancel the running trials."""
        if not self.budget.reached or self._announced:
            return
        self._announced = True
        cancel = self.budget.cancels_running()
        others = [t for t in self._tasks if t is not asyncio.current_task()]
        self.emit(self.budget.reached_event(running=len(self.running)))
        if cancel:
            for run in self.running.values():
                if run.prepared is not None:  # its timing.json says the cap cancelled it
                    run.prepared.cancelled_by = self.budget.reason
            for task in others:
                task.cancel()

    def _has_finished(self, trial: TrialPlan) -> bool:
        return trial.finished_before or trial.trial_name in self._finished

    def _kept_from_running(self, trial: TrialPlan) -> None:
        """A trial with a finished attempt counts by its last one (an errored trial, not "not started");
        one with none is listed apart as not started, unless it was cancelled while it ran."""
        name = trial.trial_name
        if self._has_finished(trial):
            if self.budget.reached and name not in self.retries_stopped:
                self.retries_stopped.append(name)
        elif name not in self.not_started and name not in self.cancelled:
            self.not_started.append(name)

    def observe(self, event: ev.Event) -> None:
        """The bus subscriber: a running attempt's phase and tool calls, for heartbeats and display."""
        if isinstance(event, ev.ToolCalled) and (run := self.running.get(event.rollout_name)):
            run.tool_calls += 1
            run.last_tool = event.title
        elif isinstance(event, ev.PhaseChanged) and (run := self.running.get(event.rollout_name)):
            run.phase = event.phase

    async def _heartbeat(self) -> None:
        """Each second: a heartbeat per trial running 45 s since its last, usage counted, utilization."""
        util = Utilization(self.concurrency, started=time.monotonic())
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            runs = list(self.running.items())
            in_agent = [key for key, run in runs if run.phase == "agent"]
            flights = [self.in_flight(key) for key in in_agent] if self.uses_model else []
            util.add(
                Sample(
                    len(runs) - len(in_agent),
                    len(in_agent),
                    max(self.waiting, 0),
                    sum(flights),
                    sum(1 for f in flights if f),
                )
            )
            for key, run in runs:
                if now - run.last_beat >= HEARTBEAT_S:
                    run.last_beat = now
                    self.emit(
                        ev.Heartbeat(
                            run.plan.trial_name,
                            key,
                            now - run.started,
                            run.tool_calls,
                            run.last_tool,
                        )
                    )
            if self.uses_model:
                self._usage(in_agent)
            if util.due(now) and (report := util.report(now, self.uses_model)) is not None:
                self.emit(report)

    def _usage(self, keys: list[str]) -> None:
        """What the proxy counted for each running agent, said when it changed."""
        for key in keys:
            run, u = self.running.get(key), self.usage_of(key)
            if run is None or u is None or (u.turns, u.total_tokens) == run.usage:
                continue
            run.usage = (u.turns, u.total_tokens)
            self.emit(
                ev.UsageCounted(
                    run.plan.trial_name,
                    key,
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_read_tokens,
                    u.total_tokens,
                    u.turns,
                    u.cost_usd,
                )
            )

    async def _watch_budget(self) -> None:
        """The sandbox-seconds cap counts running trials: checked every 0.2 s, it cancels them."""
        while True:
            await asyncio.sleep(0.2)
            now = time.monotonic()
            if self.budget.check_running([now - r.started for r in self.running.values()]):
                self._announce_budget()
                return

    def cancel_running(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    machine_error: OSError | None = None  # what stopped the job, when the machine did

    def interrupt(self) -> None:
        """A signal: start nothing more and cancel what runs."""
        self.stopping = True
        self.cancel_running()


async def remove_all(sandboxes: set[Sandbox]) -> int:
    """Remove every sandbox still standing (after a signal); returns how many."""
    loop = asyncio.get_running_loop()
    items = list(sandboxes)
    await asyncio.gather(
        *(loop.run_in_executor(None, s.remove) for s in items), return_exceptions=True
    )
    sandboxes.clear()
    return len(items)
