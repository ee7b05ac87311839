"""Which job folder a run writes, and what is left to run in it (resume planning)."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runs.events import JobChosen
from runs.jobfolder import latest_auto_job, read_object, unique_job_dir, write_json
from runs.jobs.coordinator import TrialPlan
from runs.problems import UserError
from runs.results import attempts as attempt_results
from runs.results.attempts import outcome_of
from runs.spec import RESUME_KEYS, RunSpec
from runs.tasks.load import Task, environment_digest


@dataclass
class JobChoice:
    """Which folder a run writes; for a plain rerun that found the latest job's settings differ,
    which job that was and the setting (key, old, new) that kept it from resuming."""

    job_dir: Path
    resumed: bool
    latest: str | None = None
    mismatch: tuple[str, Any, Any] | None = None

    def event(self, jobs_dir: Path) -> JobChosen:
        key, old, new = self.mismatch or (None, None, None)
        return JobChosen(
            self.job_dir.name,
            str(self.job_dir),
            str(jobs_dir),
            self.resumed,
            self.latest,
            key,
            old,
            new,
        )


def _mismatch(recorded: dict[str, Any], spec: RunSpec) -> tuple[str, Any, Any] | None:
    current = spec.recorded()
    for key in RESUME_KEYS:
        old, new = recorded.get(key), current.get(key)
        if key == "tasks_dir" and old and new and Path(old).resolve() == Path(new).resolve():
            continue
        if old != new:
            return key, old, new
    return None


def choose_job(spec: RunSpec) -> JobChoice:
    """--job NAME, --fresh, or the latest job in --jobs-dir when its settings match."""
    jobs_dir = spec.jobs_dir
    if spec.job:
        job_dir = jobs_dir / spec.job
        return JobChoice(job_dir, (job_dir / "evaluation.json").is_file())
    if spec.fresh:
        return JobChoice(unique_job_dir(jobs_dir), False)
    latest = latest_auto_job(jobs_dir)
    if latest is None:
        return JobChoice(unique_job_dir(jobs_dir), False)
    recorded = read_object(latest / "evaluation.json")
    if recorded is None:
        return JobChoice(unique_job_dir(jobs_dir), False)
    why = _mismatch(recorded, spec)
    if why is None:
        return JobChoice(latest, True)
    return JobChoice(unique_job_dir(jobs_dir), False, latest.name, why)


def job_settings(spec: RunSpec, tasks: list[Task], job_name: str) -> dict[str, Any]:
    """evaluation.json's settings: the run's recorded settings (no secret values), its plan and
    its job's name. `created_at` is added by whoever writes the job's folder first."""
    return {**spec.recorded(), "plan": [t.name for t in tasks], "job_name": job_name}


def created_now() -> str:
    """evaluation.json's `created_at`: local time, zone-less, as BenchFlow writes it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def trial_names(task: Task, trials: int) -> list[tuple[int, str]]:
    return [(i, task.name if i == 0 else f"{task.name}#{i}") for i in range(trials)]


@dataclass
class Plan:
    total: int  # trials planned (tasks x repeats)
    done: dict[str, dict[str, Any]]  # trial_name -> best (scored) earlier result
    waves: list[list[TrialPlan]]
    # (repeat, result) of every earlier attempt; for one cancelled while it ran (no result.json): the
    # timing.json of one a job cap cancelled (`cancelled_by`, what its agent spent), else its seconds
    earlier: list[tuple[int, dict[str, Any] | float | None]]

    @property
    def to_run(self) -> int:
        return sum(len(w) for w in self.waves)


def _without_result(attempt: attempt_results.Attempt) -> dict[str, Any] | float | None:
    """An attempt cancelled while it ran wrote timing.json, not result.json: a job cap's cancel with
    what its agent spent, else just its seconds."""
    if attempt.budget_cancelled:
        return attempt.timing
    try:
        return float((attempt.timing or {})["total"])
    except (ValueError, KeyError, TypeError):
        return None


