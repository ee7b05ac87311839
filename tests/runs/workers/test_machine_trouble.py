"""Errors of the machine rather than of a task: found in an exception or what caused it, and the
machine counted well again once they are gone."""

from __future__ import annotations

import errno
from pathlib import Path

from runs.jobfolder import machine_error, machine_well


def test_a_full_disk_is_found_in_what_caused_an_error():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/jobs/x/result.json")
        except OSError as inner:
            raise RuntimeError("the attempt's result could not be written") from inner
    except RuntimeError as outer:
        found = machine_error(outer)
    assert found is not None and found.errno == errno.ENOSPC
    assert machine_error(ExceptionGroup("two", [ValueError(), OSError(errno.EROFS, "ro")]))
    assert machine_error(OSError(errno.ENOENT, "missing")) is None
    assert machine_error(ValueError("no")) is None


def test_a_machine_is_well_again_when_its_trouble_is_gone(tmp_path: Path):
    assert machine_well(tmp_path, errno.EROFS)  # writable
    assert machine_well(tmp_path, errno.EMFILE)  # a file opens
    assert machine_well(tmp_path, errno.ENOSPC) is not None


def test_a_full_disk_whose_failed_folder_was_moved_away_is_still_full(tmp_path: Path):
    import os
    import subprocess

    import pytest

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        # the lost attempt's folder that failed is gone: its nearest parent is on the same disk
        assert not machine_well(small / "alpha__x" / "agent", errno.ENOSPC)
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_a_process_out_of_files_is_found_though_the_error_named_no_errno():
    import subprocess
    import sys

    from runs.jobfolder import out_of_files

    assert out_of_files() is None
    # a process whose open-file limit is what it has open (a worker's, lowered)
    script = (
        "import os, resource\n"
        "n = len(os.listdir('/proc/self/fd')) - 1  # the listing's own is closed again\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))\n"
        "from runs.jobfolder import out_of_files\n"
        "print(out_of_files().errno)\n"
    )
    # the module imported first: importing opens files too
    shown = subprocess.run(
        [sys.executable, "-c", "import runs.jobfolder\n" + script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.stdout.strip() == str(errno.EMFILE), shown.stderr


class _Rounds:
    """A stop event that lets the loop go round `n` times."""

    def __init__(self, n: int) -> None:
        self.left = n

    def wait(self, timeout: float) -> bool:
        self.left -= 1
        return self.left < 0


def test_a_failing_duty_keeps_the_others_and_the_database_connection(monkeypatch):
    # given a worker whose engine calls and job taking fail as a machine out of open files does
    import types

    from django.db import OperationalError

    from runs.workers import runtime

    said: list[str] = []
    closed: list[int] = []

    def out_of_files() -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    worker = runtime.WorkerRuntime.__new__(runtime.WorkerRuntime)
    worker._stopping = _Rounds(2)  # type: ignore[assignment]
    worker.worker_id = 7
    worker.machine = types.SimpleNamespace(look=lambda: said.append("trouble said"))  # type: ignore[assignment]
    worker.jobs = types.SimpleNamespace(take=out_of_files)  # type: ignore[assignment]
    worker._reap = out_of_files  # type: ignore[method-assign]
    monkeypatch.setattr(runtime.leases, "worker_seen", lambda worker_id: said.append("seen"))
    broken = types.SimpleNamespace(
        errors_occurred=True, is_usable=lambda: False, close=lambda: closed.append(1)
    )
    working = types.SimpleNamespace(
        errors_occurred=True, is_usable=lambda: True, close=lambda: closed.append(2)
    )
    monkeypatch.setattr(
        "django.db.connections.all", lambda initialized_only=False: [broken, working]
    )
    # when its status thread goes round twice
    worker._seen()
    # then it said it was alive and why it takes nothing each time, and kept its connection
    assert said == ["seen", "trouble said", "seen", "trouble said"]
    assert closed == []

    # and when the database itself fails a trip, the broken connection is closed (reopened next
    # time), not the one that works
    def database_gone(worker_id: int) -> None:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(runtime.leases, "worker_seen", database_gone)
    worker._stopping = _Rounds(1)  # type: ignore[assignment]
    worker._seen()
    assert closed == [1] and said[-1] == "trouble said"


def test_a_process_out_of_open_files_is_found_by_looking_not_only_by_an_attempt(monkeypatch):
    # given a worker process that can open no file (Celery fails before any attempt sees it)
    import builtins
    import types

    from runs.workers.duties import MachineTrouble

    noted: list[object] = []
    consuming: list[bool] = []
    worker = types.SimpleNamespace(
        emit=noted.append, name="w", worker_id=1, queues=["q"], held={}, pending=0, client=None
    )
    machine = MachineTrouble(worker)
    monkeypatch.setattr(machine, "consume", consuming.append)
    swept: list[object] = []
    monkeypatch.setattr("runs.workers.duties.remove_own", swept.append)
    monkeypatch.setattr(MachineTrouble, "_say_trouble", lambda self: None)
    said: list[tuple[int, str]] = []
    monkeypatch.setattr(
        "runs.workers.duties.leases.worker_trouble", lambda worker, why: said.append((worker, why))
    )
    real_open = builtins.open

    def no_files(*args, **kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    # when it looks, with files to open, and then without
    machine.look()
    assert machine.problem == ""
    monkeypatch.setattr(builtins, "open", no_files)
    machine.look()
    monkeypatch.setattr(builtins, "open", real_open)
    # then it is in trouble and says why
    assert machine.problem == "takes no attempt: this process has too many open files"
    assert len(noted) == 1
    # on the looking thread's own connection (a new one cannot be opened)
    assert said == [(1, machine.problem)]
    # and Celery's consumer stops taking the queue's messages, once however often it fails
    machine.trouble(OSError(errno.EMFILE, "Too many open files"))
    assert consuming == [False]
    # when a file opens again: it is well, and takes the queue's messages again
    well: list[object] = []
    monkeypatch.setattr(
        "runs.workers.duties.leases.worker_well", lambda worker, queues: well.append(queues)
    )
    worker.serves = True
    machine.look()
    assert machine.problem == "" and consuming == [False, True] and well == [["q"]]
    # having first removed what it could not remove when it gave its attempts up
    assert swept == [None]


def test_a_worker_stops_and_starts_its_consumer_in_the_consumers_own_loop():
    # given a worker of two queues whose Celery consumer is up
    from runs.workers import runtime
    from runs.workers.duties import MachineTrouble

    done: list[tuple[str, str]] = []

    class Consumer:
        def cancel_task_queue(self, queue: str) -> None:
            done.append(("cancel", queue))

        def add_task_queue(self, queue: str) -> None:
            done.append(("add", queue))

        def call_soon(self, fn, *args) -> None:  # the consumer's loop runs it later
            later.append((fn, args))

    later: list[tuple] = []
    worker = runtime.WorkerRuntime.__new__(runtime.WorkerRuntime)
    worker.queues = ["a", "b"]
    worker.consumer = None
    machine = MachineTrouble(worker)
    machine.consume(False)  # Celery not up yet: nothing to stop
    worker.consumer = Consumer()
    # when it stops and starts consuming
    machine.consume(False)
    machine.consume(True)
    assert done == []  # not in the caller's thread
    for fn, args in later:
        fn(*args)
    # then each queue was cancelled and added back, in the consumer's loop
    assert done == [("cancel", "a"), ("cancel", "b"), ("add", "a"), ("add", "b")]


async def test_an_attempt_set_up_for_want_of_open_files_is_the_machines_error_not_the_tasks(
    monkeypatch,
):
    # given a worker whose process can open no file: its task does not load (a setup error)
    import types

    import pytest

    from runs.workers import execute
    from runs.workers.context import WorkerSetupError
    from runs.workers.execute import Held, LeaseRun

    trips: list[object] = []

    async def context(info):
        raise WorkerSetupError("the task /tasks/t6 does not load on this worker: ")

    async def db(fn, *args, **kwargs):
        trips.append(fn)

    worker = types.SimpleNamespace(context=context, db=db)
    held = Held(1, 1, types.SimpleNamespace(task_path="/tasks/t6"))
    monkeypatch.setattr(execute, "out_of_files", lambda: OSError(errno.EMFILE, "Too many"))
    # when it sets the attempt up, then it is the machine's error (the lease is given up, the
    # worker takes nothing more), and the lease is not failed as the task's
    with pytest.raises(OSError) as raised:
        await LeaseRun(worker, 1)._run(held, 0.0)
    assert raised.value.errno == errno.EMFILE and trips == []
    # and with files to open, it is the task's: failed
    monkeypatch.setattr(execute, "out_of_files", lambda: None)
    monkeypatch.setattr(LeaseRun, "_hint", lambda self, *a, **k: None)
    monkeypatch.setattr(LeaseRun, "_ended", lambda self, *a, **k: None)
    await LeaseRun(worker, 1)._run(held, 0.0)
    assert trips == [execute.leases.failed]
