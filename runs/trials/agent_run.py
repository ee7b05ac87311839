"""Running the agent inside its sandbox: its model calls through the proxy, its time limit and budget.

The agent is stopped at its wall-clock limit, by the idle watchdog, or within about a second once
the proxy refuses a call for the trial's budget; the verifier then grades what it left. A Claude
login calls its provider directly: its usage comes from Claude Code's own session log, read once
it stops (runs/agents/login_usage.py).

`run_agent` returns an `AgentRun` (what happened, nothing written yet); `AgentRun.record` adds it
to the trial's result, so the steps of a multi-step trial add up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runs.agents.base import Agent, AgentCommand, NativeUsage
from runs.agents.login_usage import native_usage_of
from runs.agents.session_logs import keep_session_logs
from runs.gateway import CALLS_SETTLE_S, ModelGateway, calls_settled
from runs.results.trial_result import TrialBudgetRecord, TrialResult
from runs.sandboxes.docker import ExecResult, Sandbox
from runs.sandboxes.netns import LoopbackRelay, listen_in_netns
from runs.secrets import redact_obj, secret_values
from runs.tasks.load import Task
from runs.trials.idle import CHECK_EVERY_S, IdleWatch, idle_error, idle_stop_info
from runs.trials.output_watch import OutputWatcher
from runs.trials.provider_errors import provider_error
from runs.trials.trial_budget import TrialBudget, budget_bypass, budget_stop_text, stopped_at

BUDGET_STOP_GRACE_S = 0.5  # lets the agent print its last lines before it is stopped


def trial_secrets(agent_env: dict[str, str], task: Task) -> list[str]:
    """The secret values a trial's agent or tests are given (--agent-env, the task's sandbox and
    verifier env, a separate verifier's own environment's env, its MCP servers' env and headers,
    its setup commands' env, what its Compose file read of this machine): replaced wherever the
    trial's output is written down."""
    servers = task.sandbox.mcp_servers
    return secret_values(
        agent_env,
        task.compose_env,
        task.sandbox.env,
        task.verifier.env,
        task.verifier.environment.env if task.verifier.environment else {},
        *(s.env for s in servers),
        *(s.headers for s in servers),
        *(c.env for c in task.sandbox.setup_commands),
    )


@dataclass
class AgentRun:
    """What one run of the agent's command gave."""

    ran: bool = False  # a command ran (the nop agent has none)
    model: str | None = None  # the model it was told, a login's included
    exit_code: int | None = None
    tool_calls: int = 0
    last_tool: str | None = None
    timed_out: bool = False
    timeout_s: float | None = None
    elapsed_s: float = 0.0
    idle_stopped: bool = False  # by the idle watchdog
    idle_error: str | None = None
    idle_info: dict[str, Any] | None = None
    budget_stopped: bool = False
    refused: str | None = None  # why it was not started (agent_budget): its reward is withheld
    cannot_run: bool = False  # its program could not be run (exit 126/127): nothing to grade
    counted: Any = None  # what the proxy counted (proxy.registry.AttemptUsage)
    usage_incomplete: dict[str, Any] | None = None
    native: NativeUsage | None = None  # a login's own log of its calls
    trial_budget: TrialBudgetRecord | None = None
    oom_killed: bool = False

    @property
    def withheld(self) -> bool:
        """Nothing the verifier could grade: the agent was refused, or its program never ran."""
        return self.refused is not None or self.cannot_run

    @property
    def stopped(self) -> bool:
        """Stopped by us (time limit, idle watchdog, trial budget): graded on what it left."""
        return self.timed_out or self.idle_stopped or self.budget_stopped

    def record(self, result: TrialResult) -> None:
        """Add this run to the trial's result; its errors in the order the causes are told apart."""
        if self.model:
            result.model = self.model
        if self.refused is not None:
            result.error = (
                f"agent integration failure [agent_budget]: {self.refused}, so the model proxy cannot "
                "count its calls and the task's per-trial budget cannot hold; fix: give the agent an "
                "API key (a provider-prefixed -m) so its calls go through the proxy"
            )
            result.error_category = "agent_integration"
            result.integration_failure_info = {"cause": "agent_budget", "message": self.refused}
            return
        if not self.ran:
            return
        result.n_prompts += 1
        result.agent_exit_code = self.exit_code
        result.n_tool_calls += self.tool_calls
        result.last_tool_call = self.last_tool or result.last_tool_call
        if self.idle_stopped:
            result.error, result.error_category = self.idle_error, "idle_timeout"
            result.idle_timeout_info = self.idle_info
        if self.timed_out:
            result.error = (
                f"agent timed out after {self.timeout_s:g}s (prompt exceeded wall-clock budget)"
            )
            result.error_category = "timeout"
            result.agent_timeout_info = {
                "timeout_sec": self.timeout_s,
                "elapsed_sec": round(self.elapsed_s, 1),
            }
        if self.usage_incomplete is not None:
            result.usage_incomplete_info = self.usage_incomplete
        self._record_usage(result)
        if self.oom_killed:
            result.agent_oom_killed = True
        if self.cannot_run:
            result.fail(
                f"install failed: the agent's command could not run (exit {self.exit_code})",
                "install_failure",
            )

    def _record_usage(self, result: TrialResult) -> None:
        usage = self.counted
        if usage is None:
            if self.native is not None:
                n = self.native
                result.agent_result.add_native(
                    input_tokens=n.input_tokens,
                    output_tokens=n.output_tokens,
                    cache_read=n.cache_read_tokens,
                    cache_write=n.cache_write_tokens,
                    source=n.source,
                    calls=n.calls,
                )
            return
        result.agent_result.add_counted(usage)
        if usage.errors and (found := provider_error(usage.errors, usage.last_error or "")):
            result.fail(*found)
        if self.trial_budget is not None:
            result.trial_budget = self.trial_budget
        if self.budget_stopped and self.trial_budget is not None:
            result.error = budget_stop_text(
                usage.stopped_by, stopped_at(usage), _budget_of(self.trial_budget)
            )
            result.error_category = "trial_budget"