# evaluation.json's list of redo requests (`--redo`): each names trials and the attempt folders
# they had then, which from that moment no longer make the trial done.
REDO = "redo"


def record_redo(job_dir: Path, names: Collection[str], by: str | None = None) -> None:
    """Append a redo request to the job's evaluation.json (under the job's lock): the named trials
    and their attempts so far, set aside for planning; nothing is deleted."""
    folders: dict[str, list[str]] = {name: [] for name in names}
    for attempt in attempt_results.read_attempts(job_dir) if job_dir.is_dir() else []:
        if attempt.trial_name in folders:
            folders[attempt.trial_name].append(attempt.folder)
    path = job_dir / "evaluation.json"
    recorded = read_object(path)
    if recorded is None:
        raise UserError(
            f"{path} is missing or not a JSON object; fix: pass a job folder made by bench run"
        )
    request: dict[str, Any] = {
        "requested_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "trials": {name: sorted(f) for name, f in folders.items()},
    }
    if by:
        request["by"] = by
    recorded[REDO] = [*(recorded.get(REDO) or []), request]
    write_json(path, recorded)


def set_aside(recorded: Mapping[str, Any]) -> dict[str, set[str]]:
    """trial -> the attempt folders redo requests set aside (they no longer make it done)."""
    found: dict[str, set[str]] = {}
    for request in recorded.get(REDO) or []:
        trials = request.get("trials") if isinstance(request, Mapping) else None
        for name, folders in (trials or {}).items():
            found.setdefault(str(name), set()).update(str(f) for f in folders or [])
    return found


def plan_job(
    job_dir: Path,
    tasks: list[Task],
    trials: int,
    set_aside: Mapping[str, Collection[str]] | None = None,
    running: frozenset[str] = frozenset(),
) -> Plan:
    """Tasks x repeats, minus the trials whose best attempt has a reward (even 0); attempts a redo
    request set aside (`set_aside`: trial -> folders) do not count, nor do those still `running`
    on a worker, which this run takes over (neither ended nor earlier attempts)."""
    aside = set_aside or {}
    by_trial: dict[str, list[attempt_results.Attempt]] = {}
    for attempt in attempt_results.read_attempts(job_dir) if job_dir.is_dir() else []:
        if attempt.folder not in running:
            by_trial.setdefault(attempt.trial_name, []).append(attempt)
    earlier = [
        (a.trial_index, a.result if a.result is not None else _without_result(a))
        for attempts in by_trial.values()
        for a in attempts
    ]
    done: dict[str, dict[str, Any]] = {}
    waves: list[list[TrialPlan]] = [[] for _ in range(trials)]
    for task in tasks:
        digest = environment_digest(task) if task.environment_dir else ""
        for index, name in trial_names(task, trials):
            attempts = by_trial.get(name, [])
            counted = [a for a in attempts if a.folder not in aside.get(name, ())]
            best = attempt_results.best_attempt(counted) if counted else None
            if (
                best is not None
                and best.result is not None
                and outcome_of(best.result) in ("passed", "failed")
            ):
                done[name] = best.result
                continue
            finished_before = any(a.result is not None for a in attempts)
            waves[index].append(
                TrialPlan(task, index, name, digest, len(attempts), finished_before)
            )
    return Plan(len(tasks) * trials, done, [w for w in waves if w], earlier)


def best_results(job_dir: Path) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """trial_name -> its best attempt's result (the same rule as resume and bench results), and the
    timing.json records of every attempt a job cap cancelled (what their agents spent); a trial whose
    every attempt a cap cancelled has no best result: it was kept from running."""
    by_trial: dict[str, list[attempt_results.Attempt]] = {}
    cancelled = []
    for attempt in attempt_results.read_attempts(job_dir):
        by_trial.setdefault(attempt.trial_name, []).append(attempt)
        if attempt.budget_cancelled and attempt.timing is not None:
            cancelled.append(attempt.timing)
    best = {}
    for name, attempts in by_trial.items():
        chosen = attempt_results.best_attempt(attempts)
        if chosen.result is not None:
            best[name] = chosen.result
    return best, cancelled
