"""Running the agent inside its sandbox: its model calls through the proxy, its time limit and budget.

The agent is stopped at its wall-clock limit or, within about a second, once the proxy refuses a
call for the trial's budget; either way the verifier then grades what it left. A Claude login calls
its provider directly: its usage comes from Claude Code's own session log, read once it stops
(runs/agents/login_usage.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runs.agents.base import Agent
from runs.agents.controls import OracleAgent, ScriptAgent
from runs.agents.login_usage import read_session_usage, record_native_usage
from runs.agents.session_logs import keep_session_logs
from runs.gateway import CALLS_SETTLE_S, ModelGateway, calls_settled
from runs.sandboxes.docker import Sandbox
from runs.sandboxes.netns import LoopbackRelay, listen_in_netns
from runs.secrets import redact_obj, secret_values
from runs.tasks.load import Task
from runs.trials.idle import CHECK_EVERY_S, IdleWatch, record_idle_stop

BUDGET_STOP_GRACE_S = 0.5  # lets the agent print its last lines before it is stopped


@dataclass
class TrialBudget:
    tokens: int | None
    turns: int | None
    source: dict[str, str | None]

    @property
    def active(self) -> bool:
        return self.tokens is not None or self.turns is not None


def trial_budget_for(task: Task, token_budget: int | None, turn_budget: int | None) -> TrialBudget:
    """A measure the run sets replaces the task's."""
    tokens = token_budget if token_budget is not None else task.agent.token_budget
    turns = turn_budget if turn_budget is not None else task.agent.turn_budget
    return TrialBudget(
        tokens,
        turns,
        {
            "tokens": "run"
            if token_budget is not None
            else ("task" if tokens is not None else None),
            "turns": "run" if turn_budget is not None else ("task" if turns is not None else None),
        },
    )


def trial_secrets(agent_env: dict[str, str], task: Task) -> list[str]:
    """The secret values a trial's agent or tests are given (--agent-env, the task's sandbox and
    verifier env): replaced wherever the trial's output is written down."""
    return secret_values(agent_env, task.sandbox.env, task.verifier.env)


def uses_proxy(agent: Agent, model: str | None) -> bool:
    """Whether the agent's model calls go through our proxy (a Claude login's do not)."""
    if agent.needs_model:
        return getattr(agent, "needs_proxy", True)
    return isinstance(agent, ScriptAgent) and bool(model)


def budget_bypass(agent: Agent, model: str | None, agent_env: dict[str, str]) -> str | None:
    """Why the agent's model calls would go around the proxy (the same rule as bench run's check)."""
    from runs.jobs.preflight import BASE_URL_VARS

    if getattr(agent, "login", False):
        return "a Claude login calls Anthropic directly"
    if bypass := [k for k in agent_env if k in BASE_URL_VARS]:
        return f"--agent-env {bypass[0]} gives the agent an endpoint of its own"
    if not agent.needs_model and not model and agent.name.startswith("script:"):
        return "a script agent without -m may call a model of its own"
    return None


def budget_stop_text(usage: Any, budget: TrialBudget) -> str:
    measure = usage.stopped_by
    at = usage.stopped_at or {"tokens": usage.total_tokens, "turns": usage.turns}
    limit = budget.tokens if measure == "tokens" else budget.turns
    unit = "token" if measure == "tokens" else "turn"
    return (
        f"trial budget reached: the {unit} budget of {limit:,} is spent ({at['tokens']:,} tokens, "
        f"{at['turns']} turn{'' if at['turns'] == 1 else 's'} used when the model proxy refused the next call); the agent was stopped "
        "and the verifier graded what it left"
    )


