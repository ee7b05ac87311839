"""Launch, resume and rerun from the dashboard (or any caller): the settings checked by the same
code as `bench run`, every problem tied to its field, and nothing created unless all is well; then
the job's folder is made, its index row shown at once, and the run started by a Launcher."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runs.gateway import ModelGateway
from runs.jobfolder import read_object, unique_job_dir
from runs.jobs.plan import created_now, job_settings
from runs.jobs.preflight import (
    check_run,
    docker_client,
    job_name_problems,
    no_tasks,
    resume_spec,
)
from runs.operations import control
from runs.operations import roots as paths
from runs.operations.process import CONSOLE_LOG, Launcher, Request
from runs.problems import Problem, UserError
from runs.spec import RunSpec, parse_form, spec_payload
from runs.tasks.load import Task

SCRIPT_PREFIX = "script:"
MOCK_SCRIPT_PREFIX = "mock/script:"


@dataclass
class Checked:
    """A run ready to start, or every problem that keeps it from starting."""

    spec: RunSpec | None
    tasks: list[Task] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.spec is not None and not self.problems


def _file_under_root(text: str, where: paths.Roots) -> Path | None:
    """A file named on the launch form, fully resolved (every symlink, the file's own too), when
    it is a regular file under a task root; else None."""
    if not where.task_roots:
        return None
    given = Path(text)
    resolved = (given if given.is_absolute() else where.task_roots[0] / given).resolve()
    if not resolved.is_file() or not any(paths.under(resolved, r) for r in where.task_roots):
        return None
    return resolved


def _agent_problems(agent: str, where: paths.Roots) -> tuple[str, list[Problem]]:
    """A script agent from the browser must be a file under a task root (made absolute, with
    symlinks resolved: a link in a root to a file elsewhere is refused)."""
    if not agent.startswith(SCRIPT_PREFIX):
        return agent, []
    script = agent[len(SCRIPT_PREFIX) :]
    found = _file_under_root(script, where)
    if found is None:
        return agent, [
            Problem(
                "agent",
                f"-a/--agent: {script} is not a file under a configured task root (a symlink "
                "counts where it leads); fix: put the script in a task root",
            )
        ]
    return f"{SCRIPT_PREFIX}{found}", []


def _model_problems(model: str, where: paths.Roots) -> tuple[str, list[Problem]]:
    """A mock/script:FILE from the browser must be a file under a task root, as a script agent
    must: the proxy reads the file."""
    if not model.startswith(MOCK_SCRIPT_PREFIX):
        return model, []
    script = model[len(MOCK_SCRIPT_PREFIX) :]
    found = _file_under_root(script, where)
    if found is None:
        return model, [
            Problem(
                "model",
                f"-m/--model: {script} is not a file under a configured task root (a symlink "
                "counts where it leads); fix: put the reply script in a task root",
            )
        ]
    return f"{MOCK_SCRIPT_PREFIX}{found}", []


def _docker_problems() -> list[Problem]:
    try:
        docker_client()
    except UserError as exc:
        return [Problem("", str(exc))]
    return []


def _busy_problems(spec: RunSpec) -> list[Problem]:
    if spec.job and control.is_running(spec.jobs_dir / spec.job):
        return [
            Problem(
                "job", f"--job {spec.job}: that job is running now; wait for it or cancel it first"
            )
        ]
    return []


def check_spec(spec: RunSpec, gateway: ModelGateway | None) -> Checked:
    """`bench run`'s own check (check_run, as for a job launched from `bench serve`), then the
    engine and the job's lock."""
    found = check_run(spec, gateway, on_server=True)
    problems = list(found.problems)
    if not problems and not found.tasks:
        problems.append(no_tasks(spec))
    problems += _busy_problems(spec)
    if not problems:
        problems += _docker_problems()
    return Checked(spec if not problems else None, found.tasks, problems)


def check_launch(
    texts: Mapping[str, str | Sequence[str]],
    where: paths.Roots,
    gateway: ModelGateway | None,
) -> Checked:
    """A launch form's values: the tasks folder under a task root, jobs into BENCHFLOW_JOBS_DIR, then
    parsed and checked as `bench run` checks its flags."""
    values = dict(texts)
    problems: list[Problem] = []
    folder = paths.task_folder(str(values.get("tasks_dir") or ""), where)
    if isinstance(folder, Problem):
        problems.append(folder)
    else:
        values["tasks_dir"] = str(folder)
    agent, agent_problems = _agent_problems(str(values.get("agent") or "").strip(), where)
    problems += agent_problems
    values["agent"] = agent
    model, model_problems = _model_problems(str(values.get("model") or "").strip(), where)
    problems += model_problems
    if model:
        values["model"] = model
    values["jobs_dir"] = str(where.jobs_dir)
    values.pop("fresh", None)
    values.pop("quiet", None)
    spec, parse_problems = parse_form(values)
    problems += parse_problems
    if spec is not None:
        problems += job_name_problems(spec.job, spec.jobs_dir)
    if problems or spec is None:
        return Checked(None, [], _unique(problems))
    checked = check_spec(spec, gateway)
    return Checked(checked.spec, checked.tasks, _unique(checked.problems))


def _unique(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def check_resume(
    job_dir: Path,
    gateway: ModelGateway | None,
    *,
    agent_env: Mapping[str, str] | None = None,
    redo: Sequence[str] = (),
    reviewer_env: Mapping[str, str] | None = None,
) -> Checked:
    """`bench eval resume` of a job (the errored and unfinished trials run again), or with `redo`
    named trials too: the job's recorded settings, checked as for a launch."""
    try:
        spec = resume_spec(
            job_dir, dict(agent_env or {}), None, list(redo), dict(reviewer_env or {})
        )
    except UserError as exc:
        return Checked(None, [], [Problem("agent_env", str(exc))])
    return check_spec(spec, gateway)


def start(checked: Checked, launcher: Launcher, *, by: str = "") -> Path:
    """Make the job's folder (or take the resumed one), show it in the index, and hand the run to
    the launcher; returns the job folder. A launcher that fails leaves nothing behind."""
    if not checked.ok or checked.spec is None:
        raise UserError("refusing to start a run that has problems", problems=checked.problems)
    spec = dataclasses.replace(checked.spec, fresh=False, quiet=False)
    existed = bool(spec.job) and (spec.jobs_dir / str(spec.job)).is_dir()
    job_dir = _claim_folder(spec)
    spec.job = job_dir.name
    from runs.operations import shown  # the ORM needs Django set up: only here

    settings = {**job_settings(spec, checked.tasks, job_dir.name), "created_at": created_now()}
    shown.launched(job_dir, settings, by)
    try:
        launcher.start(Request("run", str(job_dir), spec_payload(spec), by))
    except Exception:
        shown.not_launched(job_dir, existed)
        if not existed:
            shutil.rmtree(job_dir, ignore_errors=True)
        raise
    return job_dir


def _claim_folder(spec: RunSpec) -> Path:
    """The named job's folder, or a new timestamped one claimed by its mkdir (two launches in the
    same second get two folders)."""
    if spec.job:
        job_dir = spec.jobs_dir / spec.job
        job_dir.mkdir(parents=True, exist_ok=True)
        return job_dir
    while True:
        job_dir = unique_job_dir(spec.jobs_dir)
        try:
            job_dir.mkdir(parents=True)
        except FileExistsError:
            continue
        return job_dir


def recorded_secret_keys(job_dir: Path) -> list[str]:
    """The --agent-env keys whose values a resume must be given again (never recorded)."""
    data = read_object(job_dir / "evaluation.json") or {}
    return [str(k) for k in data.get("agent_env_secret_keys") or []]


def recorded_reviewer_env_keys(job_dir: Path) -> list[str]:
    """The --reviewer-agent-env keys a resume must be given again (their values are never
    recorded)."""
    data = read_object(job_dir / "evaluation.json") or {}
    reviewer = data.get("reviewer")
    return (
        [str(k) for k in (reviewer or {}).get("agent_env_keys") or []]
        if isinstance(reviewer, dict)
        else []
    )


def console_log(job_dir: Path) -> Path | None:
    path = job_dir / CONSOLE_LOG
    return path if path.is_file() and not path.is_symlink() else None


def resume(
    job_dir: Path,
    launcher: Launcher,
    gateway: ModelGateway | None,
    *,
    agent_env: Mapping[str, str] | None = None,
    redo: Sequence[str] = (),
    by: str = "",
    reviewer_env: Mapping[str, str] | None = None,
) -> Path:
    """Continue a job as `bench eval resume` does: its unfinished and errored trials run again
    (rerun errored), and with `redo` the named trials too though they have a reward (rerun
    selected). Raises UserError with every problem; nothing starts then."""
    checked = check_resume(
        job_dir, gateway, agent_env=agent_env, redo=redo, reviewer_env=reviewer_env
    )
    if not checked.ok:
        raise UserError("; ".join(p.text for p in checked.problems), problems=checked.problems)
    return start(checked, launcher, by=by)
