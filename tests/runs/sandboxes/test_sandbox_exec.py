"""An exec the container runtime could not start (runc's "unable to start container process", exit
126: nothing of the command ran) is tried again; a command's own exit 126 is not."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from runs.sandboxes import docker as sandboxes
from runs.sandboxes.docker import Sandbox

RUNC = (
    b"OCI runtime exec failed: exec failed: unable to start container process: waiting for init "
    b"preliminary setup: read init-p: connection reset by peer: unknown\r\n"
)


class Engine:
    """The docker API's exec calls, scripted: each exec prints its output and exits its code."""

    def __init__(self, runs: list[tuple[bytes, int]]) -> None:
        self.runs, self.execs = runs, 0

    def exec_create(self, container_id, cmd, user, workdir, environment):
        self.execs += 1
        return {"Id": str(self.execs)}

    def exec_start(self, exec_id, stream, demux):
        yield (self.runs[int(exec_id) - 1][0], None)

    def exec_inspect(self, exec_id):
        return {"ExitCode": self.runs[int(exec_id) - 1][1]}


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(sandboxes.time, "sleep", lambda _s: None)


def run(engine: Engine, tmp_path):
    box = Sandbox(SimpleNamespace(api=engine), "c0ffee", None)  # type: ignore[arg-type]
    return box.exec(["claude", "-p", "hi"], stdout_path=tmp_path / "out.txt")


def test_an_exec_the_runtime_could_not_start_is_tried_again(tmp_path):
    engine = Engine([(RUNC, 126), (b"done\n", 0)])

    result = run(engine, tmp_path)

    assert (engine.execs, result.exit_code) == (2, 0)
    assert (tmp_path / "out.txt").read_bytes() == RUNC + b"done\n"  # the log keeps what happened


def test_an_exec_the_runtime_never_starts_fails_after_its_tries(tmp_path):
    engine = Engine([(RUNC, 126)] * sandboxes.EXEC_TRIES)

    result = run(engine, tmp_path)

    assert (engine.execs, result.exit_code) == (sandboxes.EXEC_TRIES, 126)


def test_a_commands_own_exit_126_is_not_tried_again(tmp_path):
    engine = Engine([(b"sh: /app/run.sh: Permission denied\n", 126), (b"", 0)])

    result = run(engine, tmp_path)

    assert (engine.execs, result.exit_code) == (1, 126)
