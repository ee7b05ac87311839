"""What the index shows of an operation before (and if) its run says so itself: a launched job at
once, and one whose run never started as failed, each with an Event row that open pages hear of."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.db import transaction

from runs.index.writer import ensure_job, finish_job_rows, record_event, refresh_job
from runs.jobfolder import read_object
from runs.models import Job, JobState
from runs.operations.control import lock_holder


def _job_id(job_dir: Path) -> int | None:
    return Job.objects.filter(path=str(job_dir.resolve())).values_list("id", flat=True).first()


def launched(job_dir: Path, settings: Mapping[str, Any], by: str) -> None:
    """A new job's row with its planned trials waiting, or a resumed job's row marked running."""
    with transaction.atomic():
        job_id = _job_id(job_dir)
        if job_id is None:
            job_id = ensure_job(job_dir, settings, state=JobState.RUNNING).pk
            refresh_job(job_id)
        else:
            Job.objects.filter(pk=job_id).update(state=JobState.RUNNING, finished_at=None)
        record_event(job_id, "job_launched", "", {"by": by})


def not_launched(job_dir: Path, existed: bool) -> None:
    """The launcher could not start the run: a new job's row goes, a resumed one is as it was."""
    with transaction.atomic():
        job_id = _job_id(job_dir)
        if job_id is None:
            return
        if not existed:
            Job.objects.filter(pk=job_id).delete()
            return
        ended(job_dir, "launch_failed")


def ended(job_dir: Path, why: str) -> None:
    """The operation's process ended without its run finishing the job (it failed before the run
    began, or was stopped then): failed when nothing ever ran, else interrupted."""
    with transaction.atomic():
        job_id = _job_id(job_dir)
        if job_id is None:
            return
        job = Job.objects.only("state").get(pk=job_id)
        if job.state != JobState.RUNNING or lock_holder(job_dir) is not None:
            return  # the run itself said how it ended, or another run holds the job
        ran = (job_dir / "evaluation.json").is_file()
        summary = read_object(job_dir / "summary.json") if ran else None
        state = JobState.FINISHED if summary else JobState.INTERRUPTED if ran else JobState.FAILED
        finish_job_rows(job_id, summary, state)
        record_event(job_id, "job_finished", "", {"state": state, "why": why})
