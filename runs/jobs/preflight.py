"""Everything checked before a job folder exists, then the job itself: `bench run` and `bench eval resume`."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from runs.agents import resolve_agent
from runs.agents.base import AgentError
from runs.gateway import ModelGateway
from runs.jobfolder import JobLocked, read_json
from runs.jobs.console import Reporter
from runs.spec import RunSpec
from runs.tasks.load import TaskError, load_tasks


class RunRefused(Exception):
    """The run cannot start; nothing was created. Carries the exit code (2 for a usage error)."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def _docker_client():
    import docker

    from runs.sandboxes.docker import connect

    try:
        client = connect()
        client.api.ping()
    except docker.errors.DockerException as exc:
        raise RunRefused(
            f"the Docker engine is not reachable ({exc.__class__.__name__}); "
            "fix: run `bench doctor --fix` (starts dockerd and builds the base images) or scripts/setup.sh",
            exit_code=1,
        ) from None
    return client


def check_run(spec: RunSpec, gateway: ModelGateway | None = None):
    """Tasks, agent and settings, all validated; returns (tasks, agent). Raises RunRefused."""
    problems: list[str] = []
    tasks = []
    try:
        tasks = load_tasks(spec.tasks_dir, spec.include, spec.exclude)
    except TaskError as exc:
        problems.extend(str(p) for p in exc.problems)
    agent = None
    try:
        agent = resolve_agent(spec.agent, cwd=Path.cwd())
    except AgentError as exc:
        problems.append(f"-a/--agent: {exc}")
    if agent is not None:
        for task in tasks:
            if reason := agent.check_task(task):
                problems.append(reason)
        if agent.needs_model and not spec.model:
            problems.append(
                f"-a {spec.agent} needs a model; fix: pass -m, e.g. -m mock/oracle or -m deepseek/deepseek-v4-flash"
            )
    jobs = spec.jobs_dir
    if jobs.exists() and not jobs.is_dir():
        problems.append(
            f"--jobs-dir {jobs}: it is a file, not a folder; fix: pass a folder for job folders"
        )
    elif not os.access(
        next((p for p in (jobs, *jobs.absolute().parents) if p.exists()), Path("/")), os.W_OK
    ):
        problems.append(
            f"--jobs-dir {jobs}: not writable by this user; fix: pass a folder you can write to"
        )
    if agent is not None and not problems:
        problems.extend(model_problems(spec, agent, tasks, gateway))
    if problems:
        head = f"{len(problems)} problem{'s' if len(problems) != 1 else ''} found; nothing was created:"
        raise RunRefused("\n".join([head, *(f"  {p}" for p in problems)]))
    if not tasks:
        raise RunRefused(f"no tasks selected in {spec.tasks_dir}; fix: check --include/--exclude")
    return tasks, agent


BASE_URL_VARS = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "LLM_BASE_URL", "OPENAI_API_BASE")


def model_problems(spec: RunSpec, agent, tasks, gateway: ModelGateway | None = None) -> list[str]:
    """The model, its provider and price, and whether the agent's calls can be held to a budget."""
    from runs.agents.cli_agents import ClaudeAgent, login_credentials
    from runs.trials.agent_run import uses_proxy

    problems: list[str] = []
    budgeted = spec.token_budget is not None or spec.turn_budget is not None
    if isinstance(agent, ClaudeAgent) and spec.model and login_credentials(spec.model) is not None:
        agent.login = True  # a Claude login: its calls go straight to Anthropic, around the proxy
    bypass = [k for k in spec.agent_env if k in BASE_URL_VARS]
    if bypass and agent.needs_model and not getattr(agent, "login", False):
        # the agent gets the proxy's URL in its own variables or config, so this one would be
        # replaced or never read: say so rather than run somewhere the user did not mean
        problems.append(
            f"--agent-env {bypass[0]}: -a {agent.name} reaches its model only through the model proxy, "
            "which routes by -m; fix: drop it, and for an endpoint of your own export "
            "BENCHFLOW_PROVIDER_BASE_URL (and BENCHFLOW_PROVIDER_API_KEY) and pass -m openai-compatible/MODEL"
        )
        bypass = []
    if budgeted and (
        getattr(agent, "login", False)
        or bypass
        or (not agent.needs_model and not spec.model and agent.name.startswith("script:"))
    ):
        why = (
            "a Claude login calls Anthropic directly"
            if getattr(agent, "login", False)
            else f"--agent-env {bypass[0]} gives the agent an endpoint of its own"
            if bypass
            else "a script agent without -m may call a model of its own"
        )
        problems.append(
            f"--token-budget/--turn-budget: {why}, so the model proxy cannot count its calls and the budget "
            "cannot hold; fix: give the agent an API key (export ANTHROPIC_API_KEY, or use a provider-prefixed "
            "-m) so its calls go through the proxy, or drop the per-trial budget"
        )
    if not uses_proxy(agent, spec.model) or getattr(agent, "login", False):
        if spec.max_cost_usd is not None and getattr(agent, "login", False):
            problems.append(
                "--max-cost-usd: a Claude login reports no dollars; fix: cap tokens with --max-tokens"
            )
        return problems
    if gateway is None:
        return [
            f"-a {spec.agent} -m {spec.model}: this run has no model gateway to route the model through"
        ]
    protocol = getattr(getattr(agent, "spec", None), "protocol", None)
    problems.extend(gateway.check_model(spec.model or "", protocol, spec.max_cost_usd is not None))
    return problems


