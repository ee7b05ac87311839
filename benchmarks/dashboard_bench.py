"""The dashboard's figures: indexing a 10,000-attempt job, and pages of `bench view` over HTTP.

    .venv/bin/python benchmarks/dashboard_bench.py [--attempts 10000] [--runs 3] [--requests 15]

1. `bench index` of a generated job folder of 10,000 attempt folders (results_bench.make_job),
   each run a fresh subprocess and a fresh SQLite index: seconds and peak RSS (target 10 s, 300 MB).
2. Against `bench view` (daphne, SQLite) serving a job of 10,000 trials plus 199 small jobs: the
   job page, one sorted and filtered page of trials, the jobs list of 200 jobs, and a trial with
   2,000 model calls (its page and its first transcript page); each the median of several GETs
   after one warm-up, with a static file's GET in the same run as the floor.

Writes benchmarks/results/dashboard.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

from results_bench import make_job  # noqa: E402

TARGETS = {
    "index_s": 10.0,
    "index_mb": 300.0,
    "job_page_ms": 200.0,
    "trials_page_ms": 100.0,
    "jobs_list_ms": 200.0,
    "trial_page_ms": 500.0,
    "transcript_ms": 500.0,
}


def measure_index(job_dir: str, home: str) -> dict[str, Any]:
    """One `bench index` in this (fresh) process, on a fresh SQLite index under `home` (also
    hundredk_bench.py's)."""
    os.environ["BENCHFLOW_HOME"] = home
    os.environ.pop("DATABASE_URL", None)
    from benchflow_site.django_setup import setup_django

    setup_django()
    from runs.index.folder import index_job

    start = time.perf_counter()
    report = index_job(Path(job_dir))
    seconds = time.perf_counter() - start
    return {
        "seconds": round(seconds, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "attempts": report.attempts,
        "trials": report.trials,
    }


def _call(fn: str, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--_" + fn, *args], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _trajectory(path: Path, calls: int, rng: random.Random) -> None:
    """A Claude-like llm_trajectory.jsonl: each call sends the conversation so far (the last 40
    messages, as agents compact) and gets a tool call back."""
    path.parent.mkdir(parents=True, exist_ok=True)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test. " * 20}]
    with open(path, "w") as fh:
        for i in range(calls):
            reply = {
                "type": "tool_use",
                "id": f"toolu_{i}",
                "name": "Bash",
                "input": {"command": f"pytest -x tests/test_{i % 50}.py"},
            }
            line = {
                "attempt_id": "a",
                "protocol": "messages",
                "provider": "anthropic",
                "model": "claude-sonnet-4",
                "stream": False,
                "started_at": "2026-11-29T12:00:00Z",
                "duration_s": round(rng.uniform(0.5, 9), 3),
                "status": 200,
                "usage": {
                    "input_tokens": 20_000 + 40 * i,
                    "output_tokens": 120,
                    "cache_read_tokens": 18_000,
                    "cache_creation_tokens": 0,
                    "total_tokens": 20_120 + 40 * i,
                },
                "cost_usd": 0.004,
                "request": {"system": "You are a coding agent.", "messages": messages[-40:]},
                "response": {"role": "assistant", "content": [reply]},
            }
            fh.write(json.dumps(line) + "\n")
            messages.append({"role": "assistant", "content": [reply]})
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": f"toolu_{i}",
                            "content": "." * rng.randint(50, 400),
                        }
                    ],
                }
            )


