"""One attempt (rollout): sandbox up, agent runs, verifier grades, folder written, sandbox removed.

`prepare` (image + container) is split from `run` so the coordinator's warm pool can prepare
sandboxes ahead of their turn.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from pathlib import Path
from typing import Any

from runs import events as ev
from runs.agents.base import Agent
from runs.gateway import CANCELLED_CALLS_SETTLE_S, take_usage
from runs.jobfolder import NOT_STARTED_MARK, new_attempt_dir, write_json
from runs.results.attempt_folder import RESULT
from runs.results.trial_result import AgentUsage, TrialResult
from runs.sandboxes.docker import Sandbox, SandboxConfigError, SandboxError, SandboxFactory
from runs.sandboxes.images import ImageBuildError
from runs.sandboxes.layers import LayerError
from runs.secrets import redact_obj, redact_tree
from runs.spec import RunSpec
from runs.tasks.load import Task
from runs.tasks.verifier_env import verifier_environment
from runs.trials import disk_cap
from runs.trials.agent_run import run_agent, trial_secrets
from runs.trials.artifacts import collect, hand_over
from runs.trials.environment_setup import EnvironmentSetupError, set_up
from runs.trials.judge import JudgeAccess, judged
from runs.trials.prepared import AttemptPlan, Prepared
from runs.trials.separate_verifier import (
    VerifierImageError,
    run_separate_verifier,
    verifier_image,
)
from runs.trials.steps import instruction_for, run_steps
from runs.trials.trial_budget import trial_budget_for
from runs.trials.verifier import TESTS_DIR, run_verifier
from runs.trials.workspace import save_workspace


def _now() -> str:
    return datetime.now().isoformat(timespec="milliseconds")


def cancelled_record(
    seconds: float, cancelled_by: str | None, spent: AgentUsage, usage: Any = None
) -> dict[str, Any]:
    """timing.json of an attempt cancelled while it ran: its seconds, and for a job cap's cancel also
    why and what its agent spent (`usage`: what the proxy counted for it), which the cap counts."""
    record: dict[str, Any] = {"total": round(seconds, 1), "cancelled": True}
    if cancelled_by is None:
        return record
    record["cancelled_by"] = cancelled_by
    if usage is not None:
        spent.add_counted(usage)
    record["agent_result"] = spent.to_json()
    if usage is not None and usage.in_flight:
        record["usage_incomplete_info"] = {
            "calls_in_flight": usage.in_flight,
            "waited_sec": CANCELLED_CALLS_SETTLE_S,
        }
    return record


class AttemptRunner:
    """Runs attempts of one job; everything docker-bound goes through the loop's executor."""

    def __init__(
        self,
        spec: RunSpec,
        agent: Agent,
        factory: SandboxFactory,
        job_dir: Path,
        emit: Callable[[ev.Event], None],
        live: set[Sandbox],
        proxy: Any = None,
        judges: Any = None,
    ):
        self.spec = spec
        self.agent = agent
        self.factory = factory
        self.job_dir = job_dir
        self.emit = emit
        self.live = live  # every sandbox not yet removed, for clean-up on a signal
        # the model gateway (benchflow_site.gateway.ProxyGateway) when the agent calls a model
        self.proxy = proxy
        # the gateway a verifier that asks for a model reaches it through (runs/trials/judge.py)
        self.judges = judges
        self._removals: set[asyncio.Task[None]] = set()

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Docker-bound (blocking) work, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    def _config(self, plan: AttemptPlan, attempt_dir: Path, started_at: str) -> dict[str, Any]:
        recorded = self.spec.recorded()
        return {
            "task_path": str(plan.task.path),
            "task_name": plan.task.name,
            "trial_name": plan.trial_name,
            "trial_index": plan.trial_index,
            "attempt": plan.attempt,
            "agent": self.spec.agent,
            "model": self.spec.model,
            "environment": "docker",
            "sandbox": {
                "cpus": plan.task.sandbox.cpus,
                "memory_mb": plan.task.sandbox.memory_mb,
                "network_mode": plan.task.sandbox.network_mode,
                "workdir": plan.task.sandbox.workdir,
            },
            "timeout_sec": plan.task.agent.timeout_sec,
            "agent_idle_timeout_sec": self.spec.agent_idle_timeout,
            "verifier_timeout_sec": plan.task.verifier.timeout_sec,
            "concurrency": self.spec.concurrency,
            "agent_env": recorded["agent_env"],
            "save_outputs": self.spec.save_outputs,
            "job_name": self.job_dir.name,
            "rollout_name": attempt_dir.name,
            "started_at": started_at,
        }

    async def prepare(self, plan: AttemptPlan) -> Prepared:
        """Make the attempt folder and a started sandbox with the agent's files in place."""
        attempt_dir = new_attempt_dir(self.job_dir, plan.task.name)
        # Until the attempt takes its slot it is no rollout: readers skip the folder (and a resume does
        # not count it against --max-rollouts); `run` removes the mark, `discard` the whole folder.
        (attempt_dir / NOT_STARTED_MARK).touch()
        prepared = Prepared(plan, attempt_dir, _now(), time.monotonic())
        write_json(
            attempt_dir / "config.json", self._config(plan, attempt_dir, prepared.started_at)
        )
        t = time.monotonic()
        try:
            given = await self.call(self.factory.grant, plan.task)
            prepared.resources = given.record()
            build_log = self.job_dir / "builds" / f"{plan.task.name}.log"
            image = await self.call(
                self.factory.images.image_for, plan.task, plan.env_digest, build_log
            )
            if (env := verifier_environment(plan.task)) is not None:
                try:
                    prepared.verifier_image = await self.call(
                        verifier_image,
                        self.factory.images,
                        plan.task,
                        env,
                        build_log.with_suffix(".verifier.log"),
                    )
                except VerifierImageError as exc:
                    # no agent runs for a verdict no verifier could give: the verifier's error
                    prepared.verifier_error = str(exc)
                    prepared.verifier_error_category = "verifier_image_build"
                    prepared.timing.environment_setup = time.monotonic() - t
                    prepared.ready_at = time.monotonic()
                    return prepared
            layer = self.agent.image_layer()
            if layer is not None:
                try:
                    image = await self.call(self.factory.images.with_layer, image, layer)
                except LayerError as exc:
                    prepared.error = (
                        f"install failed: could not add {layer.name} to the task image: {exc}"
                    )
                    prepared.error_category = "install_failure"
                    prepared.timing.environment_setup = time.monotonic() - t
                    prepared.ready_at = time.monotonic()
                    return prepared
            prepared.workdir = plan.task.sandbox.workdir or await self.call(
                self.factory.images.image_workdir, image
            )
            mounts = {
                **self.agent.mounts(plan.task),
                TESTS_DIR: (self.staging(attempt_dir) / "tests", "rw"),
            }

            def create() -> Sandbox:
                made = self.factory.create(
                    plan.task, image, attempt_dir.name, logs_dir=attempt_dir, mounts=mounts
                )
                self.live.add(made)  # here, in the worker thread: a cancelled prepare leaks nothing
                return made

            sandbox = await self.call(create)
            prepared.sandbox = sandbox
            files = self.agent.files(plan.task, instruction_for(plan.task))
            dirs = self.agent.writable_dirs()
            if files or dirs:
                await self.call(sandbox.put_files, files, dirs)
            await self.call(self.factory.start, sandbox)
            write_json(
                attempt_dir / "sandbox.json",
                {"provider": "docker", "sandbox_id": sandbox.id, "image": image},
            )
            await self.call(set_up, sandbox, plan.task, self.agent, attempt_dir)
        except EnvironmentSetupError as exc:
            prepared.error = f"environment setup failed: {exc}"
            prepared.error_category = "environment_setup"
        except ImageBuildError as exc:
            prepared.error, prepared.error_category = str(exc), "image_build"
        except SandboxConfigError as exc:
            prepared.error, prepared.error_category = str(exc), "sandbox_config"
        except SandboxError as exc:
            prepared.error, prepared.error_category = str(exc), "sandbox_setup"
        except Exception as exc:  # noqa: BLE001 - docker can fail in many ways; all are infrastructure
            prepared.error, prepared.error_category = (
                f"sandbox startup failed: {exc}",
                "sandbox_setup",
            )
        prepared.timing.environment_setup = time.monotonic() - t
        prepared.ready_at = time.monotonic()
        return prepared

    async def run(self, prepared: Prepared) -> TrialResult:
        """Agent, verifier, result.json; the sandbox is removed in every case (in the background)."""
        plan, attempt_dir = prepared.plan, prepared.attempt_dir
        prepared.begin()
        (attempt_dir / NOT_STARTED_MARK).unlink(missing_ok=True)
        self.emit(
            ev.AttemptStarted(
                plan.trial_name, plan.task.name, plan.trial_index, plan.attempt, attempt_dir.name
            )
        )
        result = self._base_result(prepared)
        try:
            if prepared.sandbox is not None and prepared.error is None:
                await self._within_disk_cap(prepared, result)
        except asyncio.CancelledError:
            ended = time.monotonic()
            self.discard(prepared)  # the agent stops with its sandbox
            # No result.json (BenchFlow's job folder has none for a cancelled trial): timing.json keeps
            # the seconds it ran, and for a job cap also why and what its agent spent, which the cap counts
            usage = None
            if prepared.cancelled_by is not None:
                usage = await self._cancelled_usage(prepared)
            record = cancelled_record(
                ended - prepared.t0, prepared.cancelled_by, result.agent_result, usage
            )
            if prepared.cancelled_by is not None:
                prepared.cancelled_record = record
            redact_tree(attempt_dir, trial_secrets(self.spec.agent_env, plan.task))
            write_json(attempt_dir / "timing.json", record)
            self.emit(ev.AttemptCancelled(plan.trial_name, attempt_dir.name, prepared.cancelled_by))
            raise
        except Exception as exc:  # noqa: BLE001
            result.fail(
                f"infrastructure error: connection lost to the sandbox ({exc})", "infra_failure"
            )
        try:
            if secrets := trial_secrets(self.spec.agent_env, plan.task):
                # what the agent or the tests wrote into /logs, and any text of theirs in the result
                await self.call(redact_tree, attempt_dir, secrets)
                result = TrialResult.from_json(redact_obj(result.to_json(), secrets))
            self._write_result(prepared, result)
        finally:  # also when the result cannot be written (a full disk): the sandbox goes
            self.discard(prepared)
        return result

    async def _within_disk_cap(self, prepared: Prepared, result: TrialResult) -> None:
        """The agent and the verifier, stopped when the attempt folder passes --max-attempt-mb:
        the attempt then fails as attempt_disk, ungraded, with what its agent spent counted."""
        limit_mb = self.spec.max_attempt_mb
        size = await disk_cap.within_cap(
            self._agent_and_verifier(prepared, result), prepared.attempt_dir, limit_mb
        )
        if size is None:
            return
        if prepared.sandbox is not None:  # whatever was writing (the agent, the tests) stops
            await self.call(prepared.sandbox.stop_processes)
        if self.proxy is not None and (
            usage := await take_usage(self.proxy, prepared.attempt_dir.name)
        ):
            result.agent_result.add_counted(usage)
        result.rewards = None
        result.error = disk_cap.cap_error(limit_mb, size)
        result.error_category = "attempt_disk"

    async def _cancelled_usage(self, prepared: Prepared) -> Any:
        """What the proxy counted for a cancelled attempt's agent (None without a key)."""
        if self.proxy is None:
            return None
        try:
            return await take_usage(self.proxy, prepared.attempt_dir.name)
        except asyncio.CancelledError:  # cancelled again (a signal): what the proxy counted so far
            return self.proxy.unregister_attempt(prepared.attempt_dir.name)

    def _write_result(self, prepared: Prepared, result: TrialResult) -> None:
        prepared.timing.total = time.monotonic() - prepared.t0
        result.timing = prepared.timing
        result.finished_at = _now()
        write_json(prepared.attempt_dir / "timing.json", result.timing.to_json(digits=1))
        write_json(prepared.attempt_dir / RESULT, result.to_json())

    def discard(self, prepared: Prepared) -> None:
        """Remove the attempt's sandbox in the background: the next trial need not wait for it.
        An attempt that never started leaves no folder either."""
        sandbox, prepared.sandbox = prepared.sandbox, None
        never_started = (prepared.attempt_dir / NOT_STARTED_MARK).exists()
        if sandbox is not None or never_started:
            staging = self.job_dir / ".staging" / prepared.attempt_dir.name
            unused = prepared.attempt_dir if never_started else None
            task = asyncio.get_running_loop().create_task(self._remove(sandbox, staging, unused))
            self._removals.add(task)
            task.add_done_callback(self._removals.discard)

    def remove_never_started(self) -> None:
        """At the job's end: folders of attempts cancelled while their sandbox was prepared."""
        for mark in self.job_dir.glob(f"*__*/{NOT_STARTED_MARK}"):
            if not (mark.parent / RESULT).exists():
                shutil.rmtree(mark.parent, ignore_errors=True)

    def staging(self, attempt_dir: Path) -> Path:
        """Host folders mounted into the attempt's sandbox (its /tests); removed with the sandbox."""
        path = self.job_dir / ".staging" / attempt_dir.name
        (path / "tests").mkdir(parents=True, exist_ok=True)
        return path

    async def drain(self) -> None:
        """Wait for every background removal."""
        while self._removals:
            await asyncio.gather(*list(self._removals), return_exceptions=True)

    async def _remove(
        self, sandbox: Sandbox | None, staging: Path | None = None, unused: Path | None = None
    ) -> None:
        try:
            if sandbox is not None:
                try:
                    await self.call(sandbox.remove)
                except Exception:  # noqa: BLE001 - still live: tried again at the end
                    return  # (the engine refused, or a process out of open files cannot reach it)
                # only once it is gone: a removal the engine refused is tried again at the end
                self.live.discard(sandbox)
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            if unused is not None:  # after the sandbox: its bind mounts write into the folder
                shutil.rmtree(unused, ignore_errors=True)

    def _base_result(self, prepared: Prepared) -> TrialResult:
        plan, agent = prepared.plan, self.agent
        return TrialResult(
            task_name=plan.task.name,
            rollout_name=prepared.attempt_dir.name,
            trial_name=plan.trial_name,
            trial_index=plan.trial_index,
            attempt=plan.attempt,
            agent=self.spec.agent,
            agent_name=agent.name,
            # a model agent's, a Claude login's included (its calls bypass the proxy)
            model=self.spec.model
            if self.spec.model and (self.proxy or agent.needs_model)
            else None,
            started_at=prepared.started_at,
            sandbox_id=prepared.sandbox.id if prepared.sandbox else None,
            sandbox_resources=prepared.resources,
            # a control agent uses no tokens at all
            agent_result=AgentUsage() if self.proxy is not None else AgentUsage.none_used(),
            error=prepared.error,
            error_category=prepared.error_category,
            verifier_error=prepared.verifier_error,
            verifier_error_category=prepared.verifier_error_category,
        )

    def judged(
        self, prepared: Prepared, task: Task, result: TrialResult, sandbox: Sandbox | None = None
    ) -> AbstractAsyncContextManager[JudgeAccess | None]:
        """Around a verification of `task` (a step's view of it, or the task) in `sandbox` (the
        agent's, by default; a separate verifier's own): its judge's way to a model, when its env
        asks for one; what the judge used goes into the result."""
        sandbox = sandbox or prepared.sandbox
        assert sandbox is not None
        return judged(
            self.judges,
            sandbox=sandbox,
            attempt_dir=prepared.attempt_dir,
            verifier=task.verifier,
            secrets=trial_secrets(self.spec.agent_env, prepared.plan.task),
            result=result,
        )

    def emit_phase(self, prepared: Prepared, phase: str, step: str | None = None) -> None:
        plan = prepared.plan
        self.emit(ev.PhaseChanged(plan.trial_name, prepared.attempt_dir.name, phase, step))

    def on_tool(self, prepared: Prepared) -> Callable[[str], None]:
        """What to call with each tool call the agent starts (a title, secrets replaced)."""
        plan, name = prepared.plan, prepared.attempt_dir.name
        return lambda title: self.emit(ev.ToolCalled(plan.trial_name, name, title))

    async def _agent_and_verifier(self, prepared: Prepared, result: TrialResult) -> None:
        plan, sandbox = prepared.plan, prepared.sandbox
        assert sandbox is not None
        task = plan.task
        if task.steps:  # one agent turn and one grading per step, all in this sandbox
            await run_steps(self, prepared, result)
            await self.call(collect, sandbox, task.artifacts, prepared.attempt_dir / "artifacts")
            return
        prepared.timing.agent_setup = 0.0
        self.emit_phase(prepared, "agent")
        t = time.monotonic()
        run = await run_agent(
            agent=self.agent,
            task=task,
            instruction=instruction_for(task),
            sandbox=sandbox,
            attempt_dir=prepared.attempt_dir,
            agent_env=self.spec.agent_env,
            proxy=self.proxy,
            budget=trial_budget_for(task, self.spec.token_budget, self.spec.turn_budget),
            on_tool=self.on_tool(prepared),
            idle_timeout=self.spec.agent_idle_timeout,
        )
        run.record(result)
        prepared.timing.agent_execution = time.monotonic() - t
        if (
            run.withheld
        ):  # refused before it started, or its program could not run: nothing to grade
            return

        if self.spec.save_outputs and prepared.workdir:
            await self.call(save_workspace, sandbox, prepared.workdir, prepared.attempt_dir)

        env = verifier_environment(task)
        # what the agent left, taken out before the verifier (a separate one: sandbox stopped)
        await self.call(hand_over, sandbox, task, prepared.attempt_dir, env is not None)
        self.emit_phase(prepared, "verifier")
        t = time.monotonic()
        if env is None:
            async with self.judged(prepared, task, result) as judge:
                outcome = await run_verifier(
                    sandbox,
                    task,
                    prepared.attempt_dir,
                    staged_tests=self.job_dir / ".staging" / prepared.attempt_dir.name / "tests",
                    judge=judge,
                )
        else:
            assert prepared.verifier_image is not None
            outcome = await run_separate_verifier(
                self.factory,
                task,
                env,
                prepared.verifier_image,
                name=f"{prepared.attempt_dir.name}-verifier",
                artifacts_dir=prepared.attempt_dir / "artifacts",
                verifier_dir=prepared.attempt_dir / "verifier",
                staging=self.staging(prepared.attempt_dir) / "verifier",
                live=self.live,
                judged=lambda made: self.judged(prepared, task, result, sandbox=made),
            )
        prepared.timing.verifier = time.monotonic() - t
        result.verifier_environment_mode = "shared" if env is None else "separate"
        result.rewards = outcome.rewards
        result.verifier_exit_code = outcome.exit_code
        if outcome.rewards is None:
            if run.stopped and outcome.error_category in ("verifier_no_reward", None):
                # an agent stopped at its time limit or budget is graded on what it left: no reward counts 0
                result.rewards = {"reward": 0.0}
            else:
                result.verifier_error = outcome.error
                result.verifier_error_category = outcome.error_category
