"""runs.operations.control.cancel: who is asked to stop a run, and what a user is told when that
cannot be done."""

from __future__ import annotations

import fcntl

import pytest

from runs.jobfolder import CANCEL_REQUEST, LOCK_FILE
from runs.operations import control
from runs.problems import UserError


def _held_by(job, text: str):
    """The job's lock held (by this process, as a run elsewhere would hold it) and saying `text`."""
    fh = open(job / LOCK_FILE, "a+")  # noqa: SIM115 - held until the test closes it
    fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
    fh.truncate(0)
    fh.write(text)
    fh.flush()
    return fh


def test_a_run_on_another_machine_is_asked_through_a_file_in_the_job_folder(tmp_path):
    job = tmp_path / "2026-01-01__00-00-00"
    job.mkdir()
    with _held_by(job, "pid 4242 on far-away"):
        said = control.cancel(job)
    assert said == "pid 4242 on far-away, asked through the job folder"
    assert (job / CANCEL_REQUEST).read_text().startswith("SIGTERM from ")


def test_a_request_that_cannot_be_written_is_a_clear_error_naming_the_file_and_the_fix(tmp_path):
    # given a run on another machine, and a job folder where the request cannot be written (here
    # a folder in its place; on a mount, a folder this machine's user may not write)
    job = tmp_path / "2026-01-01__00-00-00"
    (job / CANCEL_REQUEST).mkdir(parents=True)
    with _held_by(job, "pid 4242 on far-away"), pytest.raises(UserError) as caught:
        control.cancel(job)
    text = str(caught.value)
    assert f"could not be written to {job / CANCEL_REQUEST}" in text
    assert "fix: give this machine's user write access to the job folder" in text
    assert "stop it on far-away" in text


def test_a_job_nobody_runs_has_nothing_to_cancel(tmp_path):
    job = tmp_path / "2026-01-01__00-00-00"
    job.mkdir()
    with pytest.raises(UserError, match="is not running; nothing to cancel"):
        control.cancel(job)


@pytest.mark.django_db(transaction=True)
def test_a_fleet_job_no_worker_took_is_cancelled_and_no_worker_takes_it(tmp_path):
    from runs.models import Job
    from runs.operations import shown
    from runs.workers import coordination

    # given a job handed to the fleet, queued for a worker that has not taken it
    job = tmp_path / "2026-01-01__00-00-00"
    job.mkdir()
    (job / control.FLEET_MARK).write_text("coordination 1\n")
    shown.launched(job, {"agent": "oracle"}, "ann")
    pk = coordination.submit(str(job.resolve()), "q", {})
    assert pk is not None
    # when it is cancelled
    said = control.cancel(job)
    # then it is ended, said honestly, closed in the index, and no worker takes it later
    assert said == control.CANCELLED_WAITING
    assert "no worker had taken it, and none will start it" in control.cancelled_message(
        job.name, said
    )
    assert coordination.takeable(["q"], "a") == []
    assert coordination.take(pk, "a:1", 20, host="a") is None
    where = coordination.where(str(job.resolve()))
    assert where is not None
    assert where.lines() == ["Coordination: cancelled before a worker took the job"]
    assert Job.objects.get(path=str(job)).state == "interrupted"
    # a second cancel has nothing left to cancel
    with pytest.raises(UserError, match="is not running; nothing to cancel"):
        control.cancel(job)


@pytest.mark.django_db(transaction=True)
def test_a_fleet_job_a_worker_is_taking_now_is_said_so(tmp_path):
    from runs.workers import coordination

    job = tmp_path / "2026-01-01__00-00-00"
    job.mkdir()
    (job / control.FLEET_MARK).write_text("coordination 1\n")
    pk = coordination.submit(str(job.resolve()), "q", {})
    assert pk is not None
    assert coordination.take(pk, "m-one-worker", 20, host="m-one") is not None
    with pytest.raises(UserError, match="is starting on m-one .* cancel it again in a few"):
        control.cancel(job)
