"""What happens in a job, as typed events: emitted once by the code that knows, read by subscribers.

Subscribers are plain callables on a job's `Bus`: the console reporter (runs/jobs/console.py), the
database index (runs/index/subscriber.py), and through the index's event rows the live dashboard and a
worker's report. Events carry facts; every sentence a person reads is made by a reporter.

Each event has a `kind` (its row's and its websocket message's name) and a JSON-able payload;
`from_payload` makes the event again from the two, so one process can hand events to another.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from runs.results.trial_result import TrialResult

log = logging.getLogger(__name__)

KINDS: dict[str, type[Event]] = {}


def _kind_of(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = "event"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind = _kind_of(cls.__name__)
        KINDS[cls.kind] = cls

    def to_payload(self) -> dict[str, Any]:
        """The event's fields as JSON-able values (a TrialResult as its result.json document)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


def _plain(value: Any) -> Any:
    if isinstance(value, TrialResult):
        return value.to_json()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def from_payload(kind: str, payload: Mapping[str, Any]) -> Event:
    """The event `to_payload` described; unknown kinds and fields raise KeyError / TypeError."""
    cls = KINDS[kind]
    values = dict(payload)
    for f in dataclasses.fields(cls):
        if f.name in values and f.type in ("TrialResult", TrialResult):
            values[f.name] = TrialResult.from_json(values[f.name])
        elif f.name in values and isinstance(values[f.name], list) and "tuple" in str(f.type):
            values[f.name] = tuple(values[f.name])
    return cls(**values)


Subscriber = Callable[[Event], None]

# Checks every event of this process passes before any subscriber sees it: a coordinator on the
# worker fleet adds its fence's (runs/workers/coordination.py:fresh), so one that wakes up after
# another took its job over stops before it writes an event anywhere.
_gates: list[Callable[[], None]] = []


def gate(check: Callable[[], None]) -> None:
    """Every event of this process passes `check` first (once per check)."""
    if check not in _gates:
        _gates.append(check)


class Bus:
    """A job's events, handed to each subscriber in the order they subscribed.

    A subscriber that fails is logged and dropped from nothing: the job goes on, and so do the
    other subscribers (a page that cannot be told must not stop a run).
    """

    def __init__(self, *subscribers: Subscriber) -> None:
        self._subscribers: list[Subscriber] = list(subscribers)

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def emit(self, event: Event) -> None:
        for check in _gates:
            check()
        for subscriber in self._subscribers:
            try:
                subscriber(event)
            except Exception:  # noqa: BLE001 - one subscriber's bug must not stop the job
                log.exception("subscriber %r failed on %s", subscriber, event.kind)


# --- before the job: the agent's install ------------------------------------------------------


@dataclass(frozen=True)
class AgentInstalling(Event):
    """An agent CLI is installed on the host with npm (once per version)."""

    package: str
    version: str
    prefix: str


@dataclass(frozen=True)
class RipgrepFetching(Event):
    """OpenCode's grep and glob tools need ripgrep, fetched once from an npm package."""

    package: str


# --- before the job: what the tasks ask that cannot be had in full ------------------------------


@dataclass(frozen=True)
class TasksWarned(Event):
    """Tasks set a key this runner accepts but cannot honour in full (one event per distinct one)."""

    field: str  # the task.toml key ("environment.storage_mb"), or "" for the task as a whole
    message: str  # what will differ
    tasks: tuple[str, ...]


@dataclass(frozen=True)
class AgentLacks(Event):
    """Tasks declare MCP servers or a skills folder, and the agent takes none (a control or a
    script): it runs without them."""

    field: str  # environment.mcp_servers | environment.skills_dir
    agent: str
    tasks: tuple[str, ...]


@dataclass(frozen=True)
class LoginLent(Event):
    """The agent will hold this machine's Claude login (a `bench run` on one's own machine): said
    before the job starts. `held` names the file or variable, never its value."""

    agent: str
    model: str
    held: str


@dataclass(frozen=True)
class ResourcesReduced(Event):
    """A task asks for more CPUs or memory than this machine has: it runs with what there is."""

    task_name: str
    requested_cpus: float
    cpus: float
    requested_memory_mb: int
    memory_mb: int


# --- the job ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobChosen(Event):
    """Which folder this run writes: a new job, or an earlier one resumed.

    `latest` / `mismatch_*`: a plain rerun found the latest job in the jobs folder but one of its
    settings differs, so a new job starts beside it.
    """

    job_name: str
    job_dir: str
    jobs_dir: str
    resumed: bool
    latest: str | None = None
    mismatch_key: str | None = None
    mismatch_old: Any = None
    mismatch_new: Any = None


@dataclass(frozen=True)
class JobStarted(Event):
    """The plan is made and the coordinator is about to start attempts."""

    job_name: str
    job_dir: str
    settings: dict[str, Any]  # evaluation.json's settings (secret values never in them)
    total: int  # trials planned (tasks x repeats)
    done: int  # trials finished in an earlier run, reused
    to_run: int
    concurrency: int
    warm_pool: int
    tasks: tuple[str, ...] = ()  # trial names still to run, in plan order
    # per task: (token_budget, turn_budget) of its own [agent], for the run card
    task_budgets: tuple[tuple[int | None, int | None], ...] = ()


