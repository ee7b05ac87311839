"""Which process runs a job, and stopping it as SIGTERM does (running trials stopped, sandboxes
removed, a partial summary written): the same clean stop as Ctrl-C or kill on `bench run`."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
from pathlib import Path
from typing import NamedTuple

from runs.jobfolder import CANCEL_REQUEST, LOCK_FILE
from runs.problems import UserError

# The process an operation started for a job, written before it takes the job's lock (a job
# launched from the browser installs its agent first): cancel finds it there until then.
OPERATION_PID = ".operation.pid"
FLEET_MARK = ".fleet"  # in a job folder handed to the worker fleet (runs/operations/fleet.py)
OPERATION_MARK = "_operate"  # in the command line of every process an operation starts
# what `cancel` says of a job on the worker fleet that no worker had taken: nothing ran to stop
CANCELLED_WAITING = "cancelled before a worker took it; no worker will start it"


class Holder(NamedTuple):
    """The run holding a job's lock: its pid, on its machine."""

    pid: int
    host: str

    @property
    def here(self) -> bool:
        return self.host in ("", socket.gethostname())


def lock_holder(job_dir: Path) -> Holder | None:
    """The live run holding the job's lock (`pid N on HOST`), None when no process holds it."""
    path = job_dir / LOCK_FILE
    try:
        fh = open(path)
    except OSError:
        return None
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            words = fh.read().split()
            if len(words) < 2 or words[0] != "pid" or not words[1].isdigit():
                return None
            return Holder(int(words[1]), words[3] if words[2:3] == ["on"] else "")
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    return None


def _operation_pid(job_dir: Path) -> int | None:
    """The operation's process when it is still alive and still that process (pids are reused)."""
    try:
        pid = int((job_dir / OPERATION_PID).read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if OPERATION_MARK.encode() in cmdline else None


def running(job_dir: Path) -> Holder | None:
    """The process running (or about to run) the job: its lock's holder, else the operation's."""
    if (holder := lock_holder(job_dir)) is not None:
        return holder
    pid = _operation_pid(job_dir)
    return None if pid is None else Holder(pid, socket.gethostname())


def is_running(job_dir: Path) -> bool:
    return running(job_dir) is not None


def cancel(job_dir: Path) -> str:
    """Stop the run of the job as SIGTERM does: it stops its running trials, removes their
    sandboxes and writes a partial summary. Here, SIGTERM to its process; a run on another machine
    (the jobs folder shared) is asked through a file it looks for every second; a job on the worker
    fleet that no coordinator holds yet is ended in its Coordination row, so no worker starts it.
    Says which."""
    holder = running(job_dir)
    if holder is None and on_fleet(job_dir):
        return _cancel_on_the_fleet(job_dir)
    if holder is None:
        raise UserError(f"{job_dir.name} is not running; nothing to cancel")
    if not holder.here:
        request = job_dir / CANCEL_REQUEST
        try:
            request.write_text(f"SIGTERM from {socket.gethostname()}\n")
        except OSError as exc:
            raise UserError(
                f"{job_dir.name} runs as pid {holder.pid} on {holder.host}; the cancel request "
                f"could not be written to {request} ({exc.strerror or exc}); fix: give this "
                f"machine's user write access to the job folder, or stop it on {holder.host} "
                "(Ctrl-C, or kill)"
            ) from None
        return f"pid {holder.pid} on {holder.host}, asked through the job folder"
    pid = holder.pid
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        raise UserError(f"{job_dir.name} has just ended; nothing to cancel") from None
    except PermissionError:
        raise UserError(
            f"{job_dir.name} is run by pid {pid}, which this server's user may not signal; "
            "stop it where it runs (Ctrl-C, or kill)"
        ) from None
    return f"SIGTERM to pid {pid}"


def on_fleet(job_dir: Path) -> bool:
    """The job was handed to the worker fleet: its Coordination row says where it runs."""
    return (job_dir / FLEET_MARK).is_file()


def _cancel_on_the_fleet(job_dir: Path) -> str:
    """A job handed to the worker fleet whose run holds no lock here: queued for a worker, its
    coordinator lost, or one just taking it. The first two end now; the last is said."""
    from runs.workers import coordination

    path = str(job_dir.resolve())
    if coordination.cancel_waiting(path):
        _closed_as_cancelled(job_dir)
        return CANCELLED_WAITING
    found = coordination.where(path)
    if found is not None and found.state == coordination.RUNNING:
        raise UserError(
            f"{job_dir.name} is starting on {found.host} (worker {found.worker}) now; "
            "cancel it again in a few seconds"
        )
    raise UserError(f"{job_dir.name} is not running; nothing to cancel")


def cancelled_message(name: str, how: str) -> str:
    """What a person is told of a cancel (`how`: what `cancel` returned)."""
    if how == CANCELLED_WAITING:
        return f"Cancelled {name}: no worker had taken it, and none will start it now."
    return f"Stopping {name} ({how}): its running trials are stopped and their sandboxes removed."


def _closed_as_cancelled(job_dir: Path) -> None:
    """The index closes the job as interrupted (it never ran, or its coordinator was lost), with
    the summary an earlier run wrote, if any."""
    from runs import events as ev
    from runs.index.projector import Projector
    from runs.jobfolder import read_object
    from runs.models import JobState

    ran = (job_dir / "evaluation.json").is_file()
    summary = read_object(job_dir / "summary.json") if ran else None
    Projector().apply(
        ev.JobClosed(job_dir.name, str(job_dir), JobState.INTERRUPTED, "cancelled", summary)
    )
