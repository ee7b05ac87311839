"""The console reporter: a subscriber that words a job's events as BenchFlow's lines.

The wording is pure: one function per event class (`WORDS`) returns the event's lines, each a
line or a warning; the Reporter prints them on its Terminal (runs/jobs/terminal.py), which on a
terminal (and not --quiet) also shows the running trials live below the lines.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, NamedTuple

from runs import events as ev
from runs.jobs.terminal import Terminal
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


class How(NamedTuple):
    """What the wording depends on besides the event."""

    quiet: bool  # --quiet: no progress lines (utilization, heartbeats)
    color: bool  # a terminal: the final block in colour


LINE, WARN = "line", "warn"  # a warning goes to stderr (or, under the live table, in yellow)
Said = tuple[str, str]  # (LINE or WARN, text)


def _names(tasks: tuple[str, ...]) -> str:
    return ", ".join(tasks[:3]) + (f" and {len(tasks) - 3} more" if len(tasks) > 3 else "")


def installing(e: ev.AgentInstalling, how: How) -> list[Said]:
    return [(LINE, f"Installing {e.package}@{e.version} (once, into {e.prefix})…")]


def ripgrep(e: ev.RipgrepFetching, how: How) -> list[Said]:
    return [
        (LINE, f"Fetching ripgrep for OpenCode's grep and glob tools (from {e.package}, once)…")
    ]


def tasks_warned(e: ev.TasksWarned, how: How) -> list[Said]:
    field = e.field + ": " if e.field else ""
    return [(WARN, f"warning: {field}{e.message} ({_names(e.tasks)})")]


def agent_lacks(e: ev.AgentLacks, how: How) -> list[Said]:
    what = "MCP servers" if e.field.endswith("mcp_servers") else "skills"
    return [
        (
            WARN,
            f"warning: {e.field}: -a {e.agent} takes no {what}, so it runs without them; "
            f"claude, codex and opencode are given them ({_names(e.tasks)})",
        )
    ]


def login_lent(e: ev.LoginLent, how: How) -> list[Said]:
    return [
        (
            WARN,
            f"note: -a {e.agent} -m {e.model} runs on this machine's Claude login: the agent in "
            f"each sandbox holds {e.held} and calls Anthropic directly, not through the proxy "
            "(export ANTHROPIC_API_KEY, or pass -m anthropic/..., to keep it out)",
        )
    ]


def resources_reduced(e: ev.ResourcesReduced, how: How) -> list[Said]:
    parts = []
    if e.cpus < e.requested_cpus:
        parts.append(f"{e.requested_cpus:g} CPUs (this machine has {e.cpus:g})")
    if e.memory_mb < e.requested_memory_mb:
        parts.append(f"{e.requested_memory_mb} MB of memory (this machine has {e.memory_mb})")
    return [
        (
            WARN,
            f"warning: task {e.task_name} asks for {' and '.join(parts)}: it runs with what there "
            "is; result.json's sandbox_resources has both figures",
        )
    ]


def chosen(e: ev.JobChosen, how: How) -> list[Said]:
    if e.resumed:
        return [(LINE, f"Resuming into existing job directory: {e.job_name} {RESUME_NOTE}")]
    if e.latest is not None and e.mismatch_key is not None:
        return [
            (
                LINE,
                f"Starting a new job {e.job_name}: the latest job in {e.jobs_dir} ({e.latest}) "
                f"ran {e.mismatch_key}={e.mismatch_old!r} (this run: {e.mismatch_new!r}). "
                f"Its results stay in their own job; bench eval resume {Path(e.jobs_dir) / e.latest} "
                "finishes it with its own settings.",
            )
        ]
    return []


def started(e: ev.JobStarted, how: How) -> list[Said]:
    said = [(LINE, job_line(e.total, e.done, e.to_run, e.concurrency, e.warm_pool))]
    s = e.settings
    card = [
        line
        for line in (
            caps_card_line(s.get("budget") or {}),
            per_trial_card_line(s.get("token_budget"), s.get("turn_budget"), list(e.task_budgets)),
        )
        if line
    ]
    if card:
        model = s.get("model")
        said.append((LINE, f"Run card: {s.get('agent')}" + (f", model {model}" if model else "")))
        said += [(LINE, line) for line in card]
    return said


def signal(e: ev.SignalReceived, how: How) -> list[Said]:
    return [(WARN, f"{e.name}: stopping the running trials and removing their sandboxes…")]


def budget_reached(e: ev.BudgetReached, how: How) -> list[Said]:
    verb = "cancelled" if e.cancels_running else "finish"
    return [(LINE, f"{e.reason}; stopping: no new rollouts, {e.running} running trial(s) {verb}")]


def cost_unknown(e: ev.CostUnknown, how: How) -> list[Said]:
    return [(WARN, USD_UNKNOWN_WARNING)]


def retry(e: ev.RetryScheduled, how: How) -> list[Said]:
    return [
        (LINE, f"Retrying {e.trial_name} (attempt {e.attempt}): {e.error[:60]}"),
        (LINE, f"Retry backoff: {e.backoff_s:.1f}s before attempt {e.attempt}"),
    ]


def out_of_memory(e: ev.AgentOutOfMemory, how: How) -> list[Said]:
    return [
        (
            LINE,
            f"[{e.trial_name}] the agent was killed for lack of memory (memory_mb={e.memory_mb:g}); "
            "fix: raise memory_mb in the task's [environment]",
        )
    ]


def workers(e: ev.WorkersChosen, how: How) -> list[Said]:
    if e.workers:
        said = [
            (
                LINE,
                f"Attempts run on {len(e.workers)} worker(s) of queue {e.queue}, {e.slots} slots: "
                f"{', '.join(e.workers)}; -j caps how many run at once",
            )
        ]
    else:
        said = [
            (
                LINE,
                f"Attempts wait in queue {e.queue} until a worker takes them: no `bench worker` "
                "is up yet",
            )
        ]
    if e.adopted:
        names = ", ".join(sorted(e.adopted))
        said.append(
            (LINE, f"Still running on workers from the earlier run (not run again): {names}")
        )
    return said


def lost(e: ev.AttemptLost, how: How) -> list[Said]:
    where = f" (the lost run is in .lost/{e.rollout_name})" if e.rollout_name else ""
    return [
        (
            LINE,
            f"[{e.trial_name}] worker {e.worker or '?'} stopped renewing its lease: the attempt "
            f"runs again on another worker{where}",
        )
    ]


def finished(e: ev.AttemptFinished, how: How) -> list[Said]:
    said = []
    if e.result.error_category == "trial_budget":
        said.append((LINE, f"[{e.trial_name}] {e.result.error}"))
    said.append((LINE, summary_render.trial_line(e.result.to_json())))
    return said


def scored(e: ev.AttemptScored, how: How) -> list[Said]:
    if e.error:
        return [(WARN, f"[{e.trial_name}] review: {e.error}; its reward stays the verifier's")]
    quality = f"gated {e.gated_quality or 0:.2f}, raw {e.raw_quality or 0:.2f}"
    return [(LINE, f"[{e.trial_name}] reviewed: {e.band} ({quality}); reward {e.result.reward}")]


def utilization(e: ev.UtilizationReported, how: How) -> list[Said]:
    return [] if how.quiet else [(LINE, line) for line in utilization_lines(e)]


def heartbeat(e: ev.Heartbeat, how: How) -> list[Said]:
    if how.quiet:
        return []
    last = f" (last: {e.last_tool[:60]})" if e.last_tool else ""
    return [
        (LINE, f"[{e.trial_name}]   … {e.elapsed_s / 60:.1f}min, {e.tool_calls} tool calls{last}")
    ]


def job_finished(e: ev.JobFinished, how: How) -> list[Said]:
    job_dir, summary = e.job_dir, e.summary
    if e.signal is not None:
        word = "Interrupted" if e.signal == "SIGINT" else "Terminated"
        if e.stopped_running == 0:
            what = "no trial was running."
        elif e.stopped_running == 1:
            what = "stopped 1 running trial and removed its sandbox."
        else:
            what = f"stopped {e.stopped_running} running trials and removed their sandboxes."
        return [
            (LINE, f"{word} ({e.signal}): {what}"),
            (LINE, f"Partial summary (what finished): {shown(Path(job_dir) / 'summary.json')}"),
            (LINE, f"Resume with: bench eval resume {shown(job_dir)}"),
        ]
    said = [(LINE, summary_render.job_complete_line(summary, e.plan_total, e.elapsed_s))]
    if after := summary_render.trial_budget_card_line(summary):
        said += [(LINE, "Run card, after the run:"), (LINE, after)]
    said.append((LINE, ""))
    said += [
        (LINE, line)
        for line in summary_render.render_final_block(
            summary, job_dir, reused=e.reused, elapsed_s=e.elapsed_s, color=how.color
        )
    ]
    if e.resumed:
        said.append((WARN, resumed_line(e)))
    return said


def resumed_line(e: ev.JobFinished) -> str:
    again = "Pass --fresh (or a new --job) for a new run."
    if e.kept_out:
        why = "budget" if e.has_job_cap else "stopped"
        return (
            f"Resumed job {e.job_dir}: {e.reused} finished task(s) reused, {e.ran_now} ran now, "
            f"{e.kept_out} kept from running ({why}). {again}"
        )
    if e.ran_now == 0:
        return (
            f"Resumed job {e.job_dir}: all {e.reused} task(s) were already finished, so nothing ran "
            f"and these are the earlier results. {again}"
        )
    return (
        f"Resumed job {e.job_dir}: {e.reused} finished task(s) reused, {e.ran_now} ran now. {again}"
    )


# the events a console has something to say about; the others are passed over
WORDS: dict[type[ev.Event], Callable[[Any, How], list[Said]]] = {
    ev.AgentInstalling: installing,
    ev.RipgrepFetching: ripgrep,
    ev.TasksWarned: tasks_warned,
    ev.AgentLacks: agent_lacks,
    ev.LoginLent: login_lent,
    ev.ResourcesReduced: resources_reduced,
    ev.JobChosen: chosen,
    ev.JobStarted: started,
    ev.SignalReceived: signal,
    ev.BudgetReached: budget_reached,
    ev.CostUnknown: cost_unknown,
    ev.RetryScheduled: retry,
    ev.AgentOutOfMemory: out_of_memory,
    ev.WorkersChosen: workers,
    ev.AttemptLost: lost,
    ev.AttemptFinished: finished,
    ev.AttemptScored: scored,
    ev.Heartbeat: heartbeat,
    ev.UtilizationReported: utilization,
    ev.JobFinished: job_finished,
}


class Reporter:
    """Prints the lines of a job's events (a Bus subscriber); on a TTY (and not --quiet) its
    terminal shows the running trials live below them."""

    def __init__(
        self, *, quiet: bool = False, stream: IO[str] | None = None, err: IO[str] | None = None
    ):
        self.terminal = Terminal(quiet=quiet, stream=stream, err=err)
        self.quiet = quiet
        self.how = How(quiet=quiet, color=self.terminal.tty)

    def __call__(self, event: ev.Event) -> None:
        words = WORDS.get(type(event))
        if words is None:
            return
        for level, text in words(event, self.how):
            if level == WARN:
                self.terminal.warn(text)
            else:
                self.terminal.line(text)
