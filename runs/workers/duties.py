"""What a `bench worker` does beside running attempts: it takes the jobs handed to the worker fleet
(their coordinators are processes of its own, `bench _coordinate`), and it stops taking work when
its machine fails it (a full disk, a read-only file system, too many open files), saying why on
the workers page, until the machine is well again."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

from runs import events as ev
from runs.jobfolder import MACHINE_ERRNOS, machine_well
from runs.sandboxes.owners import remove_own
from runs.workers import coordination, leases
from runs.workers.config import coordination_lease_s


class MachineTrouble:
    """Why this machine takes no attempt now, and when it is well again."""

    def __init__(self, worker: Any) -> None:
        self.w = worker  # runs.workers.runtime.WorkerRuntime
        self.problem = ""
        self._problem_at: Path | None = None
        self._problem_errno = 0

    def trouble(self, err: OSError, at: Path | None = None) -> None:
        """An attempt here failed by the machine's fault (a full disk, a read-only file system,
        too many open files): take nothing more, and say why on the workers page, until it is
        well again (looked at every 2 s). `at`: the folder the attempt wrote to, for an error
        that names no file (a write to a file already open)."""
        where = Path(err.filename) if err.filename else at
        folder = where if where is None or where.is_dir() else where.parent
        if err.errno in (errno.EMFILE, errno.ENFILE):
            folder = None  # the process's (or the machine's) files, not a folder's
        what = MACHINE_ERRNOS.get(err.errno or 0, str(err))
        if not self.problem:
            self.consume(False)
        self.problem = f"takes no attempt: {what}" + (f" ({folder})" if folder else "")
        self._problem_at, self._problem_errno = folder, err.errno or 0
        self.w.emit(ev.WorkerNote(self.w.name, self.problem))
        threading.Thread(target=self._say_trouble, name="bench-worker-trouble", daemon=True).start()

    def _say_trouble(self) -> None:
        from django.db import connections

        try:
            leases.worker_trouble(self.w.worker_id, self.problem)
        except Exception:  # noqa: BLE001 - said again when the database answers
            pass
        finally:
            connections.close_all()

    def look(self) -> None:
        """Every 2 s: a process out of open files fails wherever it next opens one, often in code
        not ours (Celery loading what a task needs) where no attempt ever sees it: one open file
        tried here finds it. In trouble: whether it is gone."""
        if self.problem:
            self.well_again()
            return
        try:
            with open(os.devnull, "rb"):
                pass
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                self.trouble(exc)
                # said at once on this thread's own connection, open already (the trouble's
                # thread of its own needs a new one, which this process cannot open)
                leases.worker_trouble(self.w.worker_id, self.problem)

    def consume(self, on: bool) -> None:
        """Celery's consumer stops taking the queues' messages while this machine is in trouble,
        and takes them again when it is well: a process out of open files fails a message in
        Celery before our task sees it (acked, lost to the queue), and each message a worker in
        trouble passes on comes back to it as often as to a worker that is well. Done in the
        consumer's own loop, on the connection it has (no new file)."""
        consumer = self.w.consumer
        if consumer is None:
            return
        for queue in self.w.queues:
            change = consumer.add_task_queue if on else consumer.cancel_task_queue
            consumer.call_soon(change, queue)

    def well_again(self) -> None:
        if not self.problem:
            return
        if not machine_well(self._problem_at, self._problem_errno):
            leases.worker_trouble(self.w.worker_id, self.problem)
            return
        if not self.w.held and not self.w.pending:
            # the sandboxes of the attempts it gave up that it could not remove then (a process
            # out of open files cannot reach the engine): it holds none now, and takes none
            # until its consumer is back
            remove_own(self.w.client)
        self.problem = ""
        self.consume(True)
        leases.worker_well(self.w.worker_id, self.w.queues if self.w.serves else [])
        self.w.emit(ev.WorkerNote(self.w.name, "well again: takes attempts"))


class JobTaker:
    """The jobs on the worker fleet this worker takes, and their coordinators' processes."""

    def __init__(self, worker: Any, argv: list[str] | None) -> None:
        self.w = worker  # runs.workers.runtime.WorkerRuntime
        # `bench _coordinate`: the command that coordinates a job taken here (None: takes none)
        self.argv = argv
        self._lock = threading.Lock()
        self.coordinating: dict[int, subprocess.Popen[bytes]] = {}

    def take(self, only: int | None = None) -> None:
        """Take the jobs no live coordinator holds (or `only` that one: the Celery task's) and
        start each one's coordinator here, as a process of its own whose output goes to the job's
        console.log."""
        if self.argv is None or not self.w.serves or self.w.machine.problem:
            return
        host = socket.gethostname()
        with self._lock:
            for pk in [only] if only is not None else coordination.takeable(self.w.queues, host):
                if coordination.avoided_here(pk, host, self.w.queues):
                    continue  # drained off this machine: a worker elsewhere takes it
                taken = coordination.take(pk, self.w.name, coordination_lease_s())
                if taken is not None:
                    self._start_coordinator(taken)

    def _start_coordinator(self, taken: coordination.Taken) -> None:
        assert self.argv is not None
        job_dir = Path(taken.job_path)
        argv = [*self.argv, str(taken.id), str(taken.fence)]
        if taken.adopted:
            argv.append("--adopted")
        try:
            with open(job_dir / "console.log", "ab") as console:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=console,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=os.environ.copy(),
                )
        except OSError as exc:  # the job folder unreachable here: another worker may take it
            coordination.release(taken.id, taken.fence)
            self.w.emit(ev.WorkerNote(self.w.name, f"could not coordinate {job_dir.name}: {exc}"))
            return
        self.coordinating[taken.id] = proc
        self.w.emit(
            ev.WorkerNote(
                self.w.name,
                f"{'adopted' if taken.adopted else 'coordinates'} {job_dir.name} "
                f"(pid {proc.pid}, fence {taken.fence})",
            )
        )
        threading.Thread(
            target=self._coordinator_ended,
            args=(taken, proc),
            daemon=True,
            name=f"coordinator-{proc.pid}",
        ).start()

    def _coordinator_ended(self, taken: coordination.Taken, proc: subprocess.Popen[bytes]) -> None:
        """A coordinator that ended without ending its row (it crashed on a live machine, not
        with it) ends it here: only a lost machine's job is adopted, not one that fails on
        every worker again and again."""
        code = proc.wait()
        self.coordinating.pop(taken.id, None)
        if code == coordination.FENCED_EXIT:
            return
        from django.db import connections

        try:
            if coordination.end(taken.id, taken.fence, f"exit {code}"):
                self.w.emit(
                    ev.WorkerNote(
                        self.w.name,
                        f"the coordinator of {Path(taken.job_path).name} ended (exit {code}); "
                        "its console.log says why",
                    )
                )
        except Exception:  # noqa: BLE001 - the database away: the lease lapses, another adopts
            pass
        finally:
            connections.close_all()
