"""`bench export JOB --format harbor OUT`: a copy of a job folder in Harbor's layout.

Each trial's best attempt that wrote a result becomes one Harbor trial folder (Harbor keeps one
folder per trial): its files copied, and Harbor's result.json, config.json and lock.json written
beside them; the job gets Harbor's config.json (agent, model, the task folders, repeats) and
result.json (progress and reward means). `harbor view` lists the copy with its rewards, and
`harbor job resume` plans the same trials from the job's config.json, finds them done, and runs
only trials the copy lacks. The job folder itself is only read. Documents: runs/results/harbor/write.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from runs.jobfolder import read_object, write_json
from runs.problems import UserError
from runs.results.attempt_folder import RESULT
from runs.results.harbor import write as harbor
from runs.results.job_documents import REVIEWS, is_job_folder, not_a_job, read_job
from runs.results.load import Trial, load_job
from runs.tasks.load import folder_digest

# written anew in each trial folder; everything else of the attempt is copied as it is
REPLACED = frozenset({RESULT, "config.json", "lock.json"})


@dataclass
class Exported:
    out: Path
    trials: int
    left_out: list[str] = field(default_factory=list)  # trials with no result to export, and why


def _task_paths(trials: list[Trial], plan: list[str], tasks_dir: str | None) -> dict[str, str]:
    """Each task's folder, as its attempts recorded it (config.json's task_path); a task of the
    plan no attempt ran, beside the others (else under the job's tasks folder)."""
    found: dict[str, str] = {}
    for trial in trials:
        for attempt in trial.attempts:
            recorded = (read_object(Path(attempt.path) / "config.json") or {}).get("task_path")
            if recorded and trial.task not in found:
                found[trial.task] = str(Path(recorded).resolve())
    base = Path(next(iter(found.values()))).parent if found else Path(tasks_dir or ".").resolve()
    return {task: found.get(task) or str(base / task) for task in [*plan, *found]}


def _digest(task_path: str, task: str) -> str:
    """The task folder's content digest when it is at hand, else one of its name (stable)."""
    if Path(task_path).is_dir():
        return folder_digest(Path(task_path))
    return f"sha256:{hashlib.sha256(f'task:{task}'.encode()).hexdigest()}"


def _copy(src: Path, dst: Path) -> None:
    def ignore(folder: str, names: list[str]) -> set[str]:
        top = os.path.samefile(folder, src)
        return {n for n in names if top and n in REPLACED or n.startswith(".")}

    shutil.copytree(src, dst, symlinks=True, ignore=ignore)


def export_harbor(job_dir: Path, out: Path) -> Exported:
    """Write the Harbor-shaped copy of `job_dir` to `out`, a folder that must not exist yet."""
    if not job_dir.is_dir() or not is_job_folder(job_dir):
        raise UserError(not_a_job(job_dir))
    if out.exists():
        raise UserError(f"{out} already exists; fix: name a new folder (the copy never merges)")
    documents = read_job(job_dir)
    if documents.source == "harbor":
        raise UserError(f"{job_dir} is a Harbor job already; fix: copy it as it is")
    job = load_job(job_dir)
    settings = documents.settings
    agent = harbor.agent_config(str(settings.get("agent") or ""), settings.get("model"))
    job_id = harbor.job_id(str(job_dir.resolve()))
    out.mkdir(parents=True)
    out = out.resolve()
    report = Exported(out, 0)
    plan = [str(t) for t in settings.get("plan") or () if isinstance(settings.get("plan"), list)]
    paths = _task_paths(job.best_trials, plan, settings.get("tasks_dir"))
    trials = []
    for trial in job.best_trials:
        chosen = trial.chosen
        if chosen is None or chosen.typed is None:
            report.left_out.append(f"{trial.trial_name} ({trial.outcome}: no result)")
            continue
        task_path = paths[trial.task]
        folder = out / chosen.folder
        _copy(Path(chosen.path), folder)
        config = harbor.trial_config(task_path, chosen.folder, str(out), agent, job_id)
        digest = _digest(task_path, trial.task)
        doc = harbor.trial_document(
            chosen.typed,
            config,
            trial_uri=folder.as_uri(),
            task_path=task_path,
            checksum=digest.removeprefix("sha256:"),
            source=None,
        )
        write_json(folder / "config.json", config)
        write_json(folder / "lock.json", harbor.trial_lock(trial.task, task_path, digest, agent))
        write_json(folder / RESULT, doc)
        trials.append(doc)
    recorded = settings.get("trials")
    repeats = recorded if isinstance(recorded, int) and recorded > 0 else 1
    write_json(
        out / "config.json",
        harbor.job_config(
            out.name,
            str(out.parent),
            agent,
            list(paths.values()),
            repeats,
            settings.get("concurrency"),
        ),
    )
    started = [str(d["started_at"]) for d in trials if d.get("started_at")]
    finished = [str(d["finished_at"]) for d in trials if d.get("finished_at")]
    write_json(
        out / RESULT,
        harbor.job_result(
            job_id,
            documents.started_at or min(started, default=None) or datetime.now().isoformat(),
            max(finished) if documents.ended and finished else None,
            max(len(paths) * repeats, len(job.best_trials)),
            trials,
        ),
    )
    # people's notes, tags and verdicts, keyed by trial name as the copy's trials are (`bench index`
    # of the copy reads them back)
    if (job_dir / REVIEWS).is_file() and not (job_dir / REVIEWS).is_symlink():
        shutil.copyfile(job_dir / REVIEWS, out / REVIEWS)
    report.trials = len(trials)
    return report
