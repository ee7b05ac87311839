"""Which process runs a job, and stopping it as SIGTERM does (running trials stopped, sandboxes
removed, a partial summary written): the same clean stop as Ctrl-C or kill on `bench run`."""

from __future__ import annotations

import fcntl
import os
import signal
from pathlib import Path

from runs.jobfolder import LOCK_FILE
from runs.problems import UserError

# The process an operation started for a job, written before it takes the job's lock (a job
# launched from the browser installs its agent first): cancel finds it there until then.
OPERATION_PID = ".operation.pid"
OPERATION_MARK = "_operate"  # in the command line of every process an operation starts


def lock_holder(job_dir: Path) -> int | None:
    """The pid of the live run holding the job's lock, None when no process holds it."""
    path = job_dir / LOCK_FILE
    try:
        fh = open(path)
    except OSError:
        return None
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = fh.read().strip()
            return int(text.split()[-1]) if text.startswith("pid ") else None
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


def running_pid(job_dir: Path) -> int | None:
    """The process running (or about to run) the job: its lock's holder, else the operation's."""
    return lock_holder(job_dir) or _operation_pid(job_dir)


def is_running(job_dir: Path) -> bool:
    return running_pid(job_dir) is not None


def cancel(job_dir: Path) -> int:
    """Send SIGTERM to the process running the job; returns its pid. It stops its running trials,
    removes their sandboxes and writes a partial summary, as for Ctrl-C or kill."""
    pid = running_pid(job_dir)
    if pid is None:
        raise UserError(f"{job_dir.name} is not running; nothing to cancel")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        raise UserError(f"{job_dir.name} has just ended; nothing to cancel") from None
    except PermissionError:
        raise UserError(
            f"{job_dir.name} is run by pid {pid}, which this server's user may not signal; "
            "stop it where it runs (Ctrl-C, or kill)"
        ) from None
    return pid
