"""Time and peak memory of `load_job` + `render_results` on a job of 10,000 attempt folders.

`make_job(path, n_attempts)` writes a realistic job folder (retries, interrupted attempts, trial
budgets, repeats); each measured run is a fresh subprocess so its peak RSS is its own.

    .venv/bin/python benchmarks/results_bench.py [--attempts 10000] [--runs 5] [--against TREE]

With --against, each run also measures another checkout (its own results_bench.py, on the same
job folder), alternating, so a change is compared with its base in the same hour.

Writes benchmarks/results/results.json. Targets: under 2 s and under 200 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 2.0
TARGET_MB = 200.0
ERRORS = [
    (
        "Agent idle for 600s with no new tool call, message, or thought (last activity 612s ago, "
        "15 tool calls so far)",
        "idle_timeout",
    ),
    ("Agent install failed (exit 1): npm ERR! network request failed", "install_failure"),
    ("ACP error: provider rate limited (HTTP 429)", "provider_rate_limit"),
    ("Connection reset by peer while reading the agent's stdout", "infra_failure"),
]


def _result(
    task: str,
    folder: str,
    index: int,
    attempt: int,
    rng: random.Random,
    start: datetime,
    *,
    error: tuple[str, str] | None,
) -> dict[str, Any]:
    trial = task if index == 0 else f"{task}#{index}"
    tokens_in, tokens_out = rng.randint(5_000, 900_000), rng.randint(500, 40_000)
    cached = tokens_in // 3
    setup, execution, verify = rng.uniform(0.2, 4), rng.uniform(5, 600), rng.uniform(0.3, 30)
    finished = start + timedelta(seconds=setup + execution + verify)
    reward = None if error else rng.choice([0.0, 1.0, 1.0, 0.5])
    budget = None
    if rng.random() < 0.05 and error is None:
        budget = {
            "budget": {"tokens": 60_000, "turns": None},
            "source": {"tokens": "run"},
            "used": {"tokens": 63_260, "turns": 6},
            "subagents": None,
            "stopped_by": "tokens",
            "stopped_at": 63_260,
            "refused_calls": 1,
        }
        reward = 0.0
    return {
        "task_name": task,
        "rollout_name": folder,
        "trial_name": trial,
        "trial_index": index,
        "attempt": attempt,
        "rewards": None if reward is None else {"reward": reward},
        "agent": "opencode",
        "agent_name": "opencode",
        "model": "deepseek/deepseek-v4-flash",
        "n_tool_calls": rng.randint(0, 120),
        "n_prompts": 1,
        "last_tool_call": "python3 - <<'EOF'",
        "agent_result": {
            "n_input_tokens": tokens_in,
            "n_output_tokens": tokens_out,
            "n_cache_read_tokens": cached,
            "n_cache_creation_tokens": 0,
            "total_tokens": tokens_in + tokens_out,
            "cost_usd": round((tokens_in - cached) * 0.28e-6 + tokens_out * 0.42e-6, 6),
            "usage_source": "provider_response",
            "price_source": "benchflow-placeholder",
        },
        "error": error[0] if error else None,
        "error_category": error[1] if error else None,
        "verifier_error": None,
        "verifier_error_category": None,
        "agent_timeout_info": None,
        "trial_budget": budget,
        "started_at": start.isoformat(timespec="milliseconds"),
        "finished_at": finished.isoformat(timespec="milliseconds"),
        "timing": {
            "environment_setup": round(setup, 1),
            "agent_setup": 0.0,
            "agent_execution": round(execution, 1),
            "verifier": round(verify, 1),
            "total": round(setup + execution + verify, 1),
        },
        "sandbox_id": f"{rng.getrandbits(48):012x}",
    }


def make_job(path: str | os.PathLike[str], n_attempts: int, *, seed: int = 7) -> Path:
    """Write a job folder of `n_attempts` attempt folders; about 1 in 10 trials needed retries,
    about 1 in 200 attempts was interrupted (no result.json), and each task ran 2 trials."""
    rng = random.Random(seed)
    job = Path(path)
    job.mkdir(parents=True, exist_ok=True)
    clock = datetime(2026, 11, 29, 11, 0, 0)
    plan: list[str] = []
    written = 0
    while written < n_attempts:
        task = f"task-{len(plan):05d}"
        plan.append(task)
        for index in range(2):
            tries = 1 if rng.random() > 0.1 else rng.choice([2, 3])
            for attempt in range(1, tries + 1):
                if written >= n_attempts:
                    break
                folder = f"{task}__{rng.getrandbits(32):08x}"
                (job / folder).mkdir()
                written += 1
                clock += timedelta(seconds=rng.uniform(1, 30))
                if rng.random() < 0.005:
                    continue  # interrupted: the folder exists, result.json was never written
                error = rng.choice(ERRORS) if attempt < tries else None
                body = _result(task, folder, index, attempt, rng, clock, error=error)
                (job / folder / "result.json").write_text(json.dumps(body, indent=2))
    settings = {
        "plan": plan,
        "trials": 2,
        "agent": "opencode",
        "model": "deepseek/deepseek-v4-flash",
        "concurrency": 8,
    }
    (job / "evaluation.json").write_text(json.dumps(settings, indent=2))
    return job


def measure(job_dir: str) -> dict[str, Any]:
    """One run, in this process: load the job, render the table, report seconds and peak RSS."""
    sys.path.insert(0, str(REPO))
    from runs.results.load import load_job
    from runs.results.render import render_results

    start, cpu = time.perf_counter(), time.process_time()
    job = load_job(job_dir)
    text = render_results(job)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {
        "seconds": round(seconds, 4),
        "cpu_seconds": round(cpu, 4),
        "peak_rss_mb": round(peak_mb, 1),
        "trials": len(job.trials),
        "attempts": len(job.attempts),
        "chars": len(text),
    }


def measure_plan(job_dir: str) -> dict[str, Any]:
    """One run: plan a resume of the job (what `bench run` does before it starts anything)."""
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchflow_site.settings")
    os.environ.setdefault("BENCHFLOW_HOME", tempfile.mkdtemp(prefix="results-bench-home-"))
    import django

    django.setup()
    from types import SimpleNamespace

    from runs.jobs.plan import plan_job

    settings = json.loads((Path(job_dir) / "evaluation.json").read_text())
    tasks = [SimpleNamespace(name=name, environment_dir=None) for name in settings["plan"]]
    start, cpu = time.perf_counter(), time.process_time()
    plan = plan_job(Path(job_dir), tasks, settings["trials"])  # type: ignore[arg-type]
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "seconds": round(seconds, 4),
        "cpu_seconds": round(cpu, 4),
        "peak_rss_mb": round(peak_mb, 1),
        "done": len(plan.done),
        "to_run": plan.to_run,
    }


def _sample(script: Path, flag: str, job: Path) -> dict[str, Any]:
    """One measurement in a fresh process of `script`'s checkout (its own code imported)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, str(script), flag, str(job)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return json.loads(out.stdout)


