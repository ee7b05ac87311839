"""RunSpec: one `bench run`'s settings, each declared once with its option, parser and record key.

The command line (`add_run_arguments`), evaluation.json (`recorded` / `from_recorded`) and the
dashboard's launch form all come from the declarations below; `value_problems` checks the values
themselves (no files read), runs/jobs/preflight.py the tasks, agent and model they name.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runs import env_names, secrets
from runs.problems import Problem

DEFAULT_IDLE_TIMEOUT_S = 600.0
DEFAULT_MAX_ATTEMPT_MB = 1024
BUDGET = "budget"  # evaluation.json keeps the job caps together under this key
REVIEWER = "reviewer"  # and the automatic review's settings under this one (with a model)


# --- parsers: text (a flag's or a form's) to a value, ValueError with the reason --------------


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise ValueError(f"must be {minimum} or more, got {value}")
        return value

    return parse


positive_int = _int_at_least(1)
non_negative_int = _int_at_least(0)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise ValueError(f"must be more than 0, got {text}")
    return value


def idle_timeout(text: str) -> float | None:
    """--agent-idle-timeout: seconds; 0 or none turns the watchdog off (None)."""
    if text.strip().lower() in ("none", "off"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected seconds, 0 or none, got {text!r}") from None
    if value == 0:
        return None
    if not value > 0:
        raise ValueError(f"expected seconds, 0 or none, got {text!r}")
    return value


WORKERS = ("auto", "on", "off")


def workers_choice(text: str) -> str:
    """--workers: auto, on or off."""
    value = text.strip().lower()
    if value not in WORKERS:
        raise ValueError(f"expected auto, on or off, got {text!r}")
    return value


def env_pair(text: str) -> tuple[str, str]:
    """--agent-env KEY=VALUE: KEY a plain name that runs no code (runs/env_names.py)."""
    if "=" not in text or text.startswith("="):
        raise ValueError(f"--agent-env takes KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    if why := env_names.env_problem(key, value):
        raise ValueError(f"{why}; fix: {AGENT_ENV_FIX}")
    return key, value


AGENT_ENV_FIX = "remove it; give the agent data under a plain name of its own"

REVIEWER_SANDBOXES = ("docker",)


def reviewer_sandbox(text: str) -> str:
    """--reviewer-sandbox: BenchFlow's cloud sandboxes are not ours; docker is the one there is."""
    value = text.strip().lower()
    if value not in REVIEWER_SANDBOXES:
        raise ValueError(f"only docker is supported here, got {text!r}")
    return value


def allowed_name(text: str) -> str:
    """--allow-env NAME: a host variable a task's ${NAME} may read (runs/host_env.py)."""
    from runs.host_env import allow_problem

    name = text.strip()
    if why := allow_problem(name):
        raise ValueError(why)
    return name


def argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse shows an ArgumentTypeError's own text (a ValueError's is replaced)."""

    def adapted(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    adapted.__name__ = getattr(parse, "__name__", "value")
    return adapted


# --- the declarations --------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """How one RunSpec field is given and kept."""

    flags: tuple[str, ...]  # ("-j", "--concurrency"); () for the positional TASKS
    help: str
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    kind: str = (
        "value"  # value | flag (store_true) | list (repeatable) | env (repeatable KEY=VALUE)
    )
    record: str | None = None  # evaluation.json key; "budget.<name>" inside the budget block
    user_set: bool = True  # a setting a user chooses by hand (the launch form shows it)

    @property
    def name(self) -> str:
        """How messages name it: its flags as argparse shows them (`-j/--concurrency`)."""
        return "/".join(self.flags) or "TASKS"


def option(default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    factory = {"list": list, "env": dict}.get(kwargs.get("kind", "value"))
    meta = {"option": Option(**kwargs)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class RunSpec:
    tasks_dir: Path = option(
        flags=(),
        help="a task folder, a folder of tasks, or a folder holding tasks/",
        parse=Path,
        metavar="tasks",
        record="tasks_dir",
    )
    agent: str = option(
        "claude",
        flags=("-a", "--agent"),
        help="oracle, nop, script:PATH, claude (or claude-code, claude-agent-acp), opencode, "
        "codex (or codex-acp) (default: claude)",
        record="agent",
    )
    model: str | None = option(
        None,
        flags=("-m", "--model"),
        help="PROVIDER/MODEL (mock/oracle, deepseek/deepseek-v4-flash, ...), or a Claude alias (sonnet, "
        "opus, haiku, claude-*): Anthropic when ANTHROPIC_API_KEY is set, else -a claude uses this "
        "machine's Claude login",
        record="model",
    )
    concurrency: int = option(
        4,
        flags=("-j", "--concurrency"),
        help="trials running at once (default 4)",
        parse=positive_int,
        record="concurrency",
    )
    warm_pool: int = option(
        1,
        flags=("--warm-pool",),
        help="sandboxes prepared ahead of their turn (default 1; at most -j minus 1, so none at -j 1)",
        parse=non_negative_int,
        metavar="N",
        record="warm_pool",
    )
    workers: str = option(
        "auto",
        flags=("--workers",),
        help="where attempts run: on `bench worker` processes through BENCHFLOW_REDIS_URL (on), "
        "in this process (off), or auto: on workers when Redis is set and a worker serves "
        "$BENCHFLOW_QUEUE (default auto)",
        parse=workers_choice,
        metavar="auto|on|off",
    )
    trials: int = option(
        1,
        flags=("--trials",),
        help="repeats of each task; repeats run one after another, each -j at a time",
        parse=positive_int,
        metavar="N",
        record="trials",
    )
    include: list[str] = option(
        flags=("-i", "--include"),
        help="only these tasks (names or globs; repeat)",
        metavar="NAME",
        kind="list",
        record="include",
    )
    exclude: list[str] = option(
        flags=("--exclude",),
        help="skip these tasks (names or globs; repeat)",
        metavar="NAME",
        kind="list",
        record="exclude",
    )
    jobs_dir: Path = option(
        Path("jobs"),
        flags=("--jobs-dir",),
        help="where job folders go (default: jobs)",
        parse=Path,
    )
    job: str | None = option(
        None, flags=("--job",), help="name the job; resume it if it exists", metavar="NAME"
    )
    fresh: bool = option(
        False, flags=("--fresh",), help="always start a new job", kind="flag", user_set=False
    )
    redo: list[str] = option(
        flags=("--redo",),
        help="run this trial again though it already has a reward (repeat; a resumed job only): "
        "its earlier attempts stay, the new one counts when it is scored; evaluation.json "
        "records the request, so a later resume finishes it and does not redo it twice",
        metavar="TRIAL",
        kind="list",
        user_set=False,
    )
    agent_env: dict[str, str] = option(
        flags=("--agent-env", "--ae"),
        help="environment for the agent (repeat); secret-looking values are never recorded, "
        "names that make a shell or loader run code (BASH_FUNC_*, LD_*, ...) are refused",
        parse=env_pair,
        metavar="KEY=VALUE",
        kind="env",
        record="agent_env",
    )
    allow_env: list[str] = option(
        flags=("--allow-env",),
        help="let a task's ${NAME} read NAME from this machine's environment (repeat; also "
        "$BENCHFLOW_ALLOW_ENV, comma-separated); a task naming one not allowed is refused, and "
        "a model provider's key is never allowed",
        parse=allowed_name,
        metavar="NAME",
        kind="list",
        record="allow_env",
        user_set=False,
    )
    retry_attempts: int = option(
        2,
        flags=("--retry-attempts",),
        help="extra attempts for a trial that failed for a retryable reason (default 2; 0: off)",
        parse=non_negative_int,
        metavar="N",
        record="retry_attempts",
    )
    agent_idle_timeout: float | None = option(
        DEFAULT_IDLE_TIMEOUT_S,
        flags=("--agent-idle-timeout",),
        help="stop an agent (claude, opencode, codex) that prints nothing and calls no model for S "
        "seconds, 3x as long while a tool call or model call of its is pending; the trial is "
        "graded on what it left and retried as idle_timeout (default 600; 0 or none: off)",
        parse=idle_timeout,
        metavar="S",
        record="agent_idle_timeout_sec",
    )
    max_attempt_mb: int = option(
        DEFAULT_MAX_ATTEMPT_MB,
        flags=("--max-attempt-mb",),
        help="stop an attempt whose folder (what the agent and the tests write into /logs, the "
        "saved workspace) grows past MB; it fails as attempt_disk, ungraded and not retried "
        f"(default {DEFAULT_MAX_ATTEMPT_MB}; 0: no cap)",
        parse=non_negative_int,
        metavar="MB",
        record="max_attempt_mb",
    )
    save_outputs: bool = option(
        False,
        flags=("--save-outputs", "--freeze-workspace"),
        help="keep each trial's final workspace (with a manifest) so bench regrade can rescore it",
        kind="flag",
        record="save_outputs",
    )
    quiet: bool = option(
        False,
        flags=("--quiet",),
        help="no live display and no progress lines",
        kind="flag",
        user_set=False,
    )
    max_cost_usd: float | None = option(
        None,
        flags=("--max-cost-usd",),
        help="job cap: dollars (needs a priced model)",
        parse=positive_float,
        metavar="USD",
        record="budget.max_cost_usd",
    )
    max_tokens: int | None = option(
        None,
        flags=("--max-tokens",),
        help="job cap: total tokens of finished trials",
        parse=positive_int,
        metavar="N",
        record="budget.max_tokens",
    )
    max_sandbox_seconds: float | None = option(
        None,
        flags=("--max-sandbox-seconds",),
        help="job cap: trial wall-clock seconds",
        parse=positive_float,
        metavar="S",
        record="budget.max_sandbox_seconds",
    )
    max_rollouts: int | None = option(
        None,
        flags=("--max-rollouts",),
        help="job cap: rollouts started, retries included",
        parse=positive_int,
        metavar="N",
        record="budget.max_rollouts",
    )
    token_budget: int | None = option(
        None,
        flags=("--token-budget",),
        help="per-trial budget: tokens",
        parse=positive_int,
        metavar="N",
        record="token_budget",
    )
    turn_budget: int | None = option(
        None,
        flags=("--turn-budget",),
        help="per-trial budget: turns (model calls)",
        parse=positive_int,
        metavar="N",
        record="turn_budget",
    )

    # --- the automatic rubric review (runs/review/auto.py), kept under evaluation.json's reviewer
    reviewer_model: str | None = option(
        None,
        flags=("--reviewer-model",),
        help="review each trial of a task shipping verifier/rubric.json (or tests/rubric.json) "
        "with this model as soon as it is verified; its reward becomes the rubric's gated "
        "quality (mock/oracle: offline)",
        metavar="MODEL",
        record="reviewer.model",
        user_set=False,
    )
    reviewer_agent: str = option(
        "opencode",
        flags=("--reviewer-agent",),
        help="the reviewer agent (default opencode)",
        metavar="AGENT",
        record="reviewer.agent",
        user_set=False,
    )
    reviewer_reasoning_effort: str | None = option(
        None,
        flags=("--reviewer-reasoning-effort",),
        help="the reviewer's reasoning effort: recorded; none of our agents takes one yet",
        metavar="LEVEL",
        record="reviewer.reasoning_effort",
        user_set=False,
    )
    reviewer_sandbox: str = option(
        "docker",
        flags=("--reviewer-sandbox",),
        help="where the reviewer runs: docker (the one supported)",
        parse=reviewer_sandbox,
        metavar="docker",
        record="reviewer.sandbox",
        user_set=False,
    )
    reviewer_timeout_sec: float = option(
        1800.0,
        flags=("--reviewer-timeout-sec",),
        help="seconds a reviewer agent may run (default 1800); past it the review is a scoring "
        "error and the trial keeps its reward",
        parse=positive_float,
        metavar="S",
        record="reviewer.timeout_sec",
        user_set=False,
    )
    reviewer_idle_timeout: float | None = option(
        DEFAULT_IDLE_TIMEOUT_S,
        flags=("--reviewer-idle-timeout",),
        help="the reviewer's --agent-idle-timeout (default 600; 0 or none: off)",
        parse=idle_timeout,
        metavar="S",
        record="reviewer.idle_timeout_sec",
        user_set=False,
    )
    reviewer_concurrency: int = option(
        4,
        flags=("--reviewer-concurrency",),
        help="reviews at once (default 4), beside the job's -j trials",
        parse=positive_int,
        metavar="N",
        record="reviewer.concurrency",
        user_set=False,
    )
    reviewer_image: str | None = option(
        None,
        flags=("--reviewer-image",),
        help="the reviewer sandbox's image (default debian:bookworm-slim)",
        metavar="IMAGE",
        record="reviewer.image",
        user_set=False,
    )
    reviewer_agent_env: dict[str, str] = option(
        flags=("--reviewer-agent-env",),
        help="environment for the reviewer agent (repeat); only the names are recorded (bench "
        "eval resume asks for the values again), secret-looking values are kept out of every "
        "file as --agent-env's are",
        parse=env_pair,
        metavar="KEY=VALUE",
        kind="env",
        record="reviewer.agent_env",
        user_set=False,
    )
    reviewer_open_network: bool = option(
        False,
        flags=("--reviewer-open-network",),
        help="give the reviewer's sandbox an open network (default: the reviewed task's "
        "network_mode)",
        kind="flag",
        record="reviewer.open_network",
        user_set=False,
    )

    # --- derived ------------------------------------------------------------------------------

    def budget_caps(self) -> dict[str, Any]:
        """The job caps, by their evaluation.json names (BenchFlow's summary.json order)."""
        return {
            "max_cost_usd": self.max_cost_usd,
            "max_sandbox_seconds": self.max_sandbox_seconds,
            "max_tokens": self.max_tokens,
            "max_rollouts": self.max_rollouts,
        }

    def has_job_cap(self) -> bool:
        return any(v is not None for v in self.budget_caps().values())

    def recorded(self) -> dict[str, Any]:
        """The settings as evaluation.json keeps them: secret --agent-env values never recorded."""
        data: dict[str, Any] = {}
        for f, opt in options():
            if opt.record is None:
                continue
            value = getattr(self, f.name)
            if opt.record.startswith(f"{REVIEWER}."):
                continue
            if opt.record.startswith(f"{BUDGET}."):
                data[BUDGET] = self.budget_caps()
            elif opt.kind == "env":
                data["agent_env"] = secrets.public_env(value)
                data["agent_env_keys"] = sorted(value)
                data["agent_env_secret_keys"] = secrets.secret_keys(value)
            else:
                data[opt.record] = str(value) if isinstance(value, Path) else _copy(value)
        data["environment"] = "docker"
        if self.reviewer_model:
            data[REVIEWER] = self.reviewer_settings()
        return data

    def reviewer_settings(self) -> dict[str, Any]:
        """evaluation.json's reviewer block: the --reviewer-* settings, the env's names only (a
        resume is given its values again)."""
        block: dict[str, Any] = {}
        for f, opt in options():
            if opt.record and opt.record.startswith(f"{REVIEWER}.") and opt.kind != "env":
                block[opt.record.split(".", 1)[1]] = _copy(getattr(self, f.name))
        block["agent_env_keys"] = sorted(self.reviewer_agent_env)
        return block

    @classmethod
    def from_recorded(cls, data: Mapping[str, Any], **overrides: Any) -> RunSpec:
        """The spec evaluation.json recorded (secret --agent-env values are not in it); a setting it
        lacks keeps its default, and `overrides` that are not None replace recorded values."""
        budget = data.get(BUDGET) or {}
        reviewer = data.get(REVIEWER) or {}
        values: dict[str, Any] = {}
        for f, opt in options():
            if opt.record is None:
                continue
            source, key = (
                (budget, f.name)
                if opt.record.startswith(f"{BUDGET}.")
                else (reviewer, opt.record.split(".", 1)[1])
                if opt.record.startswith(f"{REVIEWER}.")
                else (data, opt.record)
            )
            if key not in source:
                continue
            value = source[key]
            if opt.kind == "list":
                value = list(value or [])
            elif opt.kind == "env":
                value = dict(value or {})
            elif opt.kind == "flag":
                value = bool(value)
            elif opt.parse is Path:
                value = Path(value)
            values[f.name] = value
        spec = cls(**values)
        for key, value in overrides.items():
            if value is not None:
                setattr(spec, key, value)
        return spec


def _copy(value: Any) -> Any:
    return (
        list(value)
        if isinstance(value, list)
        else dict(value)
        if isinstance(value, dict)
        else value
    )


def options() -> list[tuple[dataclasses.Field[Any], Option]]:
    """The RunSpec fields with their declarations, in the order `bench run --help` lists them."""
    return [(f, f.metadata["option"]) for f in dataclasses.fields(RunSpec)]


# Settings that must match for a plain rerun to resume a job (else a new job starts).
RESUME_KEYS = ("agent", "model", "tasks_dir")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """`bench run`'s options, from the declarations."""
    for f, opt in options():
        kwargs: dict[str, Any] = {"help": opt.help}
        if opt.metavar and opt.flags:
            kwargs["metavar"] = opt.metavar
        if opt.kind == "flag":
            kwargs["action"] = "store_true"
        elif opt.kind in ("list", "env"):
            kwargs.update(action="append", default=[])
        elif opt.flags:
            kwargs["default"] = f.default
        if opt.parse is not None and opt.kind != "flag":
            kwargs["type"] = argparse_type(opt.parse)
        if not opt.flags:  # TASKS
            parser.add_argument("tasks", **kwargs)
        else:
            parser.add_argument(*opt.flags, dest=f.name, **kwargs)


def from_args(args: argparse.Namespace) -> RunSpec:
    """The spec of a parsed `bench run` command line (TASKS is parsed into `tasks`)."""
    values = {f.name: getattr(args, f.name if opt.flags else "tasks") for f, opt in options()}
    for f, opt in options():
        if opt.kind == "env":
            values[f.name] = dict(values[f.name])
    return RunSpec(**values)


def parse_form(texts: Mapping[str, str | Sequence[str]]) -> tuple[RunSpec | None, list[Problem]]:
    """A spec from text values by field name (a form's), with a problem per value that does not
    parse; fields not given keep their defaults."""
    values: dict[str, Any] = {}
    problems: list[Problem] = []
    for f, opt in options():
        if f.name not in texts:
            continue
        raw = texts[f.name]
        items = [raw] if isinstance(raw, str) else list(raw)
        items = [t.strip() for t in items if t.strip()]
        try:
            if opt.kind == "flag":
                values[f.name] = bool(items) and items[0].lower() not in ("", "0", "false", "off")
            elif opt.kind == "list":
                values[f.name] = items
            elif opt.kind == "env":
                values[f.name] = dict(env_pair(t) for t in items)
            elif not items:
                values[f.name] = None if f.default is None else f.default
            else:
                values[f.name] = opt.parse(items[0]) if opt.parse else items[0]
        except ValueError as exc:
            problems.append(Problem(f.name, f"{opt.name}: {exc}"))
    if problems:
        return None, problems
    if "tasks_dir" not in values:
        return None, [Problem("tasks_dir", "TASKS: a tasks folder is needed")]
    return RunSpec(**values), []


def value_problems(spec: RunSpec) -> list[Problem]:
    """What is wrong with the values themselves, whatever they name (no file is read)."""
    problems: list[Problem] = []
    for f, opt in options():
        value = getattr(spec, f.name)
        if opt.parse in (positive_int, non_negative_int, positive_float) and value is not None:
            try:
                opt.parse(str(value))
            except ValueError as exc:
                problems.append(Problem(f.name, f"{opt.name}: {exc}"))
    for key, value in spec.agent_env.items():
        if why := env_names.env_problem(key, value):
            problems.append(Problem("agent_env", f"--agent-env: {why}; fix: {AGENT_ENV_FIX}"))
    for key, value in spec.reviewer_agent_env.items():
        if why := env_names.env_problem(key, value):
            problems.append(
                Problem("reviewer_agent_env", f"--reviewer-agent-env: {why}; fix: {AGENT_ENV_FIX}")
            )
    try:
        reviewer_sandbox(spec.reviewer_sandbox)
    except ValueError as exc:
        problems.append(Problem("reviewer_sandbox", f"--reviewer-sandbox: {exc}"))
    for name in spec.allow_env:
        try:
            allowed_name(name)
        except ValueError as exc:
            problems.append(Problem("allow_env", f"--allow-env: {exc}"))
    return problems


def spec_payload(spec: RunSpec) -> dict[str, Any]:
    """The spec's fields as JSON values (secret --agent-env values included: never stored)."""
    return {
        f.name: str(v) if isinstance(v := getattr(spec, f.name), Path) else v
        for f in dataclasses.fields(spec)
    }


def spec_from_payload(body: Mapping[str, Any]) -> RunSpec:
    values = dict(body)
    for name in ("tasks_dir", "jobs_dir"):
        if values.get(name) is not None:
            values[name] = Path(values[name])
    known = {f.name for f in dataclasses.fields(RunSpec)}
    return RunSpec(**{k: v for k, v in values.items() if k in known})
