"""100,000 trials: `bench index`, the job page (server and Chromium's first paint) and search; and
search over 10,000 trials of 20 model calls each (its time, and how much it grows the index).

    .venv/bin/python benchmarks/hundredk_bench.py [--attempts 100000] [--runs 3] [--requests 15]
        [--search-trials 10000] [--calls 20] [--keep DIR]

1. A job folder of `--attempts` attempt folders in the runner's layout (results_bench.make_job:
   result.json of each attempt, retries, interrupted ones), each attempt with a trajectory of 3
   model calls (trajectory/llm_trajectory.jsonl, the proxy's lines) and its agent's output
   (agent/opencode.txt), in words drawn from a vocabulary of 4,000 (Zipf-like).
2. `bench index` of it, each run a fresh process and a fresh SQLite index: seconds and peak RSS.
3. `bench view` serving it: the job page, a sorted and filtered page of its trials, a search
   across jobs (`/search/?q=`) and the job page's search (`?q=`), each the median of `--requests`
   GETs after one warm-up; the job page's first contentful paint in Chromium (a fresh page each
   time), the median of `--requests` loads.
4. A job of `--search-trials` trials of `--calls` model calls each, indexed; a search across jobs
   (median of `--requests` GETs, for a rare, a middling and a common word); and the index's size
   with its search and without (a copy with the search's rows and table dropped, both VACUUMed).

Writes benchmarks/results/hundredk.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sqlite3
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

from dashboard_bench import free_port, measure_index  # noqa: E402
from results_bench import make_job  # noqa: E402

TARGETS = {
    "index_s": 60.0,
    "index_mb": 500.0,
    "job_page_ms": 300.0,
    "first_paint_ms": 1500.0,
    "search_ms": 500.0,
    "search_10k_ms": 300.0,
    "search_growth_x": 2.0,
}
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def vocabulary(rng: random.Random, size: int = 4000) -> list[str]:
    syllables = ["ka", "lo", "mi", "ne", "tor", "pas", "ri", "qu", "ex", "dat", "fun", "par"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words)


class Words:
    """Text in words of a vocabulary, the first far more often than the last (Zipf-like)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.words = vocabulary(rng)
        self.weights = [1 / (i + 1) for i in range(len(self.words))]

    def text(self, n: int) -> str:
        return " ".join(self.rng.choices(self.words, self.weights, k=n))


def write_calls(folder: Path, calls: int, words: Words) -> None:
    """A trajectory of `calls` model calls (each sends the conversation so far, the last 40
    messages, and gets a tool call back) and the agent's output."""
    rng = words.rng
    messages: list[dict[str, Any]] = [{"role": "user", "content": words.text(40)}]
    (folder / "trajectory").mkdir(exist_ok=True)
    with open(folder / "trajectory" / "llm_trajectory.jsonl", "w") as fh:
        for i in range(calls):
            reply = {
                "type": "tool_use",
                "id": f"toolu_{i}",
                "name": "Bash",
                "input": {"command": f"grep -rn {words.text(2)} src/"},
            }
            line = {
                "protocol": "messages",
                "provider": "anthropic",
                "model": "claude-sonnet-4",
                "started_at": "2026-11-29T12:00:00Z",
                "duration_s": round(rng.uniform(0.5, 9), 3),
                "status": 200,
                "usage": {"input_tokens": 2000 + 40 * i, "output_tokens": 120},
                "cost_usd": 0.004,
                "request": {"system": "You are a coding agent.", "messages": messages[-40:]},
                "response": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": words.text(12)}, reply],
                },
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
                            "content": words.text(rng.randint(10, 60)),
                        }
                    ],
                }
            )
    (folder / "agent").mkdir(exist_ok=True)
    (folder / "agent" / "opencode.txt").write_text(words.text(80) + "\n")


def build_job(path: Path, attempts: int, calls: int, seed: int) -> Path:
    job = make_job(path, attempts, seed=seed)
    words = Words(random.Random(seed))
    with os.scandir(job) as entries:
        for entry in entries:
            if entry.is_dir() and "__" in entry.name:
                write_calls(Path(entry.path), calls, words)
    return job