def task_warning_lines(tasks: list) -> list[str]:
    """One line per distinct warning of the selected tasks, naming the tasks it concerns
    (Terminal-Bench gives every task the same storage_mb, say)."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for task in tasks:
        for w in task.warnings:
            grouped.setdefault((w.field, w.message), []).append(task.name)
    lines = []
    for (key, message), names in grouped.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        lines.append(f"warning: {key + ': ' if key else ''}{message} ({shown})")
    return lines


def prepare_run(
    spec: RunSpec,
    *,
    setup_django: Callable[[], None],
    reporter: Reporter | None = None,
    gateway: ModelGateway | None = None,
) -> int:
    tasks, agent = check_run(spec, gateway)
    client = _docker_client()
    reporter = reporter or Reporter(quiet=spec.quiet)
    for line in task_warning_lines(tasks):
        reporter.warn(line)
    from runs.sandboxes.resources import grant, host_resources

    host = host_resources(client)
    for task in tasks:
        if short := grant(task.sandbox.cpus, task.sandbox.memory_mb, host).warning(task.name):
            reporter.warn(short)
    if hasattr(agent, "install"):
        try:
            agent.install(log=reporter.line)
        except AgentError as exc:
            raise RunRefused(f"-a {spec.agent}: {exc}", exit_code=1) from None
    setup_django()
    from runs.jobs.run import JobRun  # the ORM models need Django set up first

    try:
        return JobRun(spec, tasks, agent, reporter, client, gateway).execute()
    except JobLocked as exc:
        raise RunRefused(
            f"refusing to run: {exc}; wait for it to finish or stop it first", exit_code=1
        ) from None


def resume_job(
    job_dir: Path,
    agent_env: dict[str, str],
    concurrency: int | None,
    quiet: bool,
    *,
    setup_django: Callable[[], None],
    gateway: ModelGateway | None = None,
) -> int:
    """`bench eval resume JOB`: the job's recorded settings; secret --agent-env values asked for by name."""
    evaluation = job_dir / "evaluation.json"
    if not evaluation.is_file():
        raise RunRefused(
            f"{job_dir} is not a job folder (no evaluation.json); fix: pass a folder made by bench run"
        )
    recorded = read_json(evaluation)
    missing = [k for k in recorded.get("agent_env_secret_keys") or [] if k not in agent_env]
    if missing:
        flags = " ".join(f"--agent-env {k}=..." for k in missing)
        raise RunRefused(
            f"{job_dir} ran with secret --agent-env values that are never recorded: {', '.join(missing)}; "
            f"fix: pass them again: bench eval resume {job_dir} {flags}"
        )
    spec = RunSpec.from_recorded(recorded, concurrency=concurrency)
    spec.agent_env.update(agent_env)
    spec.jobs_dir = job_dir.parent
    spec.job = job_dir.name
    spec.quiet = quiet
    return prepare_run(spec, setup_django=setup_django, gateway=gateway)
