"""How a long operation leaves the request: a Request handed to a Launcher, which starts it
elsewhere and returns at once. The one Launcher is ProcessLauncher (a process of its own, its
output in the job folder's console.log), whose `bench _operate` calls
`runs.operations.execute.execute(request)`."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from runs.jobfolder import write_bytes_atomic
from runs.operations.control import OPERATION_MARK, OPERATION_PID
from runs.requests import Request

CONSOLE_LOG = "console.log"  # what the job's run printed, as `bench run` prints it on a console


class Launcher(Protocol):
    def start(self, request: Request) -> str:
        """Start the request's work elsewhere and return at once: what runs it (`pid N`, a task id)."""
        ...


class ProcessLauncher:
    """Each operation in a process of its own (`argv` + [kind], the Request on its stdin), in a
    session of its own so the server's Ctrl-C does not stop it; its output appended to the job
    folder's console.log."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None):
        if OPERATION_MARK not in argv:
            raise ValueError(f"the operation's command line must hold {OPERATION_MARK!r}")
        self.argv = list(argv)
        self.env = dict(env) if env is not None else None

    def start(self, request: Request) -> str:
        job_dir = Path(request.job_dir)
        with open(job_dir / CONSOLE_LOG, "ab") as console:
            proc = subprocess.Popen(
                [*self.argv, request.kind],
                stdin=subprocess.PIPE,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.env,
            )
        write_bytes_atomic(job_dir / OPERATION_PID, f"{proc.pid}\n".encode())
        assert proc.stdin is not None
        try:
            proc.stdin.write(request.to_json().encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it died at once; its console.log says why
        # reaped when it ends, so a long-lived server gathers no zombies
        threading.Thread(target=proc.wait, daemon=True, name=f"operation-{proc.pid}").start()
        return f"pid {proc.pid}"