class OutputWatcher:
    """Reads the agent's JSON event lines as they stream, counting tool calls (in the exec thread)."""

    def __init__(self, agent: Agent, on_tool: Callable[[str], None]):
        self.agent, self.on_tool = agent, on_tool
        self._buf = b""
        self.last_output: float | None = (
            None  # monotonic time of the last output, for the idle watchdog
        )
        self.open_tools = 0  # tool calls started and not yet reported finished
        self.tool_calls = 0
        self.last_tool: str | None = None
        self.final_usage: dict[str, Any] | None = None
        self.session_id: str | None = None  # Claude Code's: the name of its session log
        # Claude Code's own log of its calls: message id -> (tokens, made by a subagent?)
        self.calls: dict[str, tuple[int, bool]] = {}

    def subagents(self) -> dict[str, int] | None:
        """What subagents used, from the agent's own log (Claude Code marks a subagent's calls)."""
        if not self.calls:
            return None
        sub = [tokens for tokens, is_sub in self.calls.values() if is_sub]
        return {
            "turns": len(sub),
            "tokens": sum(sub),
            "of_turns": len(self.calls),
            "of_tokens": sum(tokens for tokens, _ in self.calls.values()),
        }

    def _note_call(self, event: dict[str, Any]) -> None:
        message = event.get("message") or {}
        usage = message.get("usage") if isinstance(message, dict) else None
        if event.get("type") != "assistant" or not isinstance(usage, dict) or not message.get("id"):
            return
        tokens = sum(
            int(usage.get(k) or 0)
            for k in (
                "input_tokens",
                "cache_read_input_tokens",
                "cache_creation_input_tokens",
                "output_tokens",
            )
        )
        if (
            tokens
        ):  # a message without usage is the CLI's own (an API error it shows), no model call
            self.calls[message["id"]] = (tokens, event.get("parent_tool_use_id") is not None)

    def feed(self, chunk: bytes) -> None:
        self.last_output = time.monotonic()
        self._buf += chunk
        if len(self._buf) > 4 << 20:  # a line this long is no event of ours: drop it
            self._buf = self._buf[-(1 << 20) :]
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            line = line.strip()
            if not line.startswith(b"{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("type") == "result" and isinstance(event.get("usage"), dict):
                self.final_usage = event["usage"]
            if self.session_id is None and isinstance(event.get("session_id"), str):
                self.session_id = event["session_id"]
            self._note_call(event)
            opened: int = getattr(self.agent, "tool_progress", lambda _e: 0)(event)
            self.open_tools = max(0, self.open_tools + opened)
            titles: list[str] = getattr(self.agent, "tool_title", lambda _e: [])(event)
            for title in titles:
                self.tool_calls += 1
                self.last_tool = title
                self.on_tool(title)


@dataclass
class AgentRun:
    timed_out: bool = False
    idle_stopped: bool = False  # by the idle watchdog
    budget_stopped: bool = False
    refused: bool = (
        False  # not started (agent_budget, a CLI that cannot run): reward withheld, not graded
    )

    @property
    def stopped(self) -> bool:
        """Stopped by us (time limit, idle watchdog, trial budget): graded on what it left."""
        return self.timed_out or self.idle_stopped or self.budget_stopped


async def run_agent(
    *,
    agent: Agent,
    task: Task,
    instruction: str,
    sandbox: Sandbox,
    attempt_dir: Path,
    agent_env: dict[str, str],
    result: dict[str, Any],
    proxy: ModelGateway | None,
    model: str | None,
    budget: TrialBudget,
    on_tool: Callable[[str], None],
    idle_timeout: float | None = None,
) -> AgentRun:
    """Run the agent's command; fills result's usage, tool calls, errors and trial_budget.

    An agent with a model is also stopped by the idle watchdog after `idle_timeout` seconds
    without output or model calls (runs/trials/idle.py); None turns it off."""
    outcome = AgentRun()
    if agent.needs_model and model:
        result["model"] = model  # a login's too, though its calls bypass the proxy
    command = agent.command(task, instruction)
    if command is None:
        return outcome
    if budget.active and (why := budget_bypass(agent, model, agent_env)):
        # the run's own budget was refused before the job; a task's is refused here, per trial
        result["error"] = (
            f"agent integration failure [agent_budget]: {why}, so the model proxy cannot count its calls "
            "and the task's per-trial budget cannot hold; fix: give the agent an API key (a "
            "provider-prefixed -m) so its calls go through the proxy"
        )
        result["error_category"] = "agent_integration"
        result["integration_failure_info"] = {"cause": "agent_budget", "message": why}
        outcome.refused = True
        return outcome
    loop = asyncio.get_running_loop()
    result["n_prompts"] = result.get("n_prompts", 0) + 1
    log = attempt_dir / "agent" / agent.log_name
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**agent_env, **command.env}
    secrets = trial_secrets(agent_env, task)
    budget_spent = asyncio.Event()
    key: str | None = None
    stop_serving: Callable[[], Awaitable[None]] | None = None
    if proxy is not None and uses_proxy(agent, model):
        (attempt_dir / "trajectory").mkdir(exist_ok=True)
        key = proxy.register(
            attempt_id=attempt_dir.name,
            model=model,
            log_path=attempt_dir / "trajectory" / "llm_trajectory.jsonl",
            token_budget=budget.tokens,
            turn_budget=budget.turns,
            solution_text=_solution_text(task),
            on_budget_spent=lambda _id: loop.call_soon_threadsafe(budget_spent.set),
            secrets=secrets,
        )
        env.update(agent.model_env(key))
        secrets = [*secrets, key]
        # The proxy serves a socket made inside the sandbox's network namespace: the agent's
        # 127.0.0.1:PORT is the proxy itself, with no relay in between.
        pid = await loop.run_in_executor(None, sandbox.pid)
        sock = await loop.run_in_executor(None, listen_in_netns, pid, proxy.port)
        try:
            stop_serving = await proxy.serve(sock)
        except BaseException:
            sock.close()
            raise
    relays = [LoopbackRelay(port) for port in agent.loopback_ports()]
    try:
        if relays:
            pid = await loop.run_in_executor(None, sandbox.pid)
            for extra in relays:
                await extra.start(pid, extra.target_port)
    except BaseException:  # what was opened for this trial is closed again, whatever failed
        await _close_openings(stop_serving, relays)
        raise

    def tool_seen(title: str) -> None:
        loop.call_soon_threadsafe(on_tool, redact_obj(title, secrets))

    watcher = OutputWatcher(agent, tool_seen)
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
    t = time.monotonic()
    timeout = task.agent.timeout_sec
    watch = None
    if idle_timeout is not None and agent.needs_model:
        activity = (
            (lambda: proxy.activity(attempt_dir.name))
            if key is not None and proxy is not None
            else None
        )
        watch = IdleWatch(
            idle_timeout, lambda: watcher.last_output, lambda: watcher.open_tools, activity
        )
    idle_limit: float | None = None
    budget_wait: asyncio.Future[Any] = asyncio.ensure_future(budget_spent.wait())
    try:
        waiting: set[asyncio.Future[Any]] = {fut, budget_wait}
        deadline = None if timeout is None else t + timeout
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
                waiting,
                timeout=None if step is None else max(step, 0),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if done or (left is not None and step is not None and left <= step):
                break
            if watch is not None and (idle_limit := watch.expired()) is not None:
                break
        if fut not in done:
            if budget_wait in done:
                outcome.budget_stopped = True
                await asyncio.sleep(BUDGET_STOP_GRACE_S)
            elif idle_limit is not None:
                outcome.idle_stopped = True
            else:
                outcome.timed_out = True
            if not fut.done():
                await loop.run_in_executor(None, sandbox.stop_processes)
        exec_result = await fut
    finally:
        budget_wait.cancel()
        await _close_openings(stop_serving, relays)
    result["agent_exit_code"] = exec_result.exit_code
    result["n_tool_calls"] = result.get("n_tool_calls", 0) + watcher.tool_calls
    result["last_tool_call"] = redact_obj(watcher.last_tool, secrets) or result.get(
        "last_tool_call"
    )
    if outcome.idle_stopped and watch is not None and idle_limit is not None:
        record_idle_stop(result, watch, idle_limit, watcher.tool_calls)
    if outcome.timed_out:
        result["error"] = f"agent timed out after {timeout:g}s (prompt exceeded wall-clock budget)"
        result["error_category"] = "timeout"
        result["agent_timeout_info"] = {
            "timeout_sec": timeout,
            "elapsed_sec": round(time.monotonic() - t, 1),
        }
    if key is not None and proxy is not None:
        if left := await calls_settled(proxy, attempt_dir.name):
            result["usage_incomplete_info"] = {
                "calls_in_flight": left,
                "waited_sec": CALLS_SETTLE_S,
            }
        usage = proxy.unregister(key)
        subagents = watcher.subagents()
        if (
            budget.active and agent.session_logs
        ):  # kept for a trial with a budget, as BenchFlow does
            files = await loop.run_in_executor(
                None,
                keep_session_logs,
                sandbox,
                agent.session_logs,
                attempt_dir / "agent" / "sessions",
                secrets,
                agent.session_store,
            )
            subagents = agent.subagents_from(files) or subagents
        _record_usage(result, usage, budget, outcome, subagents)
    elif (
        agent.needs_model
    ):  # a login: its calls bypass the proxy, so the agent's own log is all there is
        native, source = None, "agent_session_log"
        config_dir = env.get("CLAUDE_CONFIG_DIR")
        if config_dir and watcher.session_id:
            native = await loop.run_in_executor(
                None, read_session_usage, sandbox, config_dir, watcher.session_id
            )
        if (
            native is None
        ):  # no session log: the final result line, which a stopped agent never prints
            native, source = watcher.final_usage, "agent_result_line"
        if native is not None:
            record_native_usage(result, native, source)
    if exec_result.exit_code == 137 and not (
        outcome.timed_out or outcome.idle_stopped or outcome.budget_stopped
    ):
        # SIGKILL that we did not send: most often the task's memory_mb is too small for the agent
        kills = await loop.run_in_executor(None, sandbox.oom_kills)
        if kills:
            result["agent_oom_killed"] = True
    if (
        exec_result.exit_code in (126, 127)
        and not result.get("error")
        and not isinstance(agent, OracleAgent)
    ):
        # the agent's program (a CLI we installed, a script we copied in) could not be run:
        # nothing was done, so nothing is graded, and the attempt is retried as an install
        # failure. The oracle's solve.sh exiting 127 is the task's own command not found: the
        # verifier grades what it left, and the exit code is in result.json.
        result["error"] = (
            f"install failed: the agent's command could not run (exit {exec_result.exit_code})"
        )
        result["error_category"] = "install_failure"
        outcome.refused = True
    return outcome


