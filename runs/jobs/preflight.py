"""Everything checked before a job folder exists (the job itself is run by runs/operations/run.py).

`check_run` is the one check of a run's settings (the CLI's and the launch form's): every problem
at once, each tied to the RunSpec field it is about, with its fix. `resume_spec` is a resumed
job's settings, as recorded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runs import events as ev
from runs.agents.base import BASE_URL_VARS, Agent, AgentError
from runs.agents.logins import lent, shared_login_allowed
from runs.agents.registry import resolve_agent
from runs.gateway import ModelGateway
from runs.host_env import NO_HOST_ENV, HostEnv, host_env, setting_problems
from runs.jobfolder import read_object
from runs.jobs.plan import trial_names
from runs.problems import Problem, UserError
from runs.sandboxes.resources import HostResources, grant
from runs.spec import RunSpec, value_problems
from runs.tasks.load import Task, TaskError, load_tasks


def docker_client() -> Any:
    """The Docker engine, or a UserError (exit 1) that says how to start it."""
    import docker

    from runs.sandboxes.docker import connect

    try:
        client = connect()
        client.api.ping()
    except docker.errors.DockerException as exc:
        raise UserError(
            f"the Docker engine is not reachable ({exc.__class__.__name__}); "
            "fix: run `bench doctor --fix` (starts dockerd and builds the base images) or scripts/setup.sh",
            exit_code=1,
        ) from None
    return client


@dataclass
class RunCheck:
    """What check_run found: the tasks and agent a job would run, and every problem."""

    tasks: list[Task] = field(default_factory=list)
    agent: Agent | None = None
    problems: list[Problem] = field(default_factory=list)
    host: HostEnv = NO_HOST_ENV  # what the tasks' ${VAR}s may read here


def _compose_problems(tasks: list[Task]) -> list[Problem]:
    """A multi-container task needs Docker Compose on this machine."""
    from runs.sandboxes import compose

    with_compose = [t for t in tasks if t.compose_file is not None]
    if not with_compose or compose.available():
        return []
    return [Problem("tasks_dir", f"{with_compose[0].compose_file}: {compose.MISSING}")]


def check_run(
    spec: RunSpec, gateway: ModelGateway | None = None, *, on_server: bool = False
) -> RunCheck:
    """Tasks, agent, model and settings, all checked; nothing is created or changed.

    `on_server`: launched from `bench serve`, by an operator who does not own this machine: the
    tasks read only the variables the admin allowed, and the agent may not hold this machine's
    Claude login unless the admin lends it (runs/host_env.py, runs/agents/logins.py)."""
    found = RunCheck(problems=value_problems(spec))
    found.problems += [Problem("allow_env", text) for text in setting_problems()]
    found.host = host_env(spec.allow_env, on_server=on_server)
    try:
        found.tasks = load_tasks(spec.tasks_dir, spec.include, spec.exclude, found.host)
    except TaskError as exc:
        found.problems += [Problem("tasks_dir", str(p)) for p in exc.problems]
    lender = "the server bench serve runs on" if on_server and not shared_login_allowed() else None
    try:
        found.agent = resolve_agent(
            spec.agent, model=spec.model, cwd=Path.cwd(), login_lent_by=lender
        )
    except AgentError as exc:
        found.problems.append(Problem("agent", f"-a/--agent: {exc}"))
    agent = found.agent
    if agent is not None:
        found.problems += [
            Problem("agent", reason) for task in found.tasks if (reason := agent.check_task(task))
        ]
        if agent.needs_model and not spec.model:
            found.problems.append(
                Problem(
                    "model",
                    f"-a {spec.agent} needs a model; fix: pass -m, e.g. -m mock/oracle or -m deepseek/deepseek-v4-flash",
                )
            )
    found.problems += _redo_problems(spec, found.tasks)
    found.problems += _compose_problems(found.tasks)
    found.problems += _jobs_dir_problems(spec.jobs_dir)
    found.problems += job_name_problems(spec.job, spec.jobs_dir)
    if agent is not None and not found.problems:
        found.problems += model_problems(spec, agent, gateway)
    return found


def no_tasks(spec: RunSpec) -> Problem:
    """The tasks folder and --include/--exclude left nothing to run."""
    return Problem(
        "include", f"no tasks selected in {spec.tasks_dir}; fix: check --include/--exclude"
    )


def _redo_problems(spec: RunSpec, tasks: list[Task]) -> list[Problem]:
    """--redo names trials of this job's plan (task, or task#N for a repeat)."""
    if not spec.redo or not tasks:
        return []
    planned = {name for task in tasks for _, name in trial_names(task, spec.trials)}
    unknown = [name for name in spec.redo if name not in planned]
    if not unknown:
        return []
    return [
        Problem(
            "redo",
            f"--redo {unknown[0]}: not a trial of this job"
            + (f" ({len(unknown)} such names)" if len(unknown) > 1 else "")
            + "; fix: name a trial the job plans (a task, or task#N for a repeat)",
        )
    ]


