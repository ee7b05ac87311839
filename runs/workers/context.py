"""What a worker needs to run a job's attempts with the same trial code as in process: the run's
settings, its agent (installed here, pointed at this worker's model proxy), its tasks, and an
AttemptRunner. Built once per coordinator run, on the first attempt of it this worker takes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runs import events as ev
from runs.agents.base import AgentError
from runs.agents.logins import shared_login_allowed
from runs.agents.registry import resolve_agent
from runs.gateway import ModelGateway
from runs.host_env import NO_HOST_ENV, HostEnv, sealed_host_env
from runs.sandboxes.docker import Sandbox, SandboxFactory
from runs.spec import RunSpec
from runs.tasks.load import Task, TaskError, load_task
from runs.trials.attempt import AttemptRunner
from runs.workers.sealed import Sealed


class WorkerSetupError(Exception):
    """This worker cannot run the job's attempts (its message says why and the fix)."""


@dataclass(frozen=True)
class LeaseInfo:
    """What a lease names: the attempt, and the run it belongs to."""

    uid: str
    job_path: str
    job_name: str
    trial_name: str
    task_path: str
    trial_index: int
    attempt: int
    env_digest: str
    dispatcher: int
    cwd: str
    settings: dict[str, Any]
    queue: str = ""  # the broker's queue its coordinator sends to


# what a lease names, read with its claim (runs.workers.leases.claim_reading)
INFO_FIELDS = (
    "uid",
    "job_path",
    "trial_name",
    "task_path",
    "trial_index",
    "attempt",
    "env_digest",
    "dispatcher_id",
    "dispatcher__cwd",
    "dispatcher__settings",
    "dispatcher__queue",
)


def info_of(row: dict[str, Any]) -> LeaseInfo:
    """A LeaseInfo of the lease's INFO_FIELDS."""
    return LeaseInfo(
        uid=row["uid"],
        job_path=row["job_path"],
        job_name=Path(row["job_path"]).name,
        trial_name=row["trial_name"],
        task_path=row["task_path"],
        trial_index=row["trial_index"],
        attempt=row["attempt"],
        env_digest=row["env_digest"],
        dispatcher=row["dispatcher_id"],
        cwd=row["dispatcher__cwd"],
        settings=row["dispatcher__settings"] or {},
        queue=row["dispatcher__queue"],
    )


@dataclass
class JobContext:
    runner: AttemptRunner
    live: set[Sandbox]
    tasks: dict[str, Task] = field(default_factory=dict)
    host: HostEnv = NO_HOST_ENV  # what the run's coordinator let its tasks read, sealed to here

    def task(self, path: str) -> Task:
        if path not in self.tasks:
            try:
                self.tasks[path] = load_task(Path(path), self.host)
            except TaskError as exc:
                raise WorkerSetupError(
                    f"the task {path} does not load on this worker: "
                    + "; ".join(str(p) for p in exc.problems)
                ) from None
            except OSError as exc:
                raise WorkerSetupError(
                    f"the task folder {path} is not readable on this worker ({exc}); fix: share "
                    "the tasks folder at the same path on every machine"
                ) from None
        return self.tasks[path]


def worker_spec(
    info: LeaseInfo, sealed: Sealed | None, pass_env: Mapping[str, str] | None = None
) -> RunSpec:
    """The run's recorded settings, with its secret --agent-env values (never recorded) from
    what its coordinator sealed (runs/workers/sealed.py); a value that did not come so is taken
    from this worker's environment only when its admin passes that name (`--pass-env`)."""
    spec = RunSpec.from_recorded(info.settings)
    given = dict(sealed.agent_env) if sealed is not None else {}
    passed = dict(pass_env or {})
    missing = []
    for key in info.settings.get("agent_env_secret_keys") or []:
        if key in given:
            spec.agent_env[key] = given[key]
        elif key in passed:
            spec.agent_env[key] = passed[key]
        else:
            missing.append(key)
    if missing:
        raise WorkerSetupError(
            f"the job's secret --agent-env {', '.join(missing)} did not reach this worker (the "
            "values are sealed to workers only while the job's coordinator runs) and this "
            "worker passes no value of its own for it; fix: resume the job with "
            f"--agent-env {missing[0]}=..., or start this worker with --pass-env {missing[0]} "
            "to give it this worker's own value"
        )
    return spec


async def build_context(
    info: LeaseInfo,
    *,
    client: Any,
    gateway_port: Callable[[], Any],
    gateway: ModelGateway | None,
    emit: Callable[[ev.Event], None],
    sealed: Sealed | None = None,
    pass_env: Mapping[str, str] | None = None,
) -> JobContext:
    """The run's AttemptRunner on this worker; WorkerSetupError when it cannot be had here.
    `sealed`: what the run's coordinator handed its workers; `pass_env`: the values of this
    worker's own environment its admin lets sandboxes have."""
    job_dir = Path(info.job_path)
    if not (job_dir / "evaluation.json").is_file():
        raise WorkerSetupError(
            f"the job folder {job_dir} is not on this worker (no evaluation.json there); fix: "
            "share the jobs folder at the same path on every machine"
        )
    spec = worker_spec(info, sealed, pass_env)
    lender = None if shared_login_allowed() else "this worker"
    try:
        agent = resolve_agent(
            spec.agent, model=spec.model, cwd=Path(info.cwd), login_lent_by=lender
        )
        # npm installs of the agent CLIs happen once per version on each machine
        await asyncio.get_running_loop().run_in_executor(None, agent.install, emit)
    except AgentError as exc:
        raise WorkerSetupError(f"-a {spec.agent} on this worker: {exc}") from None
    proxy = judges = None
    if agent.calls_proxy():
        if gateway is None:
            raise WorkerSetupError("this worker has no model gateway for -m")
        port = await gateway_port()
        agent, proxy = agent.with_proxy(f"http://127.0.0.1:{port}"), gateway
    if info.settings.get("judged") and gateway is not None:  # a verifier asks for a model
        await gateway_port()
        judges = gateway
    live: set[Sandbox] = set()
    factory = SandboxFactory(client, job_dir.name, str(job_dir.resolve()))
    runner = AttemptRunner(spec, agent, factory, job_dir, emit, live, proxy, judges)
    host = sealed_host_env(sealed.host_env if sealed is not None else {})
    return JobContext(runner, live, host=host)