async def _close_openings(
    stop_serving: Callable[[], Awaitable[None]] | None, relays: list[LoopbackRelay]
) -> None:
    if stop_serving is not None:
        await stop_serving()
    for relay in relays:
        await relay.close()


def _solution_text(task: Task) -> str | None:
    if task.solution_dir is None or not (task.solution_dir / "solve.sh").is_file():
        return None
    return (task.solution_dir / "solve.sh").read_text(errors="replace")


def add_proxy_usage(ar: dict[str, Any], usage: Any) -> None:
    """Add what the proxy counted for an attempt (proxy.registry.AttemptUsage) to an agent_result:
    the steps of a multi-step trial add up, and so does a cancelled attempt's record."""
    add = lambda k, v: (ar.get(k) or 0) + v  # noqa: E731
    ar.update(
        n_input_tokens=add("n_input_tokens", usage.input_tokens),
        n_output_tokens=add("n_output_tokens", usage.output_tokens),
        n_cache_read_tokens=add("n_cache_read_tokens", usage.cache_read_tokens),
        n_cache_creation_tokens=add("n_cache_creation_tokens", usage.cache_creation_tokens),
        total_tokens=add("total_tokens", usage.total_tokens),
        usage_source=usage.usage_source,
        price_source=usage.price_source,
        n_calls=add("n_calls", usage.turns),
    )
    if usage.cost_usd is not None:
        ar["cost_usd"] = round((ar.get("cost_usd") or 0.0) + usage.cost_usd, 8)
    ar["busy_seconds"] = round((ar.get("busy_seconds") or 0.0) + usage.busy_seconds, 3)


