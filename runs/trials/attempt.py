"""One attempt (rollout): sandbox up, agent runs, verifier grades, folder written, sandbox removed.

`prepare` (image + container) is split from `run` so the coordinator's warm pool can prepare
sandboxes ahead of their turn.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from runs.agents.base import Agent
from runs.gateway import CANCELLED_CALLS_SETTLE_S, take_usage
from runs.jobfolder import new_attempt_dir, write_json
from runs.results.attempts import NOT_STARTED_MARK
from runs.sandboxes.docker import Sandbox, SandboxConfigError, SandboxError, SandboxFactory
from runs.sandboxes.images import ImageBuildError
from runs.sandboxes.layers import LayerError
from runs.secrets import redact_obj, redact_tree
from runs.spec import RunSpec
from runs.tasks.load import Task
from runs.trials.agent_run import add_proxy_usage, run_agent, trial_budget_for, trial_secrets
from runs.trials.steps import run_steps
from runs.trials.verifier import TESTS_DIR, run_verifier
from runs.trials.workspace import save_workspace

Events = Callable[..., None]


def _now() -> str:
    return datetime.now().isoformat(timespec="milliseconds")


@dataclass
class AttemptPlan:
    task: Task
    trial_name: str
    trial_index: int
    attempt: int  # 1-based within the trial
    env_digest: str


@dataclass
class Prepared:
    plan: AttemptPlan
    attempt_dir: Path
    started_at: str
    t0: float
    sandbox: Sandbox | None = None
    workdir: str | None = None
    error: str | None = None
    error_category: str | None = None
    timing: dict[str, float] = field(default_factory=dict)
    cancelled_by: str | None = (
        None  # the cap's `budget reached: ...`, set before a job cap cancels it
    )
    cancelled_record: dict[str, Any] | None = (
        None  # the timing.json written when a job cap cancelled it
    )
    ready_at: float | None = None  # when its sandbox was ready (monotonic)
    resources: dict[str, Any] | None = None  # the CPUs and memory it got, and what it asked for
    began: bool = False

    def begin(self, now: float | None = None) -> None:
        """It takes its slot: the trial's clock (t0) leaves out the time its prepared sandbox waited
        for one, so timing.total and --max-sandbox-seconds count set-up and run, not the queue."""
        if self.began:
            return
        self.began = True
        if self.ready_at is not None:
            self.t0 += max((time.monotonic() if now is None else now) - self.ready_at, 0.0)


def record_cancelled_usage(record: dict[str, Any], usage: Any) -> None:
    """Add what the proxy counted for a cancelled agent to its record's agent_result (timing.json)."""
    add_proxy_usage(record["agent_result"], usage)
    if usage.in_flight:
        record["usage_incomplete_info"] = {
            "calls_in_flight": usage.in_flight,
            "waited_sec": CANCELLED_CALLS_SETTLE_S,
        }


def instruction_for(task: Task) -> str:
    if task.agent.prompt_prefix:
        return f"{task.agent.prompt_prefix}\n\n{task.instruction}"
    return task.instruction


