"""The console reporter: a subscriber that words a job's events as BenchFlow's lines.

On a terminal (and not --quiet) it also shows the running trials live below the lines.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from runs import events as ev
from runs.results import summary_render

IDLE_SLOTS_WARN = 0.5  # slots idle on average while tasks waited
MODEL_RARE_WARN = 0.10  # agents had a model request in flight less than this share of their time
USD_UNKNOWN_WARNING = (
    "A rollout finished without a USD cost; --max-cost-usd counts only rollouts that report one "
    "(see summary.json budget.spent)."
)


def shown(path: str | Path) -> str:
    """Paths in messages: as the user gave them, with ./ before a relative one."""
    text = str(path)
    return text if Path(text).is_absolute() or text.startswith(".") else f"./{text}"


def effective_warm_pool(warm_pool: int, concurrency: int) -> int:
    """Prepared sandboxes wait beside the running ones; with one slot there is nothing to overlap."""
    return max(0, min(warm_pool, concurrency - 1))


def job_line(total: int, done: int, to_run: int, concurrency: int, warm_pool: int) -> str:
    warm = effective_warm_pool(warm_pool, concurrency)
    noun = "task" if total == 1 else "tasks"
    return (
        f"Job: {total} {noun}, {done} done, {to_run} to run "
        f"(concurrency={concurrency}, warm pool: up to {warm} prepared sandboxes)"
    )


def _minutes(seconds: float) -> str:
    return f"{max(1, round(seconds / 60))} min"


def utilization_lines(u: ev.UtilizationReported) -> list[str]:
    running = u.setup + u.agent
    noun = "slot" if u.slots == 1 else "slots"
    line = (
        f"Utilization, last {_minutes(u.window_s)}: {running:.1f} of {u.slots} {noun} running "
        f"({u.setup:.1f} in setup, {u.agent:.1f} with the agent); {u.waiting} tasks waiting"
    )
    if u.model_share is not None and u.model_at_once is not None:
        line += (
            f"; a model request in flight {u.model_share:.0%} of the agents' time "
            f"({u.model_at_once:.1f} requests at once on average)"
        )
    lines = [line]
    idle = u.slots - running
    if idle >= IDLE_SLOTS_WARN and u.waited:
        lines.append(
            f"  warning: {idle:.1f} of {u.slots} {noun} sat idle on average while tasks waited; "
            "sandbox set-up (image builds, container starts) is holding the run back"
        )
    if u.model_share is not None and u.model_share < MODEL_RARE_WARN:
        lines.append(
            f"  warning: the agents were waiting on the model only {u.model_share:.0%} of their time; "
            "their own tools (the sandbox) set the pace, so more -j needs more CPU and memory, not model quota"
        )
    return lines


def per_trial_card_line(
    run_tokens: int | None, run_turns: int | None, task_budgets: list[tuple[int | None, int | None]]
) -> str | None:
    """The run card's `Per trial:` line before the run; None when no trial has a budget."""
    sizes = []
    if run_tokens is not None:
        sizes.append(f"{run_tokens:,} tokens")
    if run_turns is not None:
        sizes.append(f"{run_turns:,} turn{'' if run_turns == 1 else 's'}")
    if sizes:
        whose = "the run's"
        task_set = [
            b
            for b in task_budgets
            if (run_tokens is None and b[0] is not None) or (run_turns is None and b[1] is not None)
        ]
        if task_set:
            whose += f"; {len(task_set)} task(s) set the other measure"
    else:
        task_set = [b for b in task_budgets if b[0] is not None or b[1] is not None]
        if not task_set:
            return None
        whose = f"set by {len(task_set)} of {len(task_budgets)} tasks"
    budget = " and ".join(sizes) if sizes else "per task"
    return (
        f"  Per trial: budget {budget} ({whose}), a turn being one model call; the model proxy counts every call "
        "of the trial, subagents' and side calls included, refuses the next once a budget is spent, "
        "and the agent is stopped and graded"
    )


