"""Real scale-out for tests: `bench worker` processes on a real Redis, sharing the test's database
(SQLite in its folder, or its own PostgreSQL database) and folders with the `bench run` it starts.

Each test gets its own Celery queue, so workers of other tests (or of other people's runs on the
same Redis) never take its attempts.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.databases import query

SHARED_REDIS = "redis://127.0.0.1:6379/12"  # a db number of its own on the machine's Redis


def redis_up(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except (redis.RedisError, OSError):
        return False


def shared_redis() -> str:
    """The machine's Redis (`.ci/run` starts one when none answers); a test fails without it in CI."""
    if not redis_up(SHARED_REDIS):
        if os.environ.get("CI"):
            pytest.fail(f"Redis does not answer at {SHARED_REDIS} (.ci/run starts it)")
        pytest.skip(f"Redis does not answer at {SHARED_REDIS}")
    return SHARED_REDIS


class PrivateRedis:
    """A redis-server of the test's own on a free port, which the test may stop and start again
    (the machine's shared one is never restarted)."""

    def __init__(self, folder: Path) -> None:
        if shutil.which("redis-server") is None:
            pytest.fail("redis-server is not installed (.ci/run installs it)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.folder = folder
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(lambda: redis_up(self.url), 10, "the private Redis to answer")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # as a crash would: nothing saved (it saves nothing anyway)
            self.proc.wait(10)


_folder: list[Path] = []  # the current cluster's folder: its logs say why a wait timed out


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{log_tails()}")


def log_tails(lines: int = 40) -> str:
    """The last lines of the current cluster's machines', workers' and jobs' logs (a wait that
    timed out in CI says why with them: the folder is gone by the time anyone looks)."""
    if not _folder:
        return ""
    folder = _folder[-1]
    logs = sorted(folder.glob("*.log")) + sorted(folder.glob("jobs/*/console.log"))
    return "\n".join(
        f"--- {log.relative_to(folder)}\n"
        + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        for log in logs
    )


class Cluster:
    """Workers and runs of one test: same env (Redis, queue, database, short leases), same cwd."""

    def __init__(
        self, env: dict[str, str], cwd: Path, redis_url: str, database: str | None
    ) -> None:
        self.cwd = cwd
        _folder[:] = [cwd]
        self.database = database
        self.env = {
            **env,
            "BENCHFLOW_REDIS_URL": redis_url,
            "BENCHFLOW_QUEUE": f"test-{uuid.uuid4().hex[:10]}",
            "BENCHFLOW_LEASE_S": "4",  # a killed worker's attempt runs again after about 4 s
            "BENCHFLOW_REAP_EVERY_S": "2",
            "PYTHONUNBUFFERED": "1",
        }
        self.workers: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}
        # migrated once, before several processes open the database at the same time
        subprocess.run(
            [
                sys.executable,
                "-c",
                "from benchflow_site.django_setup import setup_django; setup_django()",
            ],
            env=self.env,
            check=True,
            timeout=300,
        )

    def start_worker(self, slots: int = 2, ahead: int | None = None) -> subprocess.Popen[bytes]:
        log = self.cwd / f"worker-{len(self.workers) + 1}.log"
        args = ["worker", "--concurrency", str(slots)]
        if ahead is not None:
            args += ["--prepare-ahead", str(ahead)]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "benchflow_site.cli", *args],
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.workers.append(proc)
        self.logs[proc.pid] = log
        wait_for(lambda: " up: " in self.log(proc), 60, f"worker {proc.pid} to start")
        return proc

    def log(self, worker: subprocess.Popen[bytes]) -> str:
        return self.logs[worker.pid].read_text(errors="replace")

    def started(self, worker: subprocess.Popen[bytes]) -> list[str]:
        """Trials the worker's log says it started."""
        return [
            line.split("] started ", 1)[1].split(" (", 1)[0]
            for line in self.log(worker).splitlines()
            if "] started " in line
        ]

    def bench(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "benchflow_site.cli", *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def bench_in_background(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "benchflow_site.cli", *args],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def query(self, sql: str, *args: object) -> list[tuple]:
        """Rows of the index (the dashboard's tables)."""
        sqlite = str(Path(self.env["BENCHFLOW_HOME"]) / "benchflow.sqlite3")
        return query(self.database, sqlite, sql, *args)

    def lease_query(self, sql: str, *args: object) -> list[tuple]:
        """Rows of the workers, dispatchers and leases (on SQLite, a file of their own)."""
        sqlite = str(Path(self.env["BENCHFLOW_HOME"]) / "benchflow.leases.sqlite3")
        return query(self.database, sqlite, sql, *args)

    def leases(self, job: Path) -> list[tuple[str, str, str, str]]:
        """(trial, state, worker name, lost runs as JSON text) of the job's leases."""
        rows = self.lease_query(
            "SELECT l.trial_name, l.state, COALESCE(w.name, ''), l.lost FROM runs_lease l "
            "LEFT JOIN runs_worker w ON w.id = l.worker_id WHERE l.job_path = %s ORDER BY l.id",
            str(job.resolve()),
        )
        return [(t, s, w, str(lost)) for t, s, w, lost in rows]

    def stop(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def worker_name(cluster: Cluster, worker: subprocess.Popen[bytes]) -> str:
    line = next(x for x in cluster.log(worker).splitlines() if " up: " in x)
    return line.split("worker ", 1)[1].split(" up:", 1)[0]


class Machine:
    """A machine of the test's deployment: a PID, UTS and mount namespace (`unshare -fpu
    --mount-proc --kill-child`) with a host name of its own, running a `bench worker`. Killing it
    takes everything on it at once (its worker, the coordinators that worker started); the
    Docker engine is shared, as a machine's containers outlive it on a real engine until its
    worker comes back and sweeps them."""

    def __init__(self, cluster: Cluster, name: str, slots: int = 2, setup: str = "") -> None:
        if shutil.which("unshare") is None:
            pytest.fail("unshare (util-linux) is not installed")
        self.cluster, self.name, self.slots = cluster, name, slots
        # shell commands run on the machine before its worker starts (its own mounts, say)
        self.setup = setup
        self.proc: subprocess.Popen[bytes] | None = None
        self.boots = 0
        self.log_path = cluster.cwd / f"machine-{name}.log"

    def start(self) -> Machine:
        self.boot()
        boot = self.boots
        wait_for(lambda: self.booted(boot), 60, f"machine {self.name}'s worker to start")
        return self

    def boot(self) -> None:
        """Start the machine, not waiting for its worker to be up (`booted`)."""
        self.boots += 1
        with open(self.log_path, "ab") as out:
            out.write(f"--- boot {self.boots}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [
                    "unshare",
                    "-fpu",
                    "--mount-proc",
                    "--kill-child",
                    "--",
                    "sh",
                    "-c",
                    f'hostname "$0" && {self.setup or "true"} && exec "$@"',
                    self.name,
                    sys.executable,
                    "-m",
                    "benchflow_site.cli",
                    "worker",
                    "--concurrency",
                    str(self.slots),
                    "--name",
                    f"{self.name}-worker",
                ],
                cwd=self.cluster.cwd,
                env=self.cluster.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def booted(self, boot: int) -> bool:
        text = self.log()
        return " up: " in text.split(f"--- boot {boot}\n", 1)[-1]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """The machine dies: every process on it at once (its namespace's init is killed)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def processes(self) -> dict[int, str]:
        """Every process on the machine (in its PID namespace): host pid -> its command line."""
        if self.proc is None or self.proc.poll() is not None:
            return {}
        init = next(
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and _parent(p) == self.proc.pid
        )
        namespace = os.readlink(f"/proc/{init}/ns/pid")
        found = {}
        for p in Path("/proc").iterdir():
            try:
                if p.name.isdigit() and os.readlink(p / "ns" / "pid") == namespace:
                    found[int(p.name)] = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue  # it ended meanwhile
        return found

    def freeze(self) -> None:
        """The machine freezes (a paused VM): every process on it stopped, none ended; asked
        twice, for a process started while the first went round."""
        for _ in range(2):
            for pid in self.processes():
                os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        for pid in self.processes():
            os.kill(pid, signal.SIGCONT)

    def started(self) -> list[str]:
        """Trials its worker's log says it started (every boot)."""
        return [
            line.split("] started ", 1)[1].split(" (", 1)[0]
            for line in self.log().splitlines()
            if "] started " in line
        ]


def _parent(proc: Path) -> int:
    """A process's parent pid (0 when it ended)."""
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


class PrivatePostgres:
    """A PostgreSQL server of the test's own (initdb in a folder of its own, a free loopback
    port), which the test may restart: the machine's shared one is never touched."""

    def __init__(self, folder: Path) -> None:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        if not found:
            pytest.fail("PostgreSQL's server programs are not installed (postgresql package)")
        self.bin = found[-1].parent
        # a folder the postgres user can reach (a test's tmp_path is its owner's alone)
        self.folder = Path(tempfile.mkdtemp(prefix="bench-pg-"))
        os.chmod(self.folder, 0o755)
        self.data = self.folder / "pgdata"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        if not self.data.exists():
            self.data.mkdir()
            if os.geteuid() == 0:
                shutil.chown(self.data, "postgres", "postgres")
            self._as_postgres(
                str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"
            )
        self._as_postgres(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-w",
            "-l",
            str(self.data / "server.log"),
            "-o",
            f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        )

    def restart(self) -> None:
        """Stopped at once (every connection cut, as a crash), then started again."""
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        self.start()

    def stop(self) -> None:
        if self.data.exists():
            try:
                self._as_postgres(
                    str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"
                )
            except subprocess.CalledProcessError:
                pass
        shutil.rmtree(self.folder, ignore_errors=True)