class AttemptRunner:
    """Runs attempts of one job; everything docker-bound goes through the loop's executor."""

    def __init__(
        self,
        spec: RunSpec,
        agent: Agent,
        factory: SandboxFactory,
        job_dir: Path,
        events: Events,
        live: set[Sandbox],
        proxy: Any = None,
    ):
        self.spec = spec
        self.agent = agent
        self.factory = factory
        self.job_dir = job_dir
        self.events = events
        self.live = live  # every sandbox not yet removed, for clean-up on a signal
        # the model gateway (benchflow_site.gateway.ProxyGateway) when the agent calls a model
        self.proxy = proxy
        self._removals: set[asyncio.Task[None]] = set()

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
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
            given = await self._call(self.factory.grant, plan.task)
            prepared.resources = given.record()
            build_log = self.job_dir / "builds" / f"{plan.task.name}.log"
            image = await self._call(
                self.factory.images.image_for, plan.task, plan.env_digest, build_log
            )
            layer = self.agent.image_layer()
            if layer is not None:
                try:
                    image = await self._call(self.factory.images.with_layer, image, layer)
                except LayerError as exc:
                    prepared.error = (
                        f"install failed: could not add {layer.name} to the task image: {exc}"
                    )
                    prepared.error_category = "install_failure"
                    prepared.timing["environment_setup"] = time.monotonic() - t
                    prepared.ready_at = time.monotonic()
                    return prepared
            prepared.workdir = plan.task.sandbox.workdir or await self._call(
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

            sandbox = await self._call(create)
            prepared.sandbox = sandbox
            files = self.agent.files(plan.task, instruction_for(plan.task))
            dirs = self.agent.writable_dirs()
            if files or dirs:
                await self._call(sandbox.put_files, files, dirs)
            await self._call(self.factory.start, sandbox)
            write_json(
                attempt_dir / "sandbox.json",
                {"provider": "docker", "sandbox_id": sandbox.id, "image": image},
            )
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
        prepared.timing["environment_setup"] = time.monotonic() - t
        prepared.ready_at = time.monotonic()
        return prepared

    async def run(self, prepared: Prepared) -> dict[str, Any]:
        """Agent, verifier, result.json; the sandbox is removed in every case (in the background)."""
        plan, attempt_dir = prepared.plan, prepared.attempt_dir
        prepared.begin()
        (attempt_dir / NOT_STARTED_MARK).unlink(missing_ok=True)
        self.events("attempt_created", plan=plan, attempt_dir=attempt_dir)
        result: dict[str, Any] = self._base_result(prepared)
        try:
            if prepared.sandbox is not None and prepared.error is None:
                await self._agent_and_verifier(prepared, result)
        except asyncio.CancelledError:
            ended = time.monotonic()
            self.discard(prepared)  # the agent stops with its sandbox
            # No result.json (BenchFlow's job folder has none for a cancelled trial): timing.json keeps
            # the seconds it ran, and for a job cap also why and what its agent spent, which the cap counts
            record: dict[str, Any] = {"total": round(ended - prepared.t0, 1), "cancelled": True}
            if prepared.cancelled_by is not None:
                record["cancelled_by"] = prepared.cancelled_by
                record["agent_result"] = result["agent_result"]
                await self._cancelled_usage(prepared, record)
                prepared.cancelled_record = record
            redact_tree(attempt_dir, trial_secrets(self.spec.agent_env, plan.task))
            write_json(attempt_dir / "timing.json", record)
            self.events("attempt_cancelled", plan=plan, attempt_dir=attempt_dir)
            raise
        except Exception as exc:  # noqa: BLE001
            result["error"] = (
                result["error"] or f"infrastructure error: connection lost to the sandbox ({exc})"
            )
            result["error_category"] = result["error_category"] or "infra_failure"
        if secrets := trial_secrets(self.spec.agent_env, plan.task):
            # what the agent or the tests wrote into /logs, and any text of theirs in the result
            await self._call(redact_tree, attempt_dir, secrets)
            result = redact_obj(result, secrets)
        self._write_result(prepared, result)
        self.discard(prepared)
        self.events("attempt_finished", plan=plan, attempt_dir=attempt_dir, result=result)
        return result

    async def _cancelled_usage(self, prepared: Prepared, record: dict[str, Any]) -> None:
        if self.proxy is None:
            return
        try:
            usage = await take_usage(self.proxy, prepared.attempt_dir.name)
        except asyncio.CancelledError:  # cancelled again (a signal): what the proxy counted so far
            usage = self.proxy.unregister_attempt(prepared.attempt_dir.name)
        if usage is not None:
            record_cancelled_usage(record, usage)

    def _write_result(self, prepared: Prepared, result: dict[str, Any]) -> None:
        timing = {k: round(v, 3) for k, v in prepared.timing.items()}
        timing["total"] = round(time.monotonic() - prepared.t0, 3)
        result["timing"] = timing
        result["finished_at"] = _now()
        write_json(
            prepared.attempt_dir / "timing.json", {k: round(v, 1) for k, v in timing.items()}
        )
        write_json(prepared.attempt_dir / "result.json", result)

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
            if not (mark.parent / "result.json").exists():
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
                await self._call(sandbox.remove)
        finally:
            if sandbox is not None:
                self.live.discard(sandbox)
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            if unused is not None:  # after the sandbox: its bind mounts write into the folder
                shutil.rmtree(unused, ignore_errors=True)

    def _base_result(self, prepared: Prepared) -> dict[str, Any]:
        plan = prepared.plan
        no_model = 0 if self.proxy is None else None  # a control agent uses no tokens at all
        return {
            "task_name": plan.task.name,
            "rollout_name": prepared.attempt_dir.name,
            "trial_name": plan.trial_name,
            "trial_index": plan.trial_index,
            "attempt": plan.attempt,
            "rewards": None,
            "agent": self.spec.agent,
            "agent_name": self.agent.name,
            # a model agent's, a Claude login's included (its calls bypass the proxy)
            "model": self.spec.model
            if self.spec.model and (self.proxy or self.agent.needs_model)
            else None,
            "n_tool_calls": 0,
            "n_prompts": 0,
            "last_tool_call": None,
            "agent_result": {
                "n_input_tokens": no_model,
                "n_output_tokens": no_model,
                "n_cache_read_tokens": no_model,
                "n_cache_creation_tokens": no_model,
                "total_tokens": no_model,
                "cost_usd": None,
                "usage_source": "unavailable" if self.proxy is not None else "none",
                "price_source": None,
            },
            "error": prepared.error,
            "error_category": prepared.error_category,
            "verifier_error": None,
            "verifier_error_category": None,
            "agent_timeout_info": None,
            "agent_exit_code": None,
            "trial_budget": None,
            "started_at": prepared.started_at,
            "finished_at": None,
            "sandbox_id": prepared.sandbox.id if prepared.sandbox else None,
            "sandbox_resources": prepared.resources,
        }

    async def _agent_and_verifier(self, prepared: Prepared, result: dict[str, Any]) -> None:
        plan, sandbox = prepared.plan, prepared.sandbox
        assert sandbox is not None
        task = plan.task
        if task.steps:  # one agent turn and one grading per step, all in this sandbox
            await run_steps(self, prepared, result)
            return
        instruction = instruction_for(task)
        prepared.timing["agent_setup"] = 0.0
        self.events("phase", plan=plan, attempt_dir=prepared.attempt_dir, phase="agent")
        t = time.monotonic()
        run = await run_agent(
            agent=self.agent,
            task=task,
            instruction=instruction,
            sandbox=sandbox,
            attempt_dir=prepared.attempt_dir,
            agent_env=self.spec.agent_env,
            result=result,
            proxy=self.proxy,
            model=self.spec.model,
            budget=trial_budget_for(task, self.spec.token_budget, self.spec.turn_budget),
            on_tool=lambda title: self.events(
                "tool_call", plan=plan, attempt_dir=prepared.attempt_dir, title=title
            ),
            idle_timeout=self.spec.agent_idle_timeout,
        )
        graded_anyway = run.stopped
        prepared.timing["agent_execution"] = time.monotonic() - t
        if run.refused:  # refused before it started (a budget it would go around): nothing to grade
            return

        if self.spec.save_outputs and prepared.workdir:
            await self._call(save_workspace, sandbox, prepared.workdir, prepared.attempt_dir)

        self.events("phase", plan=plan, attempt_dir=prepared.attempt_dir, phase="verifier")
        t = time.monotonic()
        outcome = await run_verifier(
            sandbox,
            task,
            prepared.attempt_dir,
            staged_tests=self.job_dir / ".staging" / prepared.attempt_dir.name / "tests",
        )
        prepared.timing["verifier"] = time.monotonic() - t
        result["rewards"] = outcome.rewards
        result["verifier_exit_code"] = outcome.exit_code
        if outcome.rewards is None:
            if graded_anyway and outcome.error_category in ("verifier_no_reward", None):
                # an agent stopped at its time limit or budget is graded on what it left: no reward counts 0
                result["rewards"] = {"reward": 0.0}
            else:
                result["verifier_error"] = outcome.error
                result["verifier_error_category"] = outcome.error_category
