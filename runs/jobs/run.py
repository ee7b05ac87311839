"""A job from start to end: choose or resume the folder, plan, run the coordinator, summarise.

Everything that happens is emitted as a typed event on the job's bus (runs/events.py): the console
reporter, the database index and the coordinator itself are its subscribers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runs import events as ev
from runs import secrets
from runs.agents.base import Agent
from runs.gateway import ModelGateway
from runs.host_env import NO_HOST_ENV, HostEnv
from runs.jobfolder import (
    CANCEL_REQUEST,
    MACHINE_ERRNOS,
    JobLock,
    free_bytes,
    machine_error,
    read_object,
    write_json,
)
from runs.jobs.budgets import JobBudget
from runs.jobs.console import Reporter
from runs.jobs.coordinator import Coordinator, remove_all
from runs.jobs.plan import (
    JobChoice,
    Plan,
    best_results,
    choose_job,
    created_now,
    job_settings,
    plan_job,
    record_redo,
    set_aside,
)
from runs.problems import UserError
from runs.results import summary as job_summary
from runs.review.auto import AutoReview
from runs.sandboxes.docker import Sandbox, SandboxFactory
from runs.sandboxes.owners import reap_orphans
from runs.spec import RunSpec
from runs.tasks.load import Task
from runs.trials.attempt import AttemptRunner
from runs.trials.judge import needs_judge
from runs.workers import coordination
from runs.workers.channel import Channel
from runs.workers.choose import ScaleOut
from runs.workers.dispatch import RemoteRunner
from runs.workers.sealed import Sealed

SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143}


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
        bus: ev.Bus | None = None,
        scale_out: ScaleOut | None = None,
        host: HostEnv = NO_HOST_ENV,
    ):
        self.spec, self.tasks, self.agent, self.reporter, self.client = (
            spec,
            tasks,
            agent,
            reporter,
            client,
        )
        self.gateway = gateway
        self.scale_out = scale_out  # the attempts run on `bench worker` processes
        self.host = host  # what the tasks' ${VAR}s read here: its workers get it sealed
        self.bus = bus or ev.Bus(reporter)
        self.live: set[Sandbox] = set()
        self.signals: list[str] = []
        self.coordinator: Coordinator | None = None
        self.reviews: AutoReview | None = None
        self.on_server = False  # launched from bench serve (check_run's): so are its reviewers
        self.machine_stopped = False  # a full disk (or the like) stopped the job
        self.remaining = len(tasks) * spec.trials  # trials not done yet (known once planned)

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
        except Exception as exc:
            if (err := machine_error(exc)) is None:
                raise
            raise machine_stop(job_dir, err, self.remaining) from None
        finally:
            lock.release()

    async def _run(self, choice: JobChoice) -> int:
        spec, bus, job_dir = self.spec, self.bus, choice.job_dir
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_quiet_machine_errors)
        loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(
                max_workers=max(16, 3 * (spec.concurrency + spec.warm_pool) + 4)
            )
        )
        bus.emit(choice.event(spec.jobs_dir))
        await loop.run_in_executor(None, reap_orphans, self.client)
        settings = job_settings(spec, self.tasks, job_dir.name)
        if not (job_dir / "evaluation.json").is_file():
            settings["created_at"] = created_now()
            write_json(job_dir / "evaluation.json", settings)
        if spec.redo:
            record_redo(job_dir, spec.redo)
        remote, adopted = await self._open_remote(job_dir, spec)
        plan = plan_job(
            job_dir,
            self.tasks,
            spec.trials,
            set_aside(read_object(job_dir / "evaluation.json") or {}),
            running=frozenset(adopted),
        )

        budgets: dict[int, JobBudget] = {}

        def budget_for(repeat: int) -> JobBudget:
            """With --trials each repeat is a job with its own cap; everything it spent before counts."""
            if repeat not in budgets:
                budgets[repeat] = JobBudget(**spec.budget_caps(), emit=bus.emit)
                budgets[repeat].seed(r for i, r in plan.earlier if i == repeat or spec.trials == 1)
            return budgets[repeat]

        budget = budget_for(0)
        judges: ModelGateway | None = None
        runner: AttemptRunner | RemoteRunner
        in_flight: Callable[[str], int]
        usage_of: Callable[[str], Any]
        if remote is not None:  # the workers serve the model proxy for the attempts they run
            # the warm pool is the workers': each prepares sandboxes ahead of its own free slots
            # and starts one the moment a slot frees, while fewer than -j of the job's run (the
            # database holds them to it); up to -j minus 1 leases are queued ahead for that
            proxy, runner, warm = None, remote, spec.concurrency
            uses_model = self.agent.calls_proxy() and self.gateway is not None
            in_flight, usage_of = remote.in_flight, remote.usage
        else:
            factory = SandboxFactory(self.client, job_dir.name, str(job_dir.resolve()))
            proxy, agent = await self._start_proxy()
            judges = await self._judge_gateway(proxy)
            runner = AttemptRunner(
                spec, agent, factory, job_dir, bus.emit, self.live, proxy, judges
            )
            warm, uses_model = spec.warm_pool, proxy is not None
            in_flight = proxy.in_flight if proxy is not None else (lambda _key: 0)
            usage_of = proxy.usage if proxy is not None else (lambda _key: None)
        coordinator = Coordinator(
            runner,
            spec.concurrency,
            warm,
            spec.retry_attempts,
            budget,
            bus.emit,
            uses_model=uses_model,
            in_flight=in_flight,
            usage_of=usage_of,
        )
        self.coordinator = coordinator
        bus.subscribe(coordinator.observe)
        # the automatic rubric review: each verified attempt of a task shipping a rubric is
        # reviewed as it finishes, while the other trials run; the summary waits for them
        reviews = AutoReview.for_job(spec, job_dir, self.tasks, bus.emit, self.on_server)
        self.reviews = reviews
        if reviews is not None:
            bus.subscribe(reviews.observe)
            reviews.resume_pending()
        bus.emit(
            ev.JobStarted(
                job_dir.name,
                str(job_dir),
                settings,
                plan.total,
                len(plan.done),
                plan.to_run,
                spec.concurrency,
                warm,
                tuple(t.trial_name for wave in plan.waves for t in wave),
                tuple((t.agent.token_budget, t.agent.turn_budget) for t in self.tasks),
            )
        )
        if self.scale_out is not None:
            bus.emit(self.scale_out.chosen(adopted_trials(remote, adopted)))
        for name in ("SIGINT", "SIGTERM"):
            loop.add_signal_handler(getattr(signal, name), self._on_signal, name)
        self.reporter.terminal.start_live(self._live_rows, lambda: self._counts(plan))
        t0 = time.monotonic()
        asked = asyncio.create_task(self._cancel_requested(job_dir))
        try:
            await coordinator.run(plan.waves, budget_for)
        finally:
            asked.cancel()
            self.reporter.terminal.stop_live()
            await runner.drain()
            await remove_all(self.live)
            runner.remove_never_started()
            if proxy is not None:
                await proxy.stop()
            elif judges is not None:
                await judges.stop()
            if remote is not None:
                await remote.close()
            if reviews is not None:
                await reviews.drain()
        finished = {r.trial_name for r in coordinator.results if r.reward is not None}
        self.remaining = max(0, plan.total - len(plan.done) - len(finished))
        if (err := coordinator.machine_error) is not None:
            # stopped by the machine: running trials stopped, sandboxes removed; a partial summary
            # when it fits, then the one line that says what to free and how to go on
            self.machine_stopped = True
            try:
                self._finish(choice, plan, budgets, coordinator, time.monotonic() - t0)
            except Exception as exc:
                if machine_error(exc) is None:
                    raise
            raise err
        return self._finish(choice, plan, budgets, coordinator, time.monotonic() - t0)

    async def _open_remote(
        self, job_dir: Path, spec: RunSpec
    ) -> tuple[RemoteRunner | None, list[str]]:
        """In process: none, after making sure no worker still runs an attempt of this job (a
        resume must not run it twice). On workers: the runner, and the rollouts an earlier run
        left running on workers, which this run takes over."""
        loop = asyncio.get_running_loop()
        if self.scale_out is None:
            if elsewhere := await loop.run_in_executor(None, running_elsewhere, job_dir):
                raise UserError(
                    f"attempts of {job_dir.name} still run on workers ({', '.join(elsewhere[:5])}); "
                    "fix: resume it with BENCHFLOW_REDIS_URL set and a `bench worker` up, or wait "
                    "until they end"
                )
            return None, []
        s = self.scale_out
        secret = {k: spec.agent_env[k] for k in secrets.secret_keys(spec.agent_env)}
        sealed = Sealed(agent_env=secret, host_env=dict(self.host.values))
        remote = RemoteRunner(
            job_dir, self.bus.emit, s.broker, Channel(s.redis_url), s.queue, sealed
        )
        # `judged`: its workers start their model proxy for the verifiers that ask for a model
        judged = any(needs_judge(t) for t in self.tasks)
        adopted = await remote.open(
            Path.cwd(), {**spec.recorded(), "judged": judged}, spec.concurrency
        )
        return remote, adopted

    async def _start_proxy(self) -> tuple[ModelGateway | None, Agent]:
        """The model gateway, in this loop, when the agent calls a model; the agent pointed at it."""
        if not self.agent.calls_proxy() or self.gateway is None:
            return None, self.agent
        port = await self.gateway.start()
        return self.gateway, self.agent.with_proxy(f"http://127.0.0.1:{port}")

    async def _judge_gateway(self, proxy: ModelGateway | None) -> ModelGateway | None:
        """The gateway verifiers that ask for a model reach it through (runs/trials/judge.py):
        the agent's, or started for them alone; None when no task's verifier asks."""
        if self.gateway is None or not any(needs_judge(t) for t in self.tasks):
            return None
        if proxy is None:
            await self.gateway.start()
        return self.gateway

    async def _cancel_requested(self, job_dir: Path) -> None:
        """A cancel from another machine (the dashboard's, on a shared jobs folder) is a file in
        the job folder: seen within a second, it stops the run as SIGTERM does."""
        request = job_dir / CANCEL_REQUEST
        request.unlink(missing_ok=True)  # an earlier run's, never seen
        while True:
            await asyncio.sleep(1.0)
            if request.exists():
                request.unlink(missing_ok=True)
                self._on_signal("SIGTERM")

    def _on_signal(self, name: str) -> None:
        self.signals.append(name)
        if len(self.signals) == 1:
            self.bus.emit(ev.SignalReceived(name))
            if self.coordinator is not None:
                self.coordinator.interrupt()
            if self.reviews is not None:
                self.reviews.stop()
        elif len(self.signals) >= 3:
            os._exit(SIGNAL_EXIT.get(self.signals[0], 1))
        # a second signal during clean-up is ignored

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
        passed = sum(1 for r in results if r.reward == 1.0)
        failed = sum(1 for r in results if r.reward is not None and r.reward != 1.0)
        errored = len(results) - passed - failed
        running = len(c.running) if c else 0
        return f"{len(plan.done) + passed + failed}/{plan.total} scored · {passed} passed · {failed} failed · {errored} errored · {running} running"

    def _finish(
        self,
        choice: JobChoice,
        plan: Plan,
        budgets: dict[int, JobBudget],
        c: Coordinator,
        elapsed: float,
    ) -> int:
        spec, job_dir = self.spec, choice.job_dir
        coordination.guard()  # on the fleet: a coordinator taken over writes no summary
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
        signal_name = self.signals[0] if self.signals else None
        self.bus.emit(
            ev.JobFinished(
                job_name=job_dir.name,
                job_dir=str(job_dir),
                jobs_dir=str(spec.jobs_dir),
                summary=summary,
                state="interrupted" if signal_name or self.machine_stopped else "finished",
                elapsed_s=elapsed,
                plan_total=plan.total,
                reused=len(plan.done),
                resumed=choice.resumed,
                ran_now=len({r.trial_name for r in c.results}),
                kept_out=len(kept_out),
                has_job_cap=spec.has_job_cap(),
                signal=signal_name,
                stopped_running=c.stopped_running,
            )
        )
        if signal_name is not None:
            return SIGNAL_EXIT[signal_name]
        errored = (summary.get("errored") or 0) + (summary.get("verifier_errored") or 0)
        return 1 if errored else 0


def _quiet_machine_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A step of an attempt cut short by the job's stop left the machine's error (a full disk) in
    a future no one waits for any more: the job's one line says it, not a traceback."""
    if machine_error(context.get("exception")) is not None:
        return
    loop.default_exception_handler(context)


def _attempts_size(job_dir: Path) -> tuple[int, int]:
    """(bytes, attempt folders) of the job's attempt folders."""
    total, folders = 0, 0
    for child in job_dir.iterdir():
        if not child.is_dir() or child.name.startswith("."):
            continue
        folders += 1
        for root, _dirs, files in os.walk(child):
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_size
                except OSError:
                    continue
    return total, folders


def space_needed(job_dir: Path, remaining: int) -> int:
    """About what the rest of the job needs: an attempt folder's mean size for each trial not
    yet done, and a MiB for the summary and logs."""
    total, folders = _attempts_size(job_dir)
    mean = total // folders if folders else 0
    return max(0, remaining) * mean + (1 << 20)


def _mib(n: int) -> str:
    return f"{max(1, round(n / (1 << 20)))} MiB"


def machine_stop(job_dir: Path, err: OSError, remaining: int) -> UserError:
    """The one line for a job the machine stopped: what, where, what to free, how to go on."""
    where = Path(err.filename) if err.filename else job_dir
    folder = where if where.is_dir() else where.parent
    what = MACHINE_ERRNOS.get(err.errno or 0, err.strerror or str(err))
    resume = f"bench eval resume {job_dir}"
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        free = free_bytes(folder)
        fix = (
            f"free at least {_mib(space_needed(job_dir, remaining))} there"
            + (f" ({_mib(free)} free now)" if free is not None else "")
            + f", then {resume}"
        )
    elif err.errno == errno.EROFS:
        fix = f"make it writable again (remount it read-write), then {resume}"
    else:
        fix = f"raise the open-file limit (ulimit -n) or close what holds files, then {resume}"
    return UserError(
        f"stopped {job_dir.name}: {what} ({folder}); running trials were stopped and their "
        f"sandboxes removed; {fix}",
        exit_code=1,
    )


def running_elsewhere(job_dir: Path) -> list[str]:
    from runs.workers.leases import running_elsewhere as held

    return held(str(job_dir.resolve()))


def adopted_trials(remote: RemoteRunner | None, adopted: list[str]) -> tuple[str, ...]:
    if remote is None:
        return ()
    return tuple(r.trial_name for r in remote.rows.values() if r.rollout_name in adopted)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; asyncio's loop also works
        return None
    return uvloop.new_event_loop
