"""Scale-out against in process: N trivial attempts through two `bench worker`s of two slots each,
against the same job in the `bench run` process at -j 4 (its default warm pool), measured in the
same run, alternating, medians of several rounds.

Figures, from each job's summary.json and its leases in the database:
- the whole job's time on workers / in process (summary.json elapsed_sec of each);
- dispatch overhead per attempt: the coordinator's time on an attempt (lease created to outcome
  collected) minus the worker's own time on it (its sandbox's preparation and its run) and the time
  its prepared sandbox waited for a slot: the broker, the claims, the hints and the database
  trips; median over the attempts;
- slots idle while attempts waited: from the first attempt's start to the last's (attempts wait,
  queued or prepared, all along), the share of the four slots' time that held no attempt (a
  worker holds an attempt from its claim to its end, its sandbox being made or its agent running,
  as a slot in process holds its trial from its start; a worker holding fewer than its slots has
  the rest idle); beside it the share no attempt *ran* on (started to finished), which making
  sandboxes bounds when they take longer than the attempts, and the gaps on a slot between one
  attempt's end and the next's start.

    .venv/bin/python benchmarks/scaleout_bench.py [--tasks 200] [--rounds 3]

Needs Redis on 127.0.0.1:6379 (its db 12, a queue of its own). Writes benchmarks/results/scaleout.json
(or --out). `--database postgres://...` puts the leases and the index in PostgreSQL, as for workers
on several machines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
REDIS = "redis://127.0.0.1:6379/12"
WORKERS, SLOTS, J = 2, 2, 4


def make_tasks(root: Path, n: int, sleep_s: float = 0.0) -> None:
    """The trivial tasks of run_bench.py: one shared image, a one-line solution and test (with
    --sleep, a solution that takes that long: attempts longer than their sandbox's making)."""
    wait = f"sleep {sleep_s:g}\n" if sleep_s else ""
    for i in range(n):
        t = root / f"trivial-{i:03d}"
        for sub in ("environment", "tests", "solution"):
            (t / sub).mkdir(parents=True)
        (t / "task.toml").write_text('version = "1.0"\n[agent]\ntimeout_sec = 60\n')
        (t / "instruction.md").write_text("Write hello to /app/out.txt.\n")
        (t / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
        (t / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{wait}echo hello > /app/out.txt\n")
        (t / "tests" / "test.sh").write_text(
            '#!/bin/bash\n[ "$(cat /app/out.txt)" = hello ] && echo 1 > /logs/verifier/reward.txt'
            " || echo 0 > /logs/verifier/reward.txt\n"
        )


def bench(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchflow_site.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=3600,
    )


def start_workers(
    env: dict[str, str], cwd: Path, ahead: int | None
) -> list[subprocess.Popen[bytes]]:
    procs = []
    more = [] if ahead is None else ["--prepare-ahead", str(ahead)]
    for i in range(WORKERS):
        log = open(cwd / f"worker-{i}.log", "wb")  # noqa: SIM115 - open while the worker runs
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "benchflow_site.cli", "worker", "-c", str(SLOTS), *more],
                env=env,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if all(" up: " in (cwd / f"worker-{i}.log").read_text() for i in range(WORKERS)):
            return procs
        time.sleep(0.2)
    raise SystemExit("the workers did not start; see worker-*.log in " + str(cwd))


def stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    for w in workers:
        w.terminate()
    for w in workers:
        w.wait(60)


def run_job(mode: str, env: dict[str, str], cwd: Path, n: int) -> tuple[Path, float, float]:
    jobs = cwd / f"jobs-{mode}"
    flag = "on" if mode == "workers" else "off"
    t0 = time.monotonic()
    proc = bench(
        [
            "run",
            "tasks",
            "-a",
            "oracle",
            "-j",
            str(J),
            "--workers",
            flag,
            "--jobs-dir",
            str(jobs),
            "--fresh",
            "--quiet",
        ],
        env,
        cwd,
    )
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench run ({mode}) failed:\n{proc.stdout}\n{proc.stderr}")
    job = max(p for p in jobs.iterdir() if p.is_dir())
    summary = json.loads((job / "summary.json").read_text())
    if summary["passed"] != n:
        raise SystemExit(f"{mode}: {summary['passed']} of {n} passed")
    return job, float(summary["elapsed_sec"]), wall


def lease_figures(job: Path) -> dict[str, Any]:
    """Dispatch overhead and slot use from the job's leases (read through the ORM)."""
    from runs.models import Lease

    rows = list(
        Lease.objects.filter(job_path=str(job.resolve())).values(
            "dispatched_at",
            "claimed_at",
            "started_at",
            "finished_at",
            "collected_at",
            "work_s",
            "slot_wait_s",
            "worker__name",
        )
    )
    waits = [r["slot_wait_s"] or 0.0 for r in rows]
    # the broker, the claims, the hints and the database trips: the coordinator's time on an
    # attempt less the worker's own (its sandbox's preparation and its run) and the time its
    # prepared sandbox waited for a slot (an attempt ahead of its turn, as in a warm pool)
    overheads = [
        (r["collected_at"] - r["dispatched_at"]).total_seconds() - r["work_s"] - w
        for r, w in zip(rows, waits, strict=True)
        if r["collected_at"] and r["work_s"] is not None
    ]
    # from the first attempt's start to the last's, attempts wait (prepared or queued) for a slot:
    # a slot is busy while an attempt runs on it (started to finished)
    start = min(r["started_at"] for r in rows)
    end = max(r["started_at"] for r in rows)
    window = (end - start).total_seconds()
    busy = 0.0
    gaps: list[float] = []
    by_worker: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        a = (r["started_at"] - start).total_seconds()
        b = (r["finished_at"] - start).total_seconds()
        busy += max(0.0, min(b, window) - max(a, 0.0))
        by_worker.setdefault(r["worker__name"], []).append((a, b))
    for spans in by_worker.values():
        # a slot frees at one attempt's end; the next attempt it starts shows the gap
        ends = sorted(b for _, b in spans if b < window)
        starts = sorted(a for a, _ in spans)
        for e in ends:
            nxt = [a for a in starts if a >= e]
            if nxt:
                gaps.append(nxt[0] - e)
    # a slot holds an attempt from its claim (its sandbox being made, as a slot in process holds
    # its trial from the start) to its end; a worker holding fewer attempts than its slots has
    # that many slots idle
    held_idle = 0.0
    for name in by_worker:
        marks = sorted(
            [
                ((r["claimed_at"] - start).total_seconds(), 1)
                for r in rows
                if r["worker__name"] == name
            ]
            + [
                ((r["finished_at"] - start).total_seconds(), -1)
                for r in rows
                if r["worker__name"] == name
            ]
        )
        held_idle += idle_slot_seconds(marks, SLOTS, window)
    to_claim = [(r["claimed_at"] - r["dispatched_at"]).total_seconds() for r in rows]
    to_collect = [
        (r["collected_at"] - r["finished_at"]).total_seconds() for r in rows if r["collected_at"]
    ]
    # the worker's own writes and reads around the attempt: claimed to result written, less the
    # attempt's sandbox preparation and run and its wait for a slot
    on_worker = [
        (r["finished_at"] - r["claimed_at"]).total_seconds() - r["work_s"] - w
        for r, w in zip(rows, waits, strict=True)
        if r["finished_at"] and r["work_s"] is not None
    ]
    return {
        "attempts": len(rows),
        "dispatched_to_claimed_ms_median": round(statistics.median(to_claim) * 1000, 1),
        "finished_to_collected_ms_median": round(statistics.median(to_collect) * 1000, 1),
        "on_worker_outside_attempt_ms_median": round(statistics.median(on_worker) * 1000, 1),
        "slot_wait_ms_median": round(statistics.median(waits) * 1000, 1),
        "dispatch_overhead_ms_median": round(statistics.median(overheads) * 1000, 1),
        "dispatch_overhead_ms_p90": round(
            sorted(overheads)[int(0.9 * (len(overheads) - 1))] * 1000, 1
        ),
        "waiting_window_s": round(window, 1),
        "slots_idle_share_while_waiting": round(held_idle / (WORKERS * SLOTS * window), 4)
        if window
        else None,
        "slots_idle_share_no_run": round(1 - busy / (WORKERS * SLOTS * window), 4)
        if window
        else None,
        "slot_gap_ms_median": round(statistics.median(gaps) * 1000, 1) if gaps else None,
        "slot_gap_ms_max": round(max(gaps) * 1000, 1) if gaps else None,
        "workers_used": len(by_worker),
    }


def idle_slot_seconds(marks: list[tuple[float, int]], slots: int, window: float) -> float:
    """Slot-seconds idle in [0, window] given (time, +1 taken / -1 freed) marks of one worker's
    attempts: at each moment, its slots less the attempts it holds (none below zero)."""
    idle, held, at = 0.0, 0, 0.0
    for t, step in marks:
        t = min(max(t, 0.0), window)
        idle += max(0, slots - held) * (t - at)
        held, at = held + step, t
    return idle + max(0, slots - held) * (window - at)


def local_idle(job: Path) -> dict[str, float | None]:
    """The same shares for the job in process, from its result.json files: a slot holds a trial
    from its start (its sandbox made, or taken warm) to its end, and runs it from its agent's start
    (its end less its agent, verifier and teardown phases)."""
    from datetime import datetime

    spans, runs = [], []
    for result in job.glob("*__*/result.json"):
        doc = json.loads(result.read_text())
        timing = doc.get("timing") or {}
        end = datetime.fromisoformat(doc["finished_at"]).timestamp()
        spans.append((end - timing["total"], end))
        runs.append((end - (timing["total"] - timing["environment_setup"]), end))
    start, stop = min(a for a, _ in runs), max(a for a, _ in runs)
    window = stop - start
    if not window:
        return {"slots_idle_share_while_waiting": None, "slots_idle_share_no_run": None}
    busy = sum(max(0.0, min(b, stop) - max(a, start)) for a, b in runs)
    marks = sorted([(a - start, 1) for a, _ in spans] + [(b - start, -1) for _, b in spans])
    return {
        "slots_idle_share_while_waiting": round(
            idle_slot_seconds(marks, J, window) / (J * window), 4
        ),
        "slots_idle_share_no_run": round(1 - busy / (J * window), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--sleep", type=float, default=0.0, help="seconds each solution sleeps (default 0)"
    )
    parser.add_argument("--out", default="scaleout.json", help="under benchmarks/results/")
    parser.add_argument(
        "--database",
        default="",
        help="DATABASE_URL of an empty PostgreSQL database for the leases and the index "
        "(default: a SQLite file of the benchmark's own)",
    )
    parser.add_argument(
        "--ahead", type=int, default=None, help="each worker's --prepare-ahead (default: its own)"
    )
    parser.add_argument(
        "--against",
        default="",
        help="another checkout (a git worktree, say): each round runs the job on workers of this "
        "tree and of that one, in alternating order, and compares their figures (no in-process job)",
    )
    args = parser.parse_args()
    if args.against:
        compare(args)
        return
    root = Path(tempfile.mkdtemp(prefix="scaleout-bench-"))
    make_tasks(root / "tasks", args.tasks, args.sleep)
    env = {
        **os.environ,
        "BENCHFLOW_HOME": str(root / "state"),
        "BENCHFLOW_REDIS_URL": REDIS,
        "BENCHFLOW_QUEUE": f"bench-{uuid.uuid4().hex[:8]}",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DATABASE_URL", None)
    os.environ.update({k: env[k] for k in ("BENCHFLOW_HOME",)})
    os.environ.pop("DATABASE_URL", None)
    if args.database:  # an empty PostgreSQL database of the benchmark's own (its tables made here)
        env["DATABASE_URL"] = os.environ["DATABASE_URL"] = args.database
    from benchflow_site.django_setup import setup_django

    setup_django()  # migrates the benchmark's own database before the workers open it
    workers = start_workers(env, root, args.ahead)
    rounds = []
    try:
        run_job("local", env, root, args.tasks)  # images built and caches warm for both sides
        for i in range(args.rounds):
            order = ("local", "workers") if i % 2 == 0 else ("workers", "local")
            measured: dict[str, Any] = {}
            for mode in order:
                job, elapsed, wall = run_job(mode, env, root, args.tasks)
                measured[mode] = {"elapsed_s": elapsed, "wall_s": round(wall, 2)}
                if mode == "workers":
                    measured[mode].update(lease_figures(job))
                else:
                    measured[mode].update(local_idle(job))
            measured["ratio"] = round(
                measured["workers"]["elapsed_s"] / measured["local"]["elapsed_s"], 3
            )
            rounds.append(measured)
            print(json.dumps({"round": i + 1, **measured}), flush=True)
    finally:
        stop_workers(workers)
    result = {
        "tasks": args.tasks,
        "sleep_s": args.sleep,
        "prepare_ahead": args.ahead,
        "database": "postgresql" if args.database else "sqlite",
        "workers": WORKERS,
        "slots_each": SLOTS,
        "j": J,
        "ratio_median": statistics.median(r["ratio"] for r in rounds),
        "ratios": [r["ratio"] for r in rounds],
        "dispatch_overhead_ms_median": statistics.median(
            r["workers"]["dispatch_overhead_ms_median"] for r in rounds
        ),
        "slots_idle_share_while_waiting_median": statistics.median(
            r["workers"]["slots_idle_share_while_waiting"] for r in rounds
        ),
        "in_process_slots_idle_share_median": statistics.median(
            r["local"]["slots_idle_share_while_waiting"] for r in rounds
        ),
        "slots_idle_share_no_run_median": statistics.median(
            r["workers"]["slots_idle_share_no_run"] for r in rounds
        ),
        "in_process_slots_idle_share_no_run_median": statistics.median(
            r["local"]["slots_idle_share_no_run"] for r in rounds
        ),
        "slot_gap_ms_median": statistics.median(r["workers"]["slot_gap_ms_median"] for r in rounds),
        "rounds": rounds,
        "machine": {"cpus": os.cpu_count()},
    }
    out = REPO / "benchmarks" / "results" / args.out
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=2))


def compare(args: argparse.Namespace) -> None:
    """A/B: the same jobs on workers of two trees (each tree's coordinator and workers run its own
    code, through PYTHONPATH; each its own queue), alternating which goes first."""
    root = Path(tempfile.mkdtemp(prefix="scaleout-ab-"))
    make_tasks(root / "tasks", args.tasks, args.sleep)
    trees = {"this": REPO, "against": Path(args.against).resolve()}
    base = {
        **os.environ,
        "BENCHFLOW_HOME": str(root / "state"),
        "BENCHFLOW_REDIS_URL": REDIS,
        "PYTHONUNBUFFERED": "1",
    }
    base.pop("DATABASE_URL", None)
    os.environ.update({"BENCHFLOW_HOME": base["BENCHFLOW_HOME"]})
    os.environ.pop("DATABASE_URL", None)
    if args.database:
        base["DATABASE_URL"] = os.environ["DATABASE_URL"] = args.database
    from benchflow_site.django_setup import setup_django

    setup_django()
    envs, workers = {}, []
    for name, tree in trees.items():
        envs[name] = {
            **base,
            "PYTHONPATH": str(tree),
            "BENCHFLOW_QUEUE": f"bench-{name}-{uuid.uuid4().hex[:8]}",
        }
        (root / name).mkdir()
        (root / name / "tasks").symlink_to(root / "tasks")
        workers += start_workers(envs[name], root / name, args.ahead)
    figures: dict[str, list[float]] = {name: [] for name in trees}
    try:
        for name in trees:  # images built and caches warm for both
            run_job("workers", envs[name], root / name, args.tasks)
        for i in range(args.rounds):
            order = list(trees) if i % 2 == 0 else list(reversed(trees))
            measured: dict[str, Any] = {}
            for name in order:
                job, elapsed, _ = run_job("workers", envs[name], root / name, args.tasks)
                measured[name] = {"elapsed_s": elapsed, **lease_figures(job)}
                figures[name].append(measured[name]["dispatch_overhead_ms_median"])
            print(json.dumps({"round": i + 1, **measured}), flush=True)
    finally:
        stop_workers(workers)
    for name, tree in trees.items():
        print(
            f"{name} ({tree}): dispatch overhead {figures[name]} ms, median "
            f"{statistics.median(figures[name])}"
        )


if __name__ == "__main__":
    main()