def _medians(samples: list[dict[str, Any]]) -> dict[str, float]:
    return {
        "median_seconds": statistics.median(s["seconds"] for s in samples),
        "median_cpu_seconds": statistics.median(s["cpu_seconds"] for s in samples),
        "median_peak_rss_mb": statistics.median(s["peak_rss_mb"] for s in samples),
        "min_seconds": min(s["seconds"] for s in samples),
        "max_seconds": max(s["seconds"] for s in samples),
    }


def run(n_attempts: int, runs: int, against: Path | None = None) -> dict[str, Any]:
    here = Path(__file__).resolve()
    other = against.resolve() / "benchmarks" / "results_bench.py" if against else None
    base: dict[str, list[dict[str, Any]]] = {"--measure": [], "--measure-plan": []}
    with tempfile.TemporaryDirectory(prefix="results-bench-") as tmp:
        started = time.perf_counter()
        job = make_job(Path(tmp) / "2026-11-29__11-00-00", n_attempts)
        made_s = time.perf_counter() - started
        samples: list[dict[str, Any]] = []
        plans: list[dict[str, Any]] = []
        for flag, into in (("--measure", samples), ("--measure-plan", plans)):
            for _ in range(runs):
                into.append(_sample(here, flag, job))
                if other is not None:
                    base[flag].append(_sample(other, flag, job))
    median_s = statistics.median(s["seconds"] for s in samples)
    median_mb = statistics.median(s["peak_rss_mb"] for s in samples)
    return {
        "benchmark": "results: load_job + render_results",
        "n_attempts": n_attempts,
        "trials": samples[0]["trials"],
        "runs": samples,
        "median_seconds": median_s,
        "median_cpu_seconds": statistics.median(s["cpu_seconds"] for s in samples),
        "median_peak_rss_mb": median_mb,
        "max_peak_rss_mb": max(s["peak_rss_mb"] for s in samples),
        "targets": {"seconds": TARGET_S, "peak_rss_mb": TARGET_MB},
        "resume_planning": {
            "runs": plans,
            "median_seconds": statistics.median(p["seconds"] for p in plans),
            "median_peak_rss_mb": statistics.median(p["peak_rss_mb"] for p in plans),
        },
        "ok": median_s < TARGET_S
        and median_mb < TARGET_MB
        and statistics.median(p["seconds"] for p in plans) < TARGET_S
        and statistics.median(p["peak_rss_mb"] for p in plans) < TARGET_MB,
        "against": None
        if other is None
        else {
            "tree": str(against),
            "results": {**_medians(base["--measure"]), "runs": base["--measure"]},
            "resume_planning": {**_medians(base["--measure-plan"]), "runs": base["--measure-plan"]},
            "ratio_results": statistics.median(s["seconds"] for s in samples)
            / statistics.median(s["seconds"] for s in base["--measure"]),
            "ratio_resume_planning": statistics.median(p["seconds"] for p in plans)
            / statistics.median(p["seconds"] for p in base["--measure-plan"]),
        },
        "make_job_seconds": round(made_s, 2),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),  # the machine may be shared: compare cpu_seconds too
        "measured_at": datetime.now().isoformat(timespec="seconds"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", type=Path, help="another checkout to measure alternately")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--measure-plan", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    if args.measure_plan:
        print(json.dumps(measure_plan(args.measure_plan)))
        return 0
    report = run(args.attempts, args.runs, args.against)
    out = REPO / "benchmarks" / "results" / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"{report['n_attempts']:,} attempts ({report['trials']:,} trials): "
        f"median {report['median_seconds']:.3f} s wall, {report['median_cpu_seconds']:.3f} s CPU "
        f"(target < {TARGET_S} s), "
        f"peak RSS median {report['median_peak_rss_mb']:.1f} MB (target < {TARGET_MB:.0f} MB); "
        f"resume planning median {report['resume_planning']['median_seconds']:.3f} s, "
        f"{report['resume_planning']['median_peak_rss_mb']:.1f} MB "
        f"-> {'OK' if report['ok'] else 'MISSED'}; wrote {out.relative_to(REPO)}"
    )
    if report["against"]:
        base = report["against"]
        print(
            f"against {base['tree']}: results median {base['results']['median_seconds']:.3f} s, "
            f"{base['results']['median_peak_rss_mb']:.1f} MB (this tree {report['median_seconds']:.3f} s, "
            f"ratio {base['ratio_results']:.2f}); resume planning median "
            f"{base['resume_planning']['median_seconds']:.3f} s, "
            f"{base['resume_planning']['median_peak_rss_mb']:.1f} MB "
            f"(ratio {base['ratio_resume_planning']:.2f})"
        )
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