def _budget_of(record: TrialBudgetRecord) -> TrialBudget:
    return TrialBudget(record.budget.get("tokens"), record.budget.get("turns"), record.source)


@dataclass
class ModelAccess:
    """The attempt's way to the model proxy: its key, and the socket served in its sandbox."""

    key: str
    stop_serving: Callable[[], Awaitable[None]]


async def open_model_access(
    proxy: ModelGateway,
    *,
    sandbox: Sandbox,
    attempt_dir: Path,
    task: Task,
    model: str,
    budget: TrialBudget,
    secrets: list[str],
    on_budget_spent: Callable[[str], object],
) -> ModelAccess:
    """A key of the attempt's own, and the proxy listening on the sandbox's own 127.0.0.1:PORT
    (a socket made inside its network namespace: no relay between the agent and the proxy)."""
    loop = asyncio.get_running_loop()
    (attempt_dir / "trajectory").mkdir(exist_ok=True)
    key = proxy.register(
        attempt_id=attempt_dir.name,
        model=model,
        log_path=attempt_dir / "trajectory" / "llm_trajectory.jsonl",
        token_budget=budget.tokens,
        turn_budget=budget.turns,
        solution_text=_solution_text(task),
        on_budget_spent=on_budget_spent,
        secrets=secrets,
    )
    pid = await loop.run_in_executor(None, sandbox.pid)
    sock = await loop.run_in_executor(None, listen_in_netns, pid, proxy.port)
    try:
        stop_serving = await proxy.serve(sock)
    except BaseException:
        sock.close()
        raise
    return ModelAccess(key, stop_serving)


async def _open_relays(agent: Agent, sandbox: Sandbox) -> list[LoopbackRelay]:
    relays = [LoopbackRelay(port) for port in agent.loopback_ports()]
    if relays:
        pid = await asyncio.get_running_loop().run_in_executor(None, sandbox.pid)
        for relay in relays:
            await relay.start(pid, relay.target_port)
    return relays


async def _close(access: ModelAccess | None, relays: list[LoopbackRelay]) -> None:
    if access is not None:
        await access.stop_serving()
    for relay in relays:
        await relay.close()


