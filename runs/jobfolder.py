"""The job folder, BenchFlow's on-disk record: atomic writes, names, the job lock."""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import secrets
import socket
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

JOB_NAME_FORMAT = "%Y-%m-%d__%H-%M-%S"
LOCK_FILE = ".evaluation.lock"
# Written by a cancel from a machine other than the run's (a shared jobs folder): the run stops as
# for SIGTERM when it sees it.
CANCEL_REQUEST = ".cancel-request"
# In an attempt folder whose sandbox was prepared ahead (warm pool) and that has not started yet:
# no attempt, no rollout (removed when it starts; the folder is removed if it never does).
NOT_STARTED_MARK = ".not-started"


try:
    from orjson import loads as _loads  # a C parser: readers go through thousands of these
except ImportError:  # pragma: no cover
    _loads = json.loads  # type: ignore[assignment]


def finite(value: Any) -> float | None:
    """A document's number as a float when it is one and finite, else None (bools, NaN and
    infinities from an older writer, strings are no number)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _strict(obj: Any) -> Any:
    """NaN and infinities become null: the files are strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    return obj


# errors of the machine rather than of a task: the job stops cleanly and a resume finishes it
MACHINE_ERRNOS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EMFILE: "this process has too many open files",
    errno.ENFILE: "this machine has too many open files",
}


def machine_error(exc: BaseException | None) -> OSError | None:
    """The OSError of the machine (a full disk, a read-only file system, too many open files) in
    `exc` or what caused it; None when it is something else."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in MACHINE_ERRNOS:
            return exc
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                if (found := machine_error(inner)) is not None:
                    return found
        exc = exc.__cause__ or exc.__context__
    return None


def out_of_files() -> OSError | None:
    """The process's or the machine's open files used up now (EMFILE, ENFILE), else None: an
    error that names no errno (SQLite's "unable to open database file") may come of it."""
    try:
        os.close(os.open(os.devnull, os.O_RDONLY))
    except OSError as exc:
        return exc if exc.errno in (errno.EMFILE, errno.ENFILE) else None
    return None


WELL_FREE_BYTES = 64 << 20  # a full disk counts as well again with this much free
WELL_FREE_FILES = 16  # too many open files: well again when this many more open


def machine_well(folder: Path | None, code: int) -> bool:
    """Whether what failed a machine (`code`, an errno of MACHINE_ERRNOS) is gone: room on the
    disk again, the file system writable, files to open."""
    # the folder that failed may be gone since (a lost attempt's, moved away): its nearest parent
    # is on the same disk
    while folder is not None and not folder.exists() and folder.parent != folder:
        folder = folder.parent
    if code in (errno.ENOSPC, errno.EDQUOT):
        free = free_bytes(folder) if folder is not None else None
        return free is None or free >= WELL_FREE_BYTES
    if code == errno.EROFS:
        return folder is None or os.access(folder, os.W_OK)
    opened: list[int] = []
    try:  # room for an attempt's files, not one alone (a database connection takes three)
        for _ in range(WELL_FREE_FILES):
            opened.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        return False
    finally:
        for fd in opened:
            os.close(fd)
    return True


def free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write to a temp file beside `path`, fsync, rename: a reader sees the old file or the new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json(path: Path, obj: Any) -> None:
    write_bytes_atomic(path, (json.dumps(_strict(obj), indent=2, default=str) + "\n").encode())


def read_json(path: str | os.PathLike[str]) -> Any:
    """A job folder's JSON file, or None when it is missing, unreadable or not JSON (half-written,
    edited): the callers say what that means for their file."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    try:
        return _loads(raw)
    except ValueError:
        try:  # NaN or Infinity from an older writer: the standard library reads them
            return json.loads(raw)
        except ValueError:
            return None


def read_object(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """read_json when the file holds a JSON object, else None."""
    data = read_json(path)
    return data if isinstance(data, dict) else None


def new_job_name(now: datetime | None = None) -> str:
    return (now or datetime.now()).strftime(JOB_NAME_FORMAT)


def is_auto_job_name(name: str) -> bool:
    try:
        datetime.strptime(name, JOB_NAME_FORMAT)
    except ValueError:
        return False
    return True


def unique_job_dir(jobs_dir: Path) -> Path:
    """A new timestamped job folder name that does not exist yet (a second later if taken)."""
    now = datetime.now()
    name = new_job_name(now)
    candidate = jobs_dir / name
    step = 1
    while candidate.exists():
        candidate = jobs_dir / new_job_name(datetime.fromtimestamp(now.timestamp() + step))
        step += 1
    return candidate


def new_attempt_dir(job_dir: Path, task_name: str) -> Path:
    """`<task>__<8 hex>`: one folder per attempt (rollout)."""
    while True:
        path = job_dir / f"{task_name}__{secrets.token_hex(4)}"
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            continue
        return path


def latest_auto_job(jobs_dir: Path) -> Path | None:
    """The newest job folder with a timestamp name and an evaluation.json."""
    if not jobs_dir.is_dir():
        return None
    names = sorted(
        e.name
        for e in os.scandir(jobs_dir)
        if e.is_dir(follow_symlinks=False)  # a link would put the job's writes outside jobs_dir
        and is_auto_job_name(e.name)
        and os.path.exists(os.path.join(e.path, "evaluation.json"))
    )
    return jobs_dir / names[-1] if names else None


class JobLocked(Exception):
    """Another live run holds this job."""


class JobLock:
    """An flock on `<job>/.evaluation.lock`: the kernel drops it when the holder dies, even by kill -9."""

    def __init__(self, job_dir: Path):
        self.path = job_dir / LOCK_FILE
        self._fh: Any = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise JobLocked(f"{self.path.parent} is being run by {holder}") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {socket.gethostname()}")
        fh.flush()
        self._fh = fh

    @staticmethod
    def replace(job_dir: Path) -> None:
        """A new, free lock file in place of one whose holder lost the job but lives on (a
        coordinator on a frozen machine, fenced: it writes nothing more when it wakes). The
        holder keeps its flock on the old file, which no one looks at again."""
        path = job_dir / LOCK_FILE
        fresh = path.with_name(f"{LOCK_FILE}.{os.getpid()}")
        fresh.write_text("")
        os.replace(fresh, path)

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
