"""Chaos: a job on the worker fleet while machines die and Redis and PostgreSQL fail under it.

A 40-trial job (`bench run --detach`, -j 6) on a PostgreSQL and a Redis of the benchmark's own
(loopback ports), three worker machines and a web machine, each a PID/UTS/mount namespace
(`unshare -fpu --mount-proc --kill-child`), so a kill takes everything on it. For `--chaos-s`
seconds (180), every 10-20 s one fault at random: a worker's machine killed, the coordinator's
machine killed, the web machine killed, Redis restarted, Redis paused (CLIENT PAUSE 30 s),
PostgreSQL restarted (each once per round of six, in a random order); a killed machine comes back
5 s later. Then it waits for the job to end
(bounded by `--max-s`), brings every machine back, and reports:

- trials counted once: each trial's results, the summary's totals and its rollout count;
- adoption: from a coordinator's machine killed to another worker holding the job (p50, p95);
- attempt-seconds wasted per machine lost: the time the attempts running on a killed machine had
  run (their work is lost; they run again elsewhere);
- containers of the job left at the end (0).

    sudo .venv/bin/python benchmarks/chaos_bench.py [--chaos-s 180] [--task-s 20] [--seed 1]

Needs root (namespaces; PostgreSQL's initdb runs as the postgres user), Docker, redis-server and
PostgreSQL's server programs. Writes benchmarks/results/chaos.json (or --out). Loopback only; it
stops everything it started, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TRIALS, J, SLOTS = 40, 6, 2
FAULTS = ("worker", "coordinator", "web", "redis restart", "redis pause", "postgres restart")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


class Redis:
    def __init__(self, folder: Path) -> None:
        self.port, self.folder = free_port(), folder
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            + ["--appendonly", "no", "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(lambda: self.cli("PING") == "PONG", 10, "Redis")

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            ["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True
        )
        return done.stdout.strip()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Postgres:
    def __init__(self, folder: Path) -> None:
        self.bin = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))[-1].parent
        self.data, self.port = folder / "pgdata", free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True)

    def start(self) -> None:
        if not self.data.exists():
            self.data.mkdir(parents=True)
            shutil.chown(self.data, "postgres", "postgres")
            self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust")
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-l",
            str(self.data / "server.log"), "-o",
            f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=300",
            "start",
        )  # fmt: skip

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        except subprocess.CalledProcessError:
            pass


class Machine:
    """A namespace with a host name of its own running `argv` (a worker, or the web's idle)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.name, self.argv, self.env, self.cwd = name, argv, env, cwd
        self.log = cwd / f"machine-{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.boots = 0

    def start(self, wait: bool = True) -> None:
        self.boots += 1
        with open(self.log, "ab") as out:
            out.write(f"--- boot {self.boots}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                ["unshare", "-fpu", "--mount-proc", "--kill-child", "--", "sh", "-c"]
                + ['hostname "$0" && exec "$@"', self.name, *self.argv],
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        if wait and "worker" in self.argv:
            boot = f"--- boot {self.boots}\n"
            wait_for(
                lambda: " up: " in self.log.read_text(errors="replace").split(boot)[-1],
                90,
                f"{self.name}'s worker",
            )

    @property
    def up(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.up:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(30)


def make_tasks(root: Path, n: int, task_s: float) -> None:
    for i in range(n):
        t = root / f"chaos-{i:02d}"
        for sub in ("environment", "tests", "solution"):
            (t / sub).mkdir(parents=True)
        (t / "task.toml").write_text('version = "1.0"\n[agent]\ntimeout_sec = 600\n')
        (t / "instruction.md").write_text("Wait, then write hello.\n")
        (t / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
        (t / "solution" / "solve.sh").write_text(f"#!/bin/bash\nsleep {task_s:g}\necho hello\n")
        (t / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")


def sql(url: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, connect_timeout=3) as conn:
        return list(conn.execute(query, args).fetchall())


def try_sql(url: str, query: str, *args: Any) -> list[tuple[Any, ...]] | None:
    try:
        return sql(url, query, *args)
    except Exception:  # noqa: BLE001 - PostgreSQL restarting: ask again
        return None


def coordination(url: str, job: str) -> tuple[str, str, int] | None:
    rows = try_sql(url, "SELECT state, host, fence FROM runs_coordination WHERE job_path = %s", job)
    return (rows[0][0], rows[0][1], rows[0][2]) if rows else None


def running_seconds(url: str, machine: str) -> float:
    """Seconds the attempts running on `machine`'s worker have run: lost with it."""
    rows = try_sql(
        url,
        "SELECT EXTRACT(EPOCH FROM (now() - l.started_at)) FROM runs_lease l JOIN runs_worker w "
        "ON w.id = l.worker_id WHERE w.name = %s AND l.state = 'running' "
        "AND l.started_at IS NOT NULL",
        f"{machine}-worker",
    )
    return float(sum(r[0] for r in rows or [])) if rows else 0.0


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chaos-s", type=float, default=180.0)
    ap.add_argument("--task-s", type=float, default=20.0)
    ap.add_argument("--trials", type=int, default=TRIALS)
    ap.add_argument("--max-s", type=float, default=1500.0, help="the whole run's bound")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "chaos.json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("chaos_bench needs root (namespaces, PostgreSQL's initdb)", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="bench-chaos-"))
    os.chmod(root, 0o755)
    redis, pg = Redis(root), Postgres(root / "pg")
    machines: dict[str, Machine] = {}
    events: list[dict[str, Any]] = []
    adoptions: list[float] = []
    wasted: list[float] = []
    import docker

    client = docker.from_env()
    job = ""
    ok = False
    try:
        redis.start()
        pg.start()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
            "PYTHONPATH": str(REPO),
            "BENCHFLOW_HOME": str(root / "state"),
            "DATABASE_URL": pg.url,
            "BENCHFLOW_REDIS_URL": redis.url,
            "BENCHFLOW_QUEUE": f"chaos-{uuid.uuid4().hex[:8]}",
            "BENCHFLOW_REAP_EVERY_S": "5",
            "PYTHONUNBUFFERED": "1",
        }
        bench = [sys.executable, "-m", "benchflow_site.cli"]
        subprocess.run(
            [sys.executable, "-c", "from benchflow_site.django_setup import setup_django; "
             "setup_django()"],
            env=env, check=True, cwd=root,
        )  # fmt: skip
        make_tasks(root / "tasks", args.trials, args.task_s)
        workers = [f"m{i}" for i in (1, 2, 3)]
        for name in workers:
            machines[name] = Machine(
                name, [*bench, "worker", "-c", str(SLOTS), "--name", f"{name}-worker"], env, root
            )
            machines[name].start()
        machines["web"] = Machine("web", ["sleep", "infinity"], env, root)
        machines["web"].start()
        detached = subprocess.run(
            ["unshare", "-fpu", "--mount-proc", "--kill-child", "--", "sh", "-c",
             'hostname web && exec "$@"', "web", *bench, "run", "tasks", "-a", "oracle",
             "-j", str(J), "--max-rollouts", "1000", "--jobs-dir", str(root / "jobs"),
             "--detach"],
            env=env, cwd=root, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if detached.returncode != 0:
            raise RuntimeError(detached.stdout + detached.stderr)
        [job_dir] = [p for p in (root / "jobs").iterdir() if p.is_dir()]
        job = str(job_dir.resolve())
        wait_for(lambda: (coordination(pg.url, job) or ("",))[0] == "running", 60, "a taker")
        comeback: list[tuple[float, Machine]] = []
        deck: list[str] = []
        chaos_end = time.monotonic() + args.chaos_s
        next_fault = time.monotonic() + rng.uniform(10, 20)
        while time.monotonic() < chaos_end:
            now = time.monotonic()
            for when, machine in list(comeback):
                if now >= when:
                    comeback.remove((when, machine))
                    machine.start(wait=False)
            if now >= next_fault:
                if not deck:  # each fault once per round, in a random order
                    deck = rng.sample(FAULTS, len(FAULTS))
                fault = deck.pop()
                at = time.monotonic() - started
                row = coordination(pg.url, job)
                if row is not None and row[0] == "ended":
                    break
                if fault in ("worker", "coordinator"):
                    if fault == "coordinator" and row is not None and row[1] in machines:
                        victim = machines[row[1]]
                    else:
                        victim = machines[rng.choice(workers)]
                    if victim.up:
                        lost_s = running_seconds(pg.url, victim.name)
                        fence = row[2] if row is not None else 0
                        held = row is not None and row[1] == victim.name and row[0] == "running"
                        victim.kill()
                        wasted.append(lost_s)
                        comeback.append((time.monotonic() + 5, victim))
                        if held:
                            threading.Thread(
                                target=_adoption,
                                args=(pg.url, job, fence, time.monotonic(), adoptions),
                                daemon=True,
                            ).start()
                        fault = f"{victim.name} killed" + (" (coordinator)" if held else "")
                elif fault == "web":
                    machines["web"].kill()
                    comeback.append((time.monotonic() + 5, machines["web"]))
                elif fault == "redis restart":
                    redis.stop()
                    time.sleep(2)
                    redis.start()
                elif fault == "redis pause":
                    redis.cli("CLIENT", "PAUSE", "30000", "ALL")
                else:
                    pg.restart()
                events.append({"at_s": round(at, 1), "fault": fault})
                print(f"{at:7.1f}s {fault}", flush=True)
                next_fault = time.monotonic() + rng.uniform(10, 20)
            time.sleep(0.2)
        for _when, machine in comeback:
            machine.start(wait=False)
        bound = max(60.0, args.max_s - (time.monotonic() - started))
        wait_for(lambda: (coordination(pg.url, job) or ("",))[0] == "ended", bound, "the end")
        for name in workers:
            if not machines[name].up:
                machines[name].start()
        try:
            wait_for(
                lambda: (
                    not client.containers.list(
                        all=True, filters={"label": f"benchflow.job_dir={job}"}, sparse=True
                    )
                ),
                60,
                "no container",
            )
        except TimeoutError:
            pass
        left = len(client.containers.list(all=True, filters={"label": f"benchflow.job_dir={job}"}))
        summary = json.loads((job_dir / "summary.json").read_text())
        results = [json.loads(p.read_text()) for p in job_dir.glob("*/result.json")]
        names = [r["trial_name"] for r in results]
        once = len(names) == len(set(names)) == args.trials
        rollouts = ((summary.get("budget") or {}).get("spent") or {}).get("rollouts")
        report = {
            "trials": args.trials,
            "task_s": args.task_s,
            "chaos_s": args.chaos_s,
            "faults": events,
            "counted_once": once,
            "summary_total": summary.get("total"),
            "summary_passed": summary.get("passed"),
            "n_attempts": summary.get("n_attempts"),
            "rollouts_counted": rollouts,
            "adoption_s": [round(a, 1) for a in adoptions],
            "adoption_p50_s": percentile(adoptions, 0.5),
            "adoption_p95_s": percentile(adoptions, 0.95),
            "machines_lost": len(wasted),
            "wasted_attempt_s_per_machine_lost": round(statistics.mean(wasted), 1)
            if wasted
            else None,
            "containers_left": left,
            "elapsed_s": round(time.monotonic() - started, 1),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(report, indent=2))
        ok = once and left == 0
        return 0 if ok else 1
    finally:
        for machine in machines.values():
            machine.kill()
        redis.stop()
        pg.stop()
        if job:
            for c in client.containers.list(
                all=True, filters={"label": f"benchflow.job_dir={job}"}
            ):
                c.remove(force=True)
        if ok:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept for a look: {root}", file=sys.stderr)


def _adoption(url: str, job: str, fence: int, killed_at: float, into: list[float]) -> None:
    deadline = killed_at + 300
    while time.monotonic() < deadline:
        row = coordination(url, job)
        if row is not None and row[2] > fence:
            into.append(time.monotonic() - killed_at)
            return
        time.sleep(0.25)


if __name__ == "__main__":
    sys.exit(main())