def job_name_problems(name: str | None, jobs: Path) -> list[Problem]:
    """--job NAME is a plain name, and not a symbolic link in the jobs folder: the job's files
    would be written wherever the link points."""
    if not name:
        return []
    if name in (".", "..") or "/" in name or name.startswith("."):
        return [
            Problem("job", f"--job {name}: a job name is a plain name (no '/', no leading '.')")
        ]
    if (jobs / name).is_symlink():
        return [
            Problem(
                "job",
                f"--job {name}: {jobs / name} is a symbolic link (to {os.readlink(jobs / name)}); "
                "a job folder must be a real folder in the jobs folder; fix: pick another name, "
                "or remove the link",
            )
        ]
    return []


def _jobs_dir_problems(jobs: Path) -> list[Problem]:
    if jobs.exists() and not jobs.is_dir():
        return [
            Problem(
                "jobs_dir",
                f"--jobs-dir {jobs}: it is a file, not a folder; fix: pass a folder for job folders",
            )
        ]
    nearest = next((p for p in (jobs, *jobs.absolute().parents) if p.exists()), Path("/"))
    if not os.access(nearest, os.W_OK):
        return [
            Problem(
                "jobs_dir",
                f"--jobs-dir {jobs}: not writable by this user; fix: pass a folder you can write to",
            )
        ]
    return []


def model_problems(
    spec: RunSpec, agent: Agent, gateway: ModelGateway | None = None
) -> list[Problem]:
    """The model, its provider and price, and whether the agent's calls can be held to a budget."""
    problems: list[Problem] = []
    budgeted = spec.token_budget is not None or spec.turn_budget is not None
    bypass = [k for k in spec.agent_env if k in BASE_URL_VARS]
    if bypass and agent.needs_model and not agent.login:
        # the agent gets the proxy's URL in its own variables or config, so this one would be
        # replaced or never read: say so rather than run somewhere the user did not mean
        problems.append(
            Problem(
                "agent_env",
                f"--agent-env {bypass[0]}: -a {agent.name} reaches its model only through the model proxy, "
                "which routes by -m; fix: drop it, and for an endpoint of your own export "
                "BENCHFLOW_PROVIDER_BASE_URL (and BENCHFLOW_PROVIDER_API_KEY) and pass -m openai-compatible/MODEL",
            )
        )
        bypass = []
    script_alone = not agent.needs_model and not spec.model and agent.name.startswith("script:")
    if budgeted and (agent.login or bypass or script_alone):
        why = (
            "a Claude login calls Anthropic directly"
            if agent.login
            else f"--agent-env {bypass[0]} gives the agent an endpoint of its own"
            if bypass
            else "a script agent without -m may call a model of its own"
        )
        problems.append(
            Problem(
                "token_budget" if spec.token_budget is not None else "turn_budget",
                f"--token-budget/--turn-budget: {why}, so the model proxy cannot count its calls and the budget "
                "cannot hold; fix: give the agent an API key (export ANTHROPIC_API_KEY, or use a provider-prefixed "
                "-m) so its calls go through the proxy, or drop the per-trial budget",
            )
        )
    if not agent.calls_proxy():
        if spec.max_cost_usd is not None and agent.login:
            problems.append(
                Problem(
                    "max_cost_usd",
                    "--max-cost-usd: a Claude login reports no dollars; fix: cap tokens with --max-tokens",
                )
            )
        return problems
    if gateway is None:
        return [
            Problem(
                "model",
                f"-a {spec.agent} -m {spec.model}: this run has no model gateway to route the model through",
            )
        ]
    for text in gateway.check_model(
        spec.model or "", agent.protocol, spec.max_cost_usd is not None
    ):
        problems.append(
            Problem("max_cost_usd" if text.startswith("--max-cost-usd") else "model", text)
        )
    return problems