def build_world(root: Path, trials: int) -> dict[str, str]:
    """A jobs folder: one job of about `trials` trials (one of them with 2,000 model calls) and
    199 small jobs; indexed into a fresh SQLite under root/home."""
    rng = random.Random(5)
    jobs = root / "jobs"
    big = make_job(jobs / "2026-11-29__11-00-00", int(trials * 1.17))
    folder = sorted(p for p in big.iterdir() if (p / "result.json").is_file())[0]
    _trajectory(folder / "trajectory" / "llm_trajectory.jsonl", 2000, rng)
    for i in range(199):
        make_job(jobs / f"2026-10-{1 + i // 24:02d}__{i % 24:02d}-00-00", 6, seed=i)
    home = root / "home"
    env = {**os.environ, "BENCHFLOW_HOME": str(home)}
    env.pop("DATABASE_URL", None)
    subprocess.run(
        [sys.executable, "-m", "benchflow_site.cli", "index", str(jobs)],
        env=env,
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    result = json.loads((folder / "result.json").read_text())
    return {
        "home": str(home),
        "jobs": str(jobs),
        "job": big.name,
        "trial": result["trial_name"],
        "rollout": folder.name,
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def measure_pages(world: dict[str, str], requests: int) -> dict[str, Any]:
    import httpx

    port = free_port()
    env = {**os.environ, "BENCHFLOW_HOME": world["home"]}
    env.pop("DATABASE_URL", None)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchflow_site.cli",
            "view",
            world["jobs"],
            "--port",
            str(port),
            "--no-browser",
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    job, trial, rollout = world["job"], world["trial"], world["rollout"]
    from urllib.parse import quote

    out: dict[str, Any] = {}
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    client.get("/static/viewer/live.js")
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            # the job's path as the server names it (name~id where a name alone is redirected)
            page = client.get(f"/jobs/{job}/", follow_redirects=True).url.path
            urls = {
                "static_floor_ms": "/static/viewer/live.js",
                "job_page_ms": page,
                "trials_page_ms": f"{page}trials/?sort=-cost&show=failed&page=3",
                "jobs_list_ms": "/",
                "trial_page_ms": f"{page}{quote(trial)}/?attempt={rollout}",
                "transcript_ms": f"{page}{quote(trial)}/{rollout}/transcript/",
            }
            for name, url in urls.items():
                first = client.get(url)
                assert first.status_code == 200, (url, first.status_code)
                times = []
                for _ in range(requests):
                    start = time.perf_counter()
                    response = client.get(url)
                    times.append((time.perf_counter() - start) * 1000)
                    assert response.status_code == 200
                out[name] = round(statistics.median(times), 1)
                out[name.replace("_ms", "_spread_ms")] = [
                    round(min(times), 1),
                    round(max(times), 1),
                ]
                out[name.replace("_ms", "_bytes")] = len(first.content)
            jobs_shown = client.get("/").text.count('href="/jobs/')
            out["jobs_listed"] = jobs_shown
            trials_total = client.get(f"{page}trials/").text
            out["trials_in_job"] = int(trials_total.split(" trial(s)")[0].rsplit(">", 1)[-1])
    finally:
        server.terminate()
        server.wait(10)
    return out


def cold_transcript(world: dict[str, str]) -> float:
    """The first transcript page of a 2,000-call trajectory never opened before (its line table
    built in this GET), in a fresh server."""
    from urllib.parse import quote

    import httpx

    port = free_port()
    env = {**os.environ, "BENCHFLOW_HOME": world["home"]}
    env.pop("DATABASE_URL", None)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchflow_site.cli",
            "view",
            world["jobs"],
            "--port",
            str(port),
            "--no-browser",
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    client.get("/static/viewer/live.js")
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            page = client.get(f"/jobs/{world['job']}/", follow_redirects=True).url.path
            start = time.perf_counter()
            client.get(f"{page}{quote(world['trial'])}/{world['rollout']}/transcript/")
            return round((time.perf_counter() - start) * 1000, 1)
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--attempts", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=15)
    parser.add_argument("--_index", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._index:
        print(json.dumps(measure_index(*args._index)))
        return
    with tempfile.TemporaryDirectory(prefix="dashboard-bench-") as tmp:
        root = Path(tmp)
        job = make_job(root / "index" / "2026-11-29__11-00-00", args.attempts)
        runs = [_call("index", str(job), tempfile.mkdtemp(dir=tmp)) for _ in range(args.runs)]
        world = build_world(root / "pages", args.attempts)
        pages = [measure_pages(world, args.requests) for _ in range(args.runs)]
        cold = [cold_transcript(world) for _ in range(args.runs)]
    figures: dict[str, Any] = {
        "index_s": statistics.median(r["seconds"] for r in runs),
        "index_s_runs": [r["seconds"] for r in runs],
        "index_mb": statistics.median(r["peak_rss_mb"] for r in runs),
        "index_attempts": runs[0]["attempts"],
    }
    for key in pages[0]:
        values = [p[key] for p in pages]
        if key.endswith("_ms"):
            figures[key] = statistics.median(values)
            figures[key + "_runs"] = values
        elif key.endswith("_spread"):
            figures[key] = [min(v[0] for v in values), max(v[1] for v in values)]
        elif key in ("jobs_listed", "trials_in_job"):
            figures[key] = values[0]
    figures["transcript_cold_ms"] = statistics.median(cold)
    figures["transcript_cold_ms_runs"] = cold
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "targets": TARGETS,
        "figures": figures,
        "met": {k: figures[k] <= v for k, v in TARGETS.items() if k in figures},
    }
    out = REPO / "benchmarks" / "results" / "dashboard.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