# --- bench index -------------------------------------------------------------------------------------


def _index(job: Path, home: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--_index", str(job), str(home)],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


# --- pages -------------------------------------------------------------------------------------------


class Server:
    """`bench view` (daphne, SQLite) over a jobs folder."""

    def __init__(self, home: Path, jobs: Path):
        import httpx

        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "BENCHFLOW_HOME": str(home)}
        env.pop("DATABASE_URL", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchflow_site.cli", "view", str(jobs)]
            + ["--port", str(self.port), "--no-browser"],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.client = httpx.Client(base_url=self.base, timeout=60)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client.get("/static/viewer/live.js")
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def median_ms(self, url: str, requests: int) -> dict[str, Any]:
        first = self.client.get(url)
        assert first.status_code == 200, (url, first.status_code)
        times = []
        for _ in range(requests):
            start = time.perf_counter()
            response = self.client.get(url)
            times.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200
        return {
            "ms": round(statistics.median(times), 1),
            "spread_ms": [round(min(times), 1), round(max(times), 1)],
            "bytes": len(first.content),
            "text": first.text,
        }

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:  # a request the browser left (the grid's) still held it
            self.proc.kill()
            self.proc.wait(10)


def first_paint(url: str, loads: int) -> list[float]:
    """The job page's first contentful paint in Chromium, in a fresh page each load."""
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for _ in range(loads + 1):  # the first warms the browser's and the server's caches
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(url, wait_until="load")
                page.wait_for_function(
                    "performance.getEntriesByName('first-contentful-paint').length > 0"
                )
                out.append(
                    float(
                        page.evaluate(
                            "performance.getEntriesByName('first-contentful-paint')[0].startTime"
                        )
                    )
                )
                page.close()
        finally:
            browser.close()
    return [round(v, 1) for v in out[1:]]


def common_words() -> dict[str, str]:
    """A common, a middling and a rare word of the 10,000-trial job's vocabulary."""
    words = vocabulary(random.Random(11))  # the 10k job's seed: the same vocabulary
    return {"common": words[0], "middling": words[60], "rare": words[3000]}


def measure_pages(home: Path, jobs: Path, job: str, requests: int) -> dict[str, Any]:
    server = Server(home, jobs)
    out: dict[str, Any] = {}
    try:
        page = server.client.get(f"/jobs/{job}/", follow_redirects=True).url.path
        words = vocabulary(random.Random(7))
        urls = {
            "static_floor": "/static/viewer/live.js",
            "job_page": page,
            "trials_sorted_page": f"{page}trials/?sort=-cost&show=failed&page=300",
            "search": f"/search/?q={words[40]}",
            "search_rare": f"/search/?q={words[3000]}",
            "job_search": f"{page}?q={words[40]}",
        }
        for name, url in urls.items():
            got = server.median_ms(url, requests)
            out[name + "_ms"] = got["ms"]
            out[name + "_spread_ms"] = got["spread_ms"]
            out[name + "_bytes"] = got["bytes"]
            if name.startswith("search"):
                out[name + "_found"] = got["text"].split(" trial(s) found")[0].rsplit(">", 1)[-1]
        if os.path.exists(CHROMIUM):
            paints = first_paint(server.base + page, max(3, requests // 3))
            out["first_paint_ms"] = statistics.median(paints)
            out["first_paint_ms_loads"] = paints
    finally:
        server.stop()
    return out


# --- search at 10,000 trials of 20 calls -------------------------------------------------------------


def db_sizes(home: Path) -> dict[str, int]:
    """The index's bytes with its search and without it (copies, each VACUUMed)."""
    db = home / "benchflow.sqlite3"
    sizes = {}
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        for name, drop in (("with_search", False), ("without_search", True)):
            copy = Path(tmp) / f"{name}.sqlite3"
            source = sqlite3.connect(db)
            target = sqlite3.connect(copy)
            source.backup(target)
            source.close()
            if drop:
                target.execute("DROP TABLE runs_searchdoc_fts")
                target.execute("DELETE FROM runs_searchdoc")
                target.commit()
            target.execute("VACUUM")
            target.close()
            sizes[name] = copy.stat().st_size
    return sizes


def measure_search(root: Path, trials: int, calls: int, requests: int, runs: int) -> dict[str, Any]:
    jobs = root / "jobs"
    job = jobs / "2026-11-30__10-00-00"
    if not (job / "evaluation.json").exists():
        build_job(job, trials, calls, seed=11)
    home = root / "home"
    shutil.rmtree(home, ignore_errors=True)
    indexed = _index(job, home)
    sizes = db_sizes(home)
    words = common_words()
    out: dict[str, Any] = {
        "index_s": indexed["seconds"],
        "index_mb": indexed["peak_rss_mb"],
        "attempts": indexed["attempts"],
        "db_bytes_with_search": sizes["with_search"],
        "db_bytes_without_search": sizes["without_search"],
        "search_growth_x": round(sizes["with_search"] / sizes["without_search"], 2),
        "folder_text_bytes": sum(
            (p / "trajectory" / "llm_trajectory.jsonl").stat().st_size
            for p in job.iterdir()
            if (p / "trajectory").is_dir()
        ),
    }
    medians: dict[str, list[float]] = {k: [] for k in words}
    for _ in range(runs):
        server = Server(home, jobs)
        try:
            for kind, word in words.items():
                got = server.median_ms(f"/search/?q={word}", requests)
                medians[kind].append(got["ms"])
                out[f"search_{kind}_found"] = (
                    got["text"].split(" trial(s) found")[0].rsplit(">", 1)[-1]
                )
        finally:
            server.stop()
    for kind, values in medians.items():
        out[f"search_{kind}_ms"] = statistics.median(values)
        out[f"search_{kind}_ms_runs"] = values
    out["search_10k_ms"] = max(out[f"search_{k}_ms"] for k in words)
    return out


def measure_postgres(job_dir: str, url: str, requests: int) -> dict[str, Any]:
    """In this (fresh) process, on PostgreSQL: `bench index` of the 10,000-trial job, then
    `/search/`'s query and its page's hits (queries.search_jobs) for each word, the median of
    `requests` calls, and the tables' sizes with their indexes."""
    os.environ["DATABASE_URL"] = url
    os.environ["BENCHFLOW_HOME"] = tempfile.mkdtemp(prefix="hundredk-pg-")
    from benchflow_site.django_setup import setup_django

    setup_django()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    from runs.index.folder import index_job
    from viewer import queries

    start = time.perf_counter()
    index_job(Path(job_dir))
    out: dict[str, Any] = {"index_s": round(time.perf_counter() - start, 3)}
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
        cursor.execute(
            "SELECT relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r'"
        )
        sizes = dict(cursor.fetchall())
        cursor.execute(
            "SELECT pg_relation_size('runs_searchdoc'), pg_indexes_size('runs_searchdoc'), "
            "pg_relation_size('runs_searchdoc_body')"
        )
        heap, indexes, gin = cursor.fetchone()
    search_bytes = sizes.pop("runs_searchdoc", 0)
    out["search_word_bytes"] = sizes.pop("runs_searchword", 0)  # each word and its number, once
    search_bytes += out["search_word_bytes"]
    out["search_heap_bytes"] = heap  # the rows; the rest: TOAST, free-space maps
    out["search_toast_bytes"] = search_bytes - out["search_word_bytes"] - heap - indexes
    out["search_gin_bytes"] = gin
    out["search_other_index_bytes"] = indexes - gin  # the primary key's, attempt_id's
    rest = sum(sizes.values())
    out["db_bytes_without_search"] = rest
    out["search_bytes"] = search_bytes
    out["search_growth_x"] = round((rest + search_bytes) / rest, 2)
    for kind, word in common_words().items():
        queries.search_jobs(word, "", 1)
        times = []
        for _ in range(requests):
            t = time.perf_counter()
            found = queries.search_jobs(word, "", 1)
            times.append((time.perf_counter() - t) * 1000)
        out[f"search_{kind}_ms"] = round(statistics.median(times), 1)
        out[f"search_{kind}_found"] = found["total"]
    return out


def _postgres(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The PostgreSQL figures, each the median of `--runs` runs, every run in a fresh process on
    a fresh database (the URL's name with `_<run>` added, dropped after)."""
    job = root / "search" / "jobs" / "2026-11-30__10-00-00"
    if not (job / "evaluation.json").exists():
        build_job(job, args.search_trials, args.calls, seed=11)
    pgdb = [sys.executable, str(REPO / "scripts" / "pgdb.py")]
    runs = []
    for i in range(args.runs):
        url = f"{args.postgres}_{i}"
        subprocess.run([*pgdb, "create", url], check=True)
        try:
            got = subprocess.run(
                [sys.executable, __file__, "--_postgres", str(job), url, str(args.requests)],
                capture_output=True,
                text=True,
                check=True,
            )
        finally:
            subprocess.run([*pgdb, "drop", url], check=True)
        runs.append(dict(json.loads(got.stdout.strip().splitlines()[-1])))
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if key.endswith("_found"):
            out[key] = value
        else:
            out[key] = statistics.median(r[key] for r in runs)
            out[key + "_runs"] = [r[key] for r in runs]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--attempts", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=15)
    parser.add_argument("--search-trials", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--keep", help="build the folders here and keep them")
    parser.add_argument(
        "--postgres",
        help="also index the 10,000-trial job into PostgreSQL (a new database per run, named this "
        "URL's with _<run> added) and time the search's queries there",
    )
    parser.add_argument("--postgres-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--_index", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--_postgres", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._index:
        print(json.dumps(measure_index(*args._index)))
        return
    if args._postgres:
        job_dir, url, requests = args._postgres
        print(json.dumps(measure_postgres(job_dir, url, int(requests))))
        return
    root = Path(args.keep or tempfile.mkdtemp(prefix="hundredk-bench-"))
    out = REPO / "benchmarks" / "results" / "hundredk.json"
    if args.postgres_only:  # the PostgreSQL figures alone, added to the last results (--keep DIR)
        report = json.loads(out.read_text())
        report["figures"]["search_10k_postgres"] = _postgres(root, args)
        out.write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(report["figures"]["search_10k_postgres"], indent=2))
        return
    try:
        started = time.perf_counter()
        jobs = root / "big" / "jobs"
        job = jobs / "2026-11-29__11-00-00"
        if not (job / "evaluation.json").exists():
            build_job(job, args.attempts, 3, seed=7)
        built_s = round(time.perf_counter() - started, 1)
        runs = []
        for i in range(args.runs):
            home = root / "big" / f"home{i}"
            shutil.rmtree(home, ignore_errors=True)
            runs.append(_index(job, home))
        pages = [
            measure_pages(root / "big" / f"home{i}", jobs, job.name, args.requests)
            for i in range(args.runs)
        ]
        search = measure_search(
            root / "search", args.search_trials, args.calls, args.requests, args.runs
        )
        if args.postgres:
            search["postgres"] = _postgres(root, args)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    figures: dict[str, Any] = {
        "attempts": runs[0]["attempts"],
        "trials": runs[0]["trials"],
        "folder_built_s": built_s,
        "index_s": statistics.median(r["seconds"] for r in runs),
        "index_s_runs": [r["seconds"] for r in runs],
        "index_mb": statistics.median(r["peak_rss_mb"] for r in runs),
        "index_mb_runs": [r["peak_rss_mb"] for r in runs],
    }
    for key in pages[0]:
        values = [p[key] for p in pages]
        if key.endswith("_ms"):
            figures[key] = statistics.median(values)
            figures[key + "_runs"] = values
        elif key.endswith("_spread_ms"):
            figures[key] = [min(v[0] for v in values), max(v[1] for v in values)]
        else:
            figures[key] = values[0]
    figures["search_ms"] = max(figures["search_ms"], figures["search_rare_ms"])
    figures["search_10k"] = search
    figures["search_10k_ms"] = search["search_10k_ms"]
    figures["search_growth_x"] = search["search_growth_x"]
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "targets": TARGETS,
        "figures": figures,
        "met": {k: figures[k] <= v for k, v in TARGETS.items() if k in figures},
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
