"""What an operation tells the index before (and if) its run says so itself: a launched job at
once, a launch that failed, and how a job ended whose run never said it. The operation decides;
each decision is an event the index's projector applies (runs/index/projector.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.db import transaction

from runs import events as ev
from runs.index.projector import Projector
from runs.jobfolder import read_object
from runs.models import Job, JobState
from runs.operations.control import lock_holder


def launched(job_dir: Path, settings: Mapping[str, Any], by: str) -> None:
    """A new job's row with its planned trials waiting, or a resumed job's row marked running."""
    Projector().apply(ev.JobLaunched(job_dir.name, str(job_dir), dict(settings), by))


def not_launched(job_dir: Path, existed: bool) -> None:
    """The launcher could not start the run: a new job's row goes, a resumed one is closed as
    its folder says it stands."""
    if not existed:
        Projector().apply(ev.LaunchFailed(job_dir.name, str(job_dir)))
    else:
        ended(job_dir, "launcher_failed")


def ended(job_dir: Path, why: str) -> None:
    """The operation's process ended without its run finishing the job (it failed before the run
    began, or was stopped then): finished if the run wrote a summary, failed when nothing ever
    ran, else interrupted. Nothing when the run said how it ended, or another run holds the job."""
    with transaction.atomic():
        state = (
            Job.objects.filter(path=str(job_dir.resolve())).values_list("state", flat=True).first()
        )
        if state != JobState.RUNNING or lock_holder(job_dir) is not None:
            return
        ran = (job_dir / "evaluation.json").is_file()
        summary = read_object(job_dir / "summary.json") if ran else None
        closed = JobState.FINISHED if summary else JobState.INTERRUPTED if ran else JobState.FAILED
        Projector().apply(ev.JobClosed(job_dir.name, str(job_dir), closed, why, summary))