@dataclass(frozen=True)
class SignalReceived(Event):
    """SIGINT or SIGTERM: the running trials are stopped and their sandboxes removed."""

    name: str


@dataclass(frozen=True)
class JobFinished(Event):
    """summary.json is written (a partial one after a signal)."""

    job_name: str
    job_dir: str
    jobs_dir: str
    summary: dict[str, Any]
    state: str  # finished | interrupted
    elapsed_s: float
    plan_total: int
    reused: int  # trials finished before this run
    resumed: bool
    ran_now: int  # trials that ran an attempt in this run
    kept_out: int  # trials a cap or a signal kept from running
    has_job_cap: bool
    signal: str | None = None
    stopped_running: int = 0


# --- the job's row before and after its run speaks: what an operation from the dashboard decided --


@dataclass(frozen=True)
class JobLaunched(Event):
    """An operation made (or took) the job's folder and handed the run to a launcher: the index
    shows the job at once, its planned trials waiting, before the run writes evaluation.json."""

    job_name: str
    job_dir: str
    settings: dict[str, Any]  # the keys evaluation.json will hold (secret values never in them)
    by: str = ""  # who launched it


@dataclass(frozen=True)
class LaunchFailed(Event):
    """The launcher could not start the run of a new job: its folder and its row go."""

    job_name: str
    job_dir: str


@dataclass(frozen=True)
class JobClosed(Event):
    """The operation's process ended and the run never said how the job ended (it failed before
    it began, was stopped then, or its launch failed on a resumed job): `state` is what the
    operation decided from the job folder (finished with a summary, interrupted, or failed when
    nothing ever ran)."""

    job_name: str
    job_dir: str
    state: str  # finished | interrupted | failed
    why: str  # ended | failed | stopped (the operation's process), launcher_failed (a resume's)
    summary: dict[str, Any] | None = None


# --- attempts -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptStarted(Event):
    """An attempt took its slot: it is a rollout from here on (its sandbox may still be starting)."""

    trial_name: str
    task_name: str
    trial_index: int
    attempt: int
    rollout_name: str


@dataclass(frozen=True)
class PhaseChanged(Event):
    trial_name: str
    rollout_name: str
    phase: str  # setup | agent | verifier
    step: str | None = None  # a multi-step trial's step


@dataclass(frozen=True)
class ToolCalled(Event):
    """The agent started a tool call (from its own event stream)."""

    trial_name: str
    rollout_name: str
    title: str


@dataclass(frozen=True)
class UsageCounted(Event):
    """What the model proxy has counted for a running attempt so far (totals, not increments)."""

    trial_name: str
    rollout_name: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    total_tokens: int
    turns: int
    cost_usd: float | None


@dataclass(frozen=True)
class Heartbeat(Event):
    """A trial still running, every 45 s since its last: how long, and what its agent did."""

    trial_name: str
    rollout_name: str
    elapsed_s: float
    tool_calls: int
    last_tool: str | None


@dataclass(frozen=True)
class AgentOutOfMemory(Event):
    """The kernel killed the agent for lack of memory (exit 137 we did not cause)."""

    trial_name: str
    rollout_name: str
    memory_mb: float


@dataclass(frozen=True)
class AttemptFinished(Event):
    """result.json is written and the job has counted it (budgets, retries)."""

    trial_name: str
    rollout_name: str
    result: TrialResult


@dataclass(frozen=True)
class AttemptScored(Event):
    """A rubric review of a finished attempt (runs/review/auto.py): result.json rewritten with the
    gated reward, or its scoring error (the solver's reward kept)."""

    trial_name: str
    rollout_name: str
    result: TrialResult
    error: str | None = None
    band: str | None = None
    gated_quality: float | None = None
    raw_quality: float | None = None


@dataclass(frozen=True)
class AttemptCancelled(Event):
    """Stopped while it ran (a job cap or a signal): timing.json, no result.json."""

    trial_name: str
    rollout_name: str
    cancelled_by: str | None = None  # the cap's `budget reached: ...`; None for a signal


@dataclass(frozen=True)
class AttemptLost(Event):
    """Its worker stopped renewing the attempt's lease (killed, say): the attempt runs again on
    another worker, and the lost run (moved to the job's .lost/) counts for nothing."""

    trial_name: str
    rollout_name: str  # the lost run's folder, "" when it had none yet
    worker: str


@dataclass(frozen=True)
class RetryScheduled(Event):
    trial_name: str
    attempt: int  # the attempt about to run
    error: str  # the error that made the last one retry
    backoff_s: float


# --- scale-out: workers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkersChosen(Event):
    """The job's attempts run on `bench worker` processes through the broker, not in this process."""

    queue: str
    workers: tuple[str, ...]  # up when the job started, as `name (N slots)`
    slots: int
    adopted: tuple[str, ...] = ()  # trials an earlier run left running on a worker: not run again