# What the proxy saw go wrong with the provider, most telling first: each error class the
# proxy counted is the trial's error_category, with this line as its error.
_PROVIDER_ERRORS = {
    "provider_rate_limit": "provider rate limited: HTTP 429 from the model provider ({})",
    "provider_auth": "the model provider refused the credential (HTTP 401/403): {}",
    "api_error": "provider api error [server/transient] {}",
    "infra_failure": "connection lost to the model provider (upstream unreachable): {}",
}


def provider_error(errors: Collection[str], status_text: str) -> tuple[str, str] | None:
    """The (error, error_category) for the error classes the proxy counted, or None."""
    for category, text in _PROVIDER_ERRORS.items():
        if category in errors:
            return text.format(status_text)[:500], category
    if "provider_rejected" in errors:
        # another 4xx: a 400 is most often a context too long; 404/422 an unknown model or a bad
        # request. Permanent either way: a retry would be rejected the same way.
        if status_text.startswith("HTTP 400"):
            return f"provider rejected request: {status_text}"[:500], "provider_rejected"
        return f"provider api error [rejected/permanent] {status_text}"[:500], "api_error"
    return None


def _record_usage(
    result: dict[str, Any],
    usage: Any,
    budget: TrialBudget,
    outcome: AgentRun,
    subagents: dict[str, int] | None = None,
) -> None:
    if usage is None:
        return
    add_proxy_usage(result["agent_result"], usage)
    if usage.errors and not result.get("error"):
        found = provider_error(usage.errors, usage.last_error or "")
        if found is not None:
            result["error"], result["error_category"] = found
    if budget.active:
        result["trial_budget"] = {
            "budget": {"tokens": budget.tokens, "turns": budget.turns},
            "source": budget.source,
            "used": {"tokens": usage.total_tokens, "turns": usage.turns},
            "subagents": subagents,
            "stopped_by": usage.stopped_by,
            "stopped_at": usage.stopped_at,
            "refused_calls": usage.refused_calls,
        }
        if usage.stopped_by and not outcome.timed_out:
            outcome.budget_stopped = True
            result["error"] = budget_stop_text(usage, budget)
            result["error_category"] = "trial_budget"