async def run_agent(
    *,
    agent: Agent,
    task: Task,
    instruction: str,
    sandbox: Sandbox,
    attempt_dir: Path,
    agent_env: dict[str, str],
    proxy: ModelGateway | None,
    budget: TrialBudget,
    on_tool: Callable[[str], None],
    idle_timeout: float | None = None,
    command: AgentCommand | None = None,
) -> AgentRun:
    """Run the agent's command (`command`, else the agent's own for the task) to its end or its stop.

    An agent with a model is also stopped by the idle watchdog after `idle_timeout` seconds without
    output or model calls (runs/trials/idle.py); None turns it off."""
    run = AgentRun(model=agent.model if agent.needs_model and agent.model else None)
    command = command or agent.command(task, instruction)
    if command is None:
        return run
    if budget.active and (why := budget_bypass(agent, agent_env)):
        # the run's own budget was refused before the job; a task's is refused here, per trial
        run.refused = why
        return run
    loop = asyncio.get_running_loop()
    env = {**agent_env, **command.env}
    secrets = trial_secrets(agent_env, task)
    budget_spent = asyncio.Event()
    access: ModelAccess | None = None
    if proxy is not None and agent.calls_proxy():
        access = await open_model_access(
            proxy,
            sandbox=sandbox,
            attempt_dir=attempt_dir,
            task=task,
            model=agent.model,
            budget=budget,
            secrets=secrets,
            on_budget_spent=lambda _id: loop.call_soon_threadsafe(budget_spent.set),
        )
        env.update(agent.model_env(access.key))
        secrets = [*secrets, access.key]
    try:
        relays = await _open_relays(agent, sandbox)
    except BaseException:  # what was opened for this trial is closed again, whatever failed
        await _close(access, [])
        raise

    def tool_seen(title: str) -> None:  # in the exec thread
        loop.call_soon_threadsafe(on_tool, redact_obj(title, secrets))

    watcher = OutputWatcher(agent, tool_seen)
    try:
        exec_result = await _watch(
            run,
            agent,
            task,
            command,
            env,
            sandbox,
            attempt_dir,
            watcher,
            budget_spent,
            secrets,
            activity=(lambda: proxy.activity(attempt_dir.name))
            if access is not None and proxy is not None
            else None,
            idle_timeout=idle_timeout,
        )
    finally:
        await _close(access, relays)
    run.ran, run.exit_code = True, exec_result.exit_code
    run.tool_calls = watcher.tool_calls
    run.last_tool = redact_obj(watcher.last_tool, secrets)
    logs = await _keep_logs(agent, sandbox, attempt_dir, secrets)
    if access is not None and proxy is not None:
        await _take_counted(run, proxy, access.key, agent, attempt_dir, budget, watcher, logs)
    elif agent.needs_model:  # a login: its calls bypass the proxy, so its own log is all there is
        run.native = await loop.run_in_executor(
            None, agent.native_usage, sandbox, env, watcher.session_id
        )
        if run.native is None and watcher.final_usage is not None:
            # no session log: the final result line, which a stopped agent never prints
            run.native = native_usage_of(watcher.final_usage, "agent_result_line")
    if run.exit_code in (126, 127) and not agent.runs_task_solution:
        # the agent's program (a CLI we installed, a script we copied in) could not be run:
        # nothing was done, so nothing is graded, and the attempt is retried as an install
        # failure. The oracle's solve.sh exiting 127 is the task's own command not found: the
        # verifier grades what it left, and the exit code is in result.json.
        run.cannot_run = True
    if run.exit_code == 137 and not run.stopped:
        # SIGKILL that we did not send: most often the task's memory_mb is too small for the agent
        run.oom_killed = bool(await loop.run_in_executor(None, sandbox.oom_kills))
    return run


