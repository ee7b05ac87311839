"""Running a job in this process to its end: `bench run`, `bench eval resume`, and the process an
operation from the dashboard started (runs/operations/execute.py) all run it here: checked, the
agent installed where the attempts run, the job's events to the console and the index."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runs import events as ev
from runs.agents.base import AgentError
from runs.gateway import ModelGateway
from runs.jobfolder import JobLocked
from runs.jobs.console import Reporter
from runs.jobs.preflight import (
    check_run,
    docker_client,
    login_held,
    no_tasks,
    resume_spec,
    task_warnings,
)
from runs.problems import UserError, refusal
from runs.sandboxes.resources import host_resources
from runs.spec import RunSpec
from runs.workers.broker import Broker


def run_job(
    spec: RunSpec,
    *,
    setup_django: Callable[[], None],
    reporter: Reporter | None = None,
    gateway: ModelGateway | None = None,
    broker: Broker | None = None,
    on_server: bool = False,
    indexed: bool = True,
) -> int:
    """Check, install the agent (where the attempts run), then run the job, in this process or on
    workers through `broker`; raises UserError for what stops it first. `on_server`: launched
    from `bench serve` (check_run's); `indexed`: False for a reviewer's run (runs/review/auto.py),
    which the index leaves out as `bench index` does (it lies inside the reviewed attempt)."""
    found = check_run(spec, gateway, on_server=on_server)
    if found.problems:
        raise refusal(found.problems)
    if not found.tasks:
        raise UserError(str(no_tasks(spec)), problems=[no_tasks(spec)])
    assert found.agent is not None
    client = docker_client()
    reporter = reporter or Reporter(quiet=spec.quiet)
    bus = ev.Bus(reporter)
    if (held := login_held(found.agent)) is not None:
        bus.emit(ev.LoginLent(spec.agent, spec.model or "", held))
    for event in task_warnings(found.tasks, host_resources(client), found.agent):
        bus.emit(event)
    setup_django()
    from runs.index import Index  # the ORM models need Django set up first
    from runs.jobs.run import JobRun
    from runs.workers.choose import choose

    scale_out = choose(spec.workers, broker)
    if scale_out is None:  # each worker installs it where it runs
        try:
            found.agent.install(bus.emit)
        except AgentError as exc:
            raise UserError(f"-a {spec.agent}: {exc}", exit_code=1) from None
    index = Index()
    if indexed:
        bus.subscribe(index)
    try:
        job = JobRun(
            spec, found.tasks, found.agent, reporter, client, gateway, bus, scale_out, found.host
        )
        job.on_server = on_server  # its reviewers (runs/review/auto.py) run as it does
        return job.execute()
    except JobLocked as exc:
        raise UserError(
            f"refusing to run: {exc}; wait for it to finish or stop it first", exit_code=1
        ) from None
    finally:
        index.close()


def resume_job(
    job_dir: Path,
    agent_env: dict[str, str],
    concurrency: int | None,
    quiet: bool,
    *,
    setup_django: Callable[[], None],
    gateway: ModelGateway | None = None,
    redo: list[str] | None = None,
    broker: Broker | None = None,
    reviewer_env: dict[str, str] | None = None,
) -> int:
    """`bench eval resume JOB`: the job's recorded settings (secret values given again), run as
    `run_job` runs it; `redo`: trials to run again though they have a reward."""
    spec = resume_spec(job_dir, agent_env, concurrency, redo, reviewer_env)
    spec.quiet = quiet
    return run_job(spec, setup_django=setup_django, gateway=gateway, broker=broker)