def caps_card_line(caps: dict[str, Any]) -> str | None:
    """The run card's `Caps:` line; None without a job cap."""
    parts = []
    if caps.get("max_cost_usd") is not None:
        parts.append(f"${caps['max_cost_usd']:.4f} USD")
    if caps.get("max_tokens") is not None:
        parts.append(f"{caps['max_tokens']:,} tokens")
    if caps.get("max_sandbox_seconds") is not None:
        parts.append(f"{caps['max_sandbox_seconds']:.1f} sandbox-seconds")
    if caps.get("max_rollouts") is not None:
        parts.append(f"{caps['max_rollouts']} rollouts")
    if not parts:
        return None
    return f"  Caps:      {', '.join(parts)} for the whole job, across resumes (summary.json budget has the spend)"


RESUME_NOTE = (
    "(finished tasks are reused; pass a new job_name, or --fresh on the CLI, for a new run)"
)


class Reporter:
    """Prints the lines of a job's events; on a TTY (and not --quiet) shows running trials live."""

    def __init__(
        self, *, quiet: bool = False, stream: IO[str] | None = None, err: IO[str] | None = None
    ):
        self.stream = stream or sys.stdout
        self.err = err or sys.stderr
        self.quiet = quiet
        self.tty = self.stream.isatty() and not quiet
        self.console = (
            Console(file=self.stream, highlight=False, soft_wrap=True) if self.tty else None
        )
        self._live: Live | None = None
        self._rows: Callable[[], list[tuple[str, str, float, int, str]]] | None = None
        self._counts: Callable[[], str] | None = None
        self._handlers: dict[type[ev.Event], Callable[[Any], None]] = {
            ev.AgentInstalling: self._installing,
            ev.RipgrepFetching: self._ripgrep,
            ev.TasksWarned: self._tasks_warned,
            ev.AgentLacks: self._agent_lacks,
            ev.LoginLent: self._login_lent,
            ev.ResourcesReduced: self._resources_reduced,
            ev.JobChosen: self._chosen,
            ev.JobStarted: self._started,
            ev.SignalReceived: self._signal,
            ev.BudgetReached: self._budget_reached,
            ev.CostUnknown: lambda _e: self.warn(USD_UNKNOWN_WARNING),
            ev.RetryScheduled: self._retry,
            ev.AgentOutOfMemory: self._oom,
            ev.WorkersChosen: self._workers,
            ev.AttemptLost: self._lost,
            ev.AttemptFinished: self._finished,
            ev.Heartbeat: self._heartbeat,
            ev.UtilizationReported: self._utilization,
            ev.JobFinished: self._job_finished,
        }

    def __call__(self, event: ev.Event) -> None:
        """The Bus subscriber: events with nothing to say on a console are passed over."""
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    # --- output -----------------------------------------------------------------------------

    def line(self, text: str) -> None:
        if self.console is not None:
            self.console.print(Text(text))
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def warn(self, text: str) -> None:
        if self._live is not None and self.console is not None:
            self.console.print(Text(text, style="yellow"))
        else:
            self.err.write(text + "\n")
            self.err.flush()

    def start_live(
        self, rows: Callable[[], list[tuple[str, str, float, int, str]]], counts: Callable[[], str]
    ) -> None:
        if not self.tty or self.console is None:
            return
        self._rows, self._counts = rows, counts
        self._live = Live(
            self._render(),
            console=self.console,
            refresh_per_second=2,
            transient=True,
            get_renderable=self._render,
        )
        self._live.start()

    def stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _render(self) -> Any:
        table = Table.grid(padding=(0, 2))
        if self._counts is not None:
            table.add_row(Text(self._counts(), style="bold"))
        for name, phase, elapsed, tools, last in (self._rows() if self._rows else [])[:12]:
            detail = f"{phase}, {elapsed / 60:.1f}min, {tools} tool calls" + (
                f" (last: {last[:50]})" if last else ""
            )
            table.add_row(Text(f"  {name}: {detail}", style="dim"))
        return table

    # --- events -----------------------------------------------------------------------------

    def _installing(self, e: ev.AgentInstalling) -> None:
        self.line(f"Installing {e.package}@{e.version} (once, into {e.prefix})…")

    def _ripgrep(self, e: ev.RipgrepFetching) -> None:
        self.line(f"Fetching ripgrep for OpenCode's grep and glob tools (from {e.package}, once)…")

    def _tasks_warned(self, e: ev.TasksWarned) -> None:
        names = ", ".join(e.tasks[:3]) + (
            f" and {len(e.tasks) - 3} more" if len(e.tasks) > 3 else ""
        )
        self.warn(f"warning: {e.field + ': ' if e.field else ''}{e.message} ({names})")

    def _agent_lacks(self, e: ev.AgentLacks) -> None:
        names = ", ".join(e.tasks[:3]) + (
            f" and {len(e.tasks) - 3} more" if len(e.tasks) > 3 else ""
        )
        what = "MCP servers" if e.field.endswith("mcp_servers") else "skills"
        self.warn(
            f"warning: {e.field}: -a {e.agent} takes no {what}, so it runs without them; "
            f"claude, codex and opencode are given them ({names})"
        )

    def _login_lent(self, e: ev.LoginLent) -> None:
        self.warn(
            f"note: -a {e.agent} -m {e.model} runs on this machine's Claude login: the agent in "
            f"each sandbox holds {e.held} and calls Anthropic directly, not through the proxy "
            "(export ANTHROPIC_API_KEY, or pass -m anthropic/..., to keep it out)"
        )

    def _resources_reduced(self, e: ev.ResourcesReduced) -> None:
        parts = []
        if e.cpus < e.requested_cpus:
            parts.append(f"{e.requested_cpus:g} CPUs (this machine has {e.cpus:g})")
        if e.memory_mb < e.requested_memory_mb:
            parts.append(f"{e.requested_memory_mb} MB of memory (this machine has {e.memory_mb})")
        self.warn(
            f"warning: task {e.task_name} asks for {' and '.join(parts)}: it runs with what there is; "
            "result.json's sandbox_resources has both figures"
        )

    def _chosen(self, e: ev.JobChosen) -> None:
        if e.resumed:
            self.line(f"Resuming into existing job directory: {e.job_name} {RESUME_NOTE}")
        elif e.latest is not None and e.mismatch_key is not None:
            self.line(
                f"Starting a new job {e.job_name}: the latest job in {e.jobs_dir} ({e.latest}) "
                f"ran {e.mismatch_key}={e.mismatch_old!r} (this run: {e.mismatch_new!r}). "
                f"Its results stay in their own job; bench eval resume {Path(e.jobs_dir) / e.latest} "
                "finishes it with its own settings."
            )

    def _started(self, e: ev.JobStarted) -> None:
        self.line(job_line(e.total, e.done, e.to_run, e.concurrency, e.warm_pool))
        s = e.settings
        card = [
            line
            for line in (
                caps_card_line(s.get("budget") or {}),
                per_trial_card_line(
                    s.get("token_budget"), s.get("turn_budget"), list(e.task_budgets)
                ),
            )
            if line
        ]
        if card:
            model = s.get("model")
            self.line(f"Run card: {s.get('agent')}" + (f", model {model}" if model else ""))
            for line in card:
                self.line(line)

    def _signal(self, e: ev.SignalReceived) -> None:
        self.warn(f"{e.name}: stopping the running trials and removing their sandboxes…")

    def _budget_reached(self, e: ev.BudgetReached) -> None:
        verb = "cancelled" if e.cancels_running else "finish"
        self.line(f"{e.reason}; stopping: no new rollouts, {e.running} running trial(s) {verb}")

    def _retry(self, e: ev.RetryScheduled) -> None:
        self.line(f"Retrying {e.trial_name} (attempt {e.attempt}): {e.error[:60]}")
        self.line(f"Retry backoff: {e.backoff_s:.1f}s before attempt {e.attempt}")

    def _oom(self, e: ev.AgentOutOfMemory) -> None:
        self.line(
            f"[{e.trial_name}] the agent was killed for lack of memory (memory_mb={e.memory_mb:g}); "
            "fix: raise memory_mb in the task's [environment]"
        )

    def _workers(self, e: ev.WorkersChosen) -> None:
        if e.workers:
            self.line(
                f"Attempts run on {len(e.workers)} worker(s) of queue {e.queue}, {e.slots} slots: "
                f"{', '.join(e.workers)}; -j caps how many run at once"
            )
        else:
            self.line(
                f"Attempts wait in queue {e.queue} until a worker takes them: no `bench worker` "
                "is up yet"
            )
        if e.adopted:
            names = ", ".join(sorted(e.adopted))
            self.line(f"Still running on workers from the earlier run (not run again): {names}")

    def _lost(self, e: ev.AttemptLost) -> None:
        where = f" (the lost run is in .lost/{e.rollout_name})" if e.rollout_name else ""
        self.line(
            f"[{e.trial_name}] worker {e.worker or '?'} stopped renewing its lease: the attempt "
            f"runs again on another worker{where}"
        )

    def _finished(self, e: ev.AttemptFinished) -> None:
        if e.result.error_category == "trial_budget":
            self.line(f"[{e.trial_name}] {e.result.error}")
        self.line(summary_render.trial_line(e.result.to_json()))

    def _utilization(self, e: ev.UtilizationReported) -> None:
        if not self.quiet:  # --quiet: no progress lines
            for line in utilization_lines(e):
                self.line(line)

    def _heartbeat(self, e: ev.Heartbeat) -> None:
        if self.quiet:
            return
        last = f" (last: {e.last_tool[:60]})" if e.last_tool else ""
        self.line(
            f"[{e.trial_name}]   … {e.elapsed_s / 60:.1f}min, {e.tool_calls} tool calls{last}"
        )

    def _job_finished(self, e: ev.JobFinished) -> None:
        job_dir, summary = e.job_dir, e.summary
        if e.signal is not None:
            word = "Interrupted" if e.signal == "SIGINT" else "Terminated"
            if e.stopped_running == 0:
                what = "no trial was running."
            elif e.stopped_running == 1:
                what = "stopped 1 running trial and removed its sandbox."
            else:
                what = f"stopped {e.stopped_running} running trials and removed their sandboxes."
            self.line(f"{word} ({e.signal}): {what}")
            self.line(f"Partial summary (what finished): {shown(Path(job_dir) / 'summary.json')}")
            self.line(f"Resume with: bench eval resume {shown(job_dir)}")
            return
        self.line(summary_render.job_complete_line(summary, e.plan_total, e.elapsed_s))
        if after := summary_render.trial_budget_card_line(summary):
            self.line("Run card, after the run:")
            self.line(after)
        self.line("")
        for line in summary_render.render_final_block(
            summary, job_dir, reused=e.reused, elapsed_s=e.elapsed_s, color=self.tty
        ):
            self.line(line)
        if e.resumed:
            self._resumed(e)

    def _resumed(self, e: ev.JobFinished) -> None:
        again = "Pass --fresh (or a new --job) for a new run."
        if e.kept_out:
            why = "budget" if e.has_job_cap else "stopped"
            self.warn(
                f"Resumed job {e.job_dir}: {e.reused} finished task(s) reused, {e.ran_now} ran now, "
                f"{e.kept_out} kept from running ({why}). {again}"
            )
        elif e.ran_now == 0:
            self.warn(
                f"Resumed job {e.job_dir}: all {e.reused} task(s) were already finished, so nothing ran "
                f"and these are the earlier results. {again}"
            )
        else:
            self.warn(
                f"Resumed job {e.job_dir}: {e.reused} finished task(s) reused, {e.ran_now} ran now. {again}"
            )