async def _watch(
    run: AgentRun,
    agent: Agent,
    task: Task,
    command: AgentCommand,
    env: dict[str, str],
    sandbox: Sandbox,
    attempt_dir: Path,
    watcher: OutputWatcher,
    budget_spent: asyncio.Event,
    secrets: list[str],
    *,
    activity: Callable[[], tuple[int, int]] | None,
    idle_timeout: float | None,
) -> ExecResult:
    """The agent's command, waited for until it ends, its time is up, it goes idle or its budget is
    spent; the three stops are marked on `run` and the agent's processes are stopped."""
    loop = asyncio.get_running_loop()
    log = attempt_dir / "agent" / agent.log_name
    log.parent.mkdir(parents=True, exist_ok=True)
    fut = loop.run_in_executor(
        None,
        lambda: sandbox.exec(
            command.argv,
            user=command.user,
            workdir=command.workdir,
            env=env,
            stdout_path=log,
            stderr_path=log,
            on_stdout=watcher.feed,
            secrets=secrets,
        ),
    )
    started = time.monotonic()
    run.timeout_s = timeout = task.agent.timeout_sec
    watch = None
    if idle_timeout is not None and agent.needs_model:
        watch = IdleWatch(
            idle_timeout, lambda: watcher.last_output, lambda: watcher.open_tools, activity
        )
    idle_limit: float | None = None
    budget_wait: asyncio.Future[Any] = asyncio.ensure_future(budget_spent.wait())
    try:
        deadline = None if timeout is None else started + timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            step = (
                left
                if watch is None
                else CHECK_EVERY_S
                if left is None
                else min(left, CHECK_EVERY_S)
            )
            done, _ = await asyncio.wait(
                {fut, budget_wait},
                timeout=None if step is None else max(step, 0),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if done or (left is not None and step is not None and left <= step):
                break
            if watch is not None and (idle_limit := watch.expired()) is not None:
                break
        if fut not in done:
            if budget_wait in done:
                run.budget_stopped = True
                await asyncio.sleep(BUDGET_STOP_GRACE_S)
            elif idle_limit is not None and watch is not None:
                run.idle_stopped = True
                run.idle_error = idle_error(idle_limit, watch.silent_s, watcher.tool_calls)
                run.idle_info = idle_stop_info(watch, idle_limit, watcher.tool_calls)
            else:
                run.timed_out = True
            if not fut.done():
                await loop.run_in_executor(None, sandbox.stop_processes)
        result = await fut
    finally:
        budget_wait.cancel()
    run.elapsed_s = time.monotonic() - started
    return result


async def _keep_logs(
    agent: Agent, sandbox: Sandbox, attempt_dir: Path, secrets: list[str]
) -> list[Path] | None:
    """The agent's own session log, kept in the attempt's agent/sessions folder for every attempt
    of an agent that writes one (the trial page's event stream reads it beside the proxy's
    trajectory; a budget's subagent share is counted from it); None for an agent without one."""
    if not agent.needs_model or not agent.session_logs:
        return None
    return await asyncio.get_running_loop().run_in_executor(
        None,
        keep_session_logs,
        sandbox,
        agent.session_logs,
        attempt_dir / "agent" / "sessions",
        secrets,
        agent.session_store,
    )


async def _take_counted(
    run: AgentRun,
    proxy: ModelGateway,
    key: str,
    agent: Agent,
    attempt_dir: Path,
    budget: TrialBudget,
    watcher: OutputWatcher,
    logs: list[Path] | None,
) -> None:
    """What the proxy counted for the attempt, once its calls still in flight settled; for a trial
    with a budget, its subagents' share from the agent's own session log (`logs`, as kept)."""
    if left := await calls_settled(proxy, attempt_dir.name):
        run.usage_incomplete = {"calls_in_flight": left, "waited_sec": CALLS_SETTLE_S}
    usage = run.counted = proxy.unregister(key)
    if usage is None:
        return
    if usage.stopped_by and not run.timed_out:
        run.budget_stopped = True
    if not budget.active:
        return
    subagents = watcher.subagents()
    if logs is not None:
        subagents = agent.subagents_from(logs) or subagents
    run.trial_budget = TrialBudgetRecord(
        budget={"tokens": budget.tokens, "turns": budget.turns},
        source=budget.source,
        used={"tokens": usage.total_tokens, "turns": usage.turns},
        subagents=subagents,
        stopped_by=usage.stopped_by,
        stopped_at=usage.stopped_at,
        refused_calls=usage.refused_calls,
    )


def _solution_text(task: Task) -> str | None:
    if task.solution_dir is None or not (task.solution_dir / "solve.sh").is_file():
        return None
    return (task.solution_dir / "solve.sh").read_text(errors="replace")