def task_warnings(tasks: list[Task], host: HostResources, agent: Agent) -> list[ev.Event]:
    """What the selected tasks ask that cannot be had in full: each distinct key once, naming the
    tasks (Terminal-Bench gives every task the same storage_mb, say), MCP servers or skills an
    agent that takes none runs without, and each task that asks for more CPUs or memory than the machine has."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for task in tasks:
        for w in task.warnings:
            grouped.setdefault((w.field, w.message), []).append(task.name)
    found: list[ev.Event] = [
        ev.TasksWarned(k, m, tuple(names)) for (k, m), names in grouped.items()
    ]
    with_servers = tuple(t.name for t in tasks if t.sandbox.mcp_servers)
    if with_servers and agent.mcp_config(()) is None:
        found.append(ev.AgentLacks("environment.mcp_servers", agent.name, with_servers))
    with_skills = tuple(t.name for t in tasks if t.sandbox.skills_dir)
    if with_skills and agent.skills_folder() is None:
        found.append(ev.AgentLacks("environment.skills_dir", agent.name, with_skills))
    for task in tasks:
        given = grant(task.sandbox.cpus, task.sandbox.memory_mb, host)
        if given.reduced:
            found.append(
                ev.ResourcesReduced(
                    task.name,
                    given.requested_cpus,
                    given.cpus,
                    given.requested_memory_mb,
                    given.memory_mb,
                )
            )
    return found


def login_held(agent: Agent) -> str | None:
    """What of this machine's Claude login the agent will hold, or None when it holds none."""
    from runs.agents.claude import login_credentials

    if not agent.login or not agent.model:
        return None
    credentials = login_credentials(agent.model)
    return None if credentials is None else lent(credentials)


def resume_spec(
    job_dir: Path,
    agent_env: dict[str, str],
    concurrency: int | None,
    redo: list[str] | None = None,
    reviewer_env: dict[str, str] | None = None,
) -> RunSpec:
    """`bench eval resume JOB`: the job's recorded settings; secret --agent-env (and
    --reviewer-agent-env) values asked for by name; `redo`: trials to run again though they have
    a reward."""
    evaluation = job_dir / "evaluation.json"
    if not evaluation.is_file():
        raise UserError(
            f"{job_dir} is not a job folder (no evaluation.json); fix: pass a folder made by bench run"
        )
    recorded = read_object(evaluation)
    if recorded is None:
        raise UserError(
            f"{evaluation} is not a JSON object (half-written or edited); fix: restore it from "
            "a copy, or start the job again with bench run --fresh"
        )
    missing = [k for k in recorded.get("agent_env_secret_keys") or [] if k not in agent_env]
    if missing:
        flags = " ".join(f"--agent-env {k}=..." for k in missing)
        raise UserError(
            f"{job_dir} ran with secret --agent-env values that are never recorded: {', '.join(missing)}; "
            f"fix: pass them again: bench eval resume {job_dir} {flags}"
        )
    reviewer_env = reviewer_env or {}
    reviewer = recorded.get("reviewer")
    reviewer = reviewer if isinstance(reviewer, dict) else {}
    missing = [k for k in reviewer.get("agent_env_keys") or [] if k not in reviewer_env]
    if missing:
        flags = " ".join(f"--reviewer-agent-env {k}=..." for k in missing)
        raise UserError(
            f"{job_dir} ran with --reviewer-agent-env values that are never recorded: "
            f"{', '.join(missing)}; fix: pass them again: bench eval resume {job_dir} {flags}"
        )
    spec = RunSpec.from_recorded(recorded, concurrency=concurrency)
    spec.agent_env.update(agent_env)
    spec.reviewer_agent_env.update(reviewer_env)
    spec.jobs_dir = job_dir.parent
    spec.job = job_dir.name
    spec.redo = list(redo or [])
    return spec