@dataclass(frozen=True)
class WorkerStarted(Event):
    """A `bench worker` is up (its own log)."""

    worker: str
    slots: int
    queues: tuple[str, ...]
    reaped: int  # containers of dead owners on this machine it removed on start
    ahead: int = 0  # sandboxes it prepares ahead of a free slot


@dataclass(frozen=True)
class WorkerAttemptStarted(Event):
    """A worker took an attempt (its own log: where each attempt ran)."""

    worker: str
    job_name: str
    trial_name: str
    attempt: int
    rollout_name: str


@dataclass(frozen=True)
class WorkerAttemptEnded(Event):
    """A worker is done with an attempt: finished (reward or error), cancelled, discarded, failed,
    or taken from it (its lease lost)."""

    worker: str
    job_name: str
    trial_name: str
    rollout_name: str
    state: str
    seconds: float
    reward: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class OrphansReaped(Event):
    """A worker's sweep removed containers whose owning process on this machine died."""

    worker: str
    containers: int


@dataclass(frozen=True)
class WorkerNote(Event):
    """A worker's own log: a job it took to coordinate (or adopted), or why it takes nothing."""

    worker: str
    text: str


# --- budgets ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetReached(Event):
    """A job cap is reached: no new rollouts; spend caps also cancel the running trials."""

    reason: str  # `budget reached: ...`, as summary.json's budget.reason
    running: int
    cancels_running: bool


@dataclass(frozen=True)
class CostUnknown(Event):
    """A rollout finished without a dollar cost while --max-cost-usd is set (said once a job)."""


# --- utilization --------------------------------------------------------------------------------


@dataclass(frozen=True)
class UtilizationReported(Event):
    """How busy the slots were over the last window (averages of one-second samples)."""

    window_s: float
    slots: int
    setup: float  # trials in sandbox set-up or verifying
    agent: float  # trials whose agent runs
    waiting: int  # trials not yet started
    uses_model: bool
    model_share: float | None = None  # share of the agents' time with a model request in flight
    model_at_once: float | None = None  # requests in flight at once, on average
    waited: bool = False  # some trial waited for a slot in the window


# --- `bench index`: a job folder replayed into the index -------------------------------------------


@dataclass(frozen=True)
class JobFolderRead(Event):
    """`bench index` read a job folder's evaluation.json and summary.json (either may be missing):
    the job's row, its planned trials and caps are made or brought up to date."""

    job_name: str
    job_dir: str
    settings: dict[str, Any]
    summary: dict[str, Any] | None
    live: bool  # a `bench run` holds the job's lock: the job is still running
    # what the folder says of its end when it is not ours (a Harbor job's result.json): None, by
    # summary.json
    ended: bool | None = None
    n_trials: int | None = None  # trials planned, when the folder says so rather than by a plan
    finished_at: str | None = None
    duration_s: float | None = None


@dataclass(frozen=True)
class AttemptFoldersRead(Event):
    """A batch of the job folder's attempt folders, each as runs/index/folder.py read it (names,
    row fields, trial budget); applied as one statement per batch. Never kept as an Event row: the
    rows' fields hold datetimes, and `Indexed` says the folder was read."""

    rows: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Indexed(Event):
    """`bench index` read every attempt folder of the job: rows of attempts whose folder is gone
    are removed, each trial's row follows its attempts, and open pages reload what they show."""

    job_name: str
    job_dir: str
    attempts: int


# --- after the job ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegradeStarted(Event):
    """`bench regrade` (or the dashboard) regrades a job's saved work with the current verifiers."""

    job_name: str
    regrade_id: str
    trials: int
    concurrency: int
    reason: str | None = None
    by: str | None = None  # who asked


@dataclass(frozen=True)
class Regraded(Event):
    """One trial regraded (regrade.json has the new grade appended), refused, or not finished."""

    trial_name: str
    task_name: str
    rollout_name: str | None
    status: str  # complete | failed | interrupted | refused
    change: str | None = None  # improved | regressed | unchanged | ...
    reward_before: float | None = None
    reward_after: float | None = None
    message: str | None = None  # the refusal, the sandbox failure or the verifier error
    regrade_id: str | None = None


# --- what a dashboard page does on a hint of each kind -----------------------------------------
# (the pages get these lists from the server, viewer/templatetags/bench.py:live_kinds)

# a trial ended or was regraded, or every row may have changed: the outcomes grid, the chart's
# series and the regrades are fetched again too
FINISHED_KINDS = (
    AttemptFinished.kind,
    AttemptScored.kind,
    AttemptCancelled.kind,
    JobStarted.kind,
    JobFinished.kind,
    JobClosed.kind,
    Indexed.kind,
    RegradeStarted.kind,
    Regraded.kind,
)
# the job may have started or ended: its running controls (cancel) follow
STATE_KINDS = (JobStarted.kind, JobFinished.kind, JobClosed.kind, Indexed.kind)
# every trial's rows may have changed: an open trial page reloads whatever its trial
ALL_TRIALS_KINDS = (Indexed.kind,)
