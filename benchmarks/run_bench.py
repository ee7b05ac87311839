"""Per-trial wall time of `bench run -a oracle` against a raw Docker floor measured in the same run.

The floor does, with the docker SDK and nothing else, what one trial must: create, start, exec
the solution, copy the tests in, exec the verifier, read the reward, remove. Both sides use the
same trivial tasks and the same prebuilt image. Ratios are medians of several runs.

    .venv/bin/python benchmarks/run_bench.py [--tasks 16] [--runs 3] [--memory-tasks 50]

Writes benchmarks/results/run.json.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker

REPO = Path(__file__).resolve().parent.parent
SOLVE = "#!/bin/bash\necho hello > /app/out.txt\n"
TEST = (
    '#!/bin/bash\nif [ "$(cat /app/out.txt 2>/dev/null)" = hello ]; then echo 1 > /logs/verifier/reward.txt;'
    " else echo 0 > /logs/verifier/reward.txt; fi\n"
)
DOCKERFILE = "FROM debian:bookworm-slim\nWORKDIR /app\n"


def make_tasks(root: Path, n: int) -> Path:
    for i in range(n):
        t = root / f"trivial-{i:03d}"
        (t / "environment").mkdir(parents=True)
        (t / "tests").mkdir()
        (t / "solution").mkdir()
        (t / "task.toml").write_text('version = "1.0"\n[agent]\ntimeout_sec = 60\n')
        (t / "instruction.md").write_text("Write hello to /app/out.txt.\n")
        # one build context for all: the image is shared, as in a benchmark whose tasks share a base
        (t / "environment" / "Dockerfile").write_text(DOCKERFILE)
        (t / "tests" / "test.sh").write_text(TEST)
        (t / "solution" / "solve.sh").write_text(SOLVE)
    return root


def _tar(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def floor_trial(api: docker.APIClient, image: str) -> None:
    """The least one trial takes through the docker SDK."""
    c = api.create_container(
        image, command=["sleep", "infinity"], host_config=api.create_host_config(init=True)
    )
    cid = c["Id"]
    try:
        api.put_archive(cid, "/", _tar({"solution/solve.sh": SOLVE}))
        api.start(cid)
        ex = api.exec_create(cid, ["bash", "/solution/solve.sh"])
        api.exec_start(ex["Id"])
        api.put_archive(cid, "/", _tar({"tests/test.sh": TEST}))
        ex = api.exec_create(
            cid,
            [
                "bash",
                "-c",
                "mkdir -p /logs/verifier && bash /tests/test.sh && cat /logs/verifier/reward.txt",
            ],
        )
        out = api.exec_start(ex["Id"])
        assert out.strip() == b"1", out
    finally:
        api.remove_container(cid, force=True)


def floor_per_trial(image: str, n: int, j: int) -> float:
    client = docker.from_env(max_pool_size=64)
    t = time.perf_counter()
    with ThreadPoolExecutor(j) as pool:
        list(pool.map(lambda _: floor_trial(client.api, image), range(n)))
    return (time.perf_counter() - t) / n


def bench_per_trial(tasks: Path, jobs: Path, n: int, j: int, env: dict) -> tuple[float, float, int]:
    """(whole command per trial, in-job per trial, peak RSS KB) of one `bench run`."""
    t = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchflow_site.cli",
            "run",
            str(tasks),
            "-a",
            "oracle",
            "-j",
            str(j),
            "--quiet",
            "--fresh",
            "--jobs-dir",
            str(jobs),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"bench run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    summary = json.loads((jobs / "summary.json").read_text())
    assert summary["passed"] == n, summary
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall / n, summary["elapsed_sec"] / n, rss


def peak_memory_mb(tasks: Path, jobs: Path, j: int, env: dict) -> float:
    """Peak RSS of a `bench run` measured in a fresh child (getrusage of that child alone)."""
    code = (
        "import resource, subprocess, sys; "
        f"p = subprocess.run([sys.executable, '-m', 'benchflow_site.cli', 'run', {str(tasks)!r}, '-a', 'oracle', "
        f"'-j', '{j}', '--quiet', '--fresh', '--jobs-dir', {str(jobs)!r}], capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    if out[1] != "0":
        raise SystemExit("bench run for the memory figure failed")
    return int(out[0]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--memory-tasks", type=int, default=50)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-run-"))
    env = {**os.environ, "BENCHFLOW_HOME": str(work / "state"), "PYTHONPATH": str(REPO)}
    tasks = make_tasks(work / "tasks", args.tasks)
    # warm-up: builds the (shared) image once, so neither side pays for a build
    bench_per_trial(tasks, work / "jobs", args.tasks, 4, env)
    image = json.loads(next((work / "jobs").glob("*/*/sandbox.json")).read_text())["image"]

    figures: dict[str, dict] = {}
    for j in (1, 4):
        floors, wholes, injob = [], [], []
        for _ in range(args.runs):
            floors.append(floor_per_trial(image, args.tasks, j))
            whole, inside, _rss = bench_per_trial(tasks, work / "jobs", args.tasks, j, env)
            wholes.append(whole)
            injob.append(inside)
        f, w, i = statistics.median(floors), statistics.median(wholes), statistics.median(injob)
        figures[f"j{j}"] = {
            "floor_s_per_trial": round(f, 3),
            "bench_s_per_trial_whole_command": round(w, 3),
            "bench_s_per_trial_in_job": round(i, 3),
            "ratio_whole_command": round(w / f, 2),
            "ratio_in_job": round(i / f, 2),
        }
    mem_tasks = make_tasks(work / "mem-tasks", args.memory_tasks)
    figures["memory"] = {
        "tasks": args.memory_tasks,
        "concurrency": 8,
        "peak_rss_mb": round(peak_memory_mb(mem_tasks, work / "mem-jobs", 8, env), 1),
    }
    out = REPO / "benchmarks" / "results" / "run.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
