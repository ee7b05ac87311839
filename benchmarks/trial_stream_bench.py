"""The trial page of a 2,000-call trial: how soon Chromium paints its first screen, and what each
later page of its event stream costs, against the same page of a trial with no model calls.

    .venv/bin/python benchmarks/trial_stream_bench.py [--calls 2000] [--runs 7] [--session-log]

The trial's trajectory/llm_trajectory.jsonl is shaped as an agent's: each call sends the whole
conversation so far (a prompt, then the thinking, tool call and result of every step before it),
so the file grows with the square of the calls (about 330 MB at 2,000). With --session-log the
trial also has Claude Code's own session log of the same calls (agent/sessions/-app/s1.jsonl), so
the stream is the log with the proxy's calls merged in. A real `bench view` serves it. Measured, each the median of --runs rounds on a warm server:
- first paint: Chromium's first-contentful-paint of the trial page, and the time until its first
  event (#e1) is in the page (target: under 500 ms);
- the server's time for the page (whole HTML), beside the same page of a trial with no calls;
- every later page of the stream, followed from the first by its cursor: median and slowest.
Writes benchmarks/results/trial_stream.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
TARGET_MS = 500.0
JOB = "2026-12-04__12-00-00"
CHROMIUM = "/usr/bin/chromium"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _stamp(seconds: int) -> str:
    return f"2026-12-04T12:{seconds // 60 % 60:02d}:{seconds % 60:02d}+00:00"


def write_session_log(path: Path, calls: int) -> None:
    """Claude Code's log of the same conversation: the prompt, then each call's reply (its message
    id as the proxy saw it) and its tool's result."""
    path.parent.mkdir(parents=True, exist_ok=True)

    def entry(kind: str, n: int, content: object, **message: object) -> str:
        doc = {"type": kind, "sessionId": "s1", "isSidechain": False, "timestamp": _stamp(n)}
        return json.dumps({**doc, "message": {"role": kind, "content": content, **message}})

    usage = {"input_tokens": 1, "output_tokens": 1}
    with path.open("w") as out:
        out.write(entry("user", 0, "fix the failing test in src/") + "\n")
        for n in range(calls):
            reply = [
                {"type": "thinking", "thinking": f"step {n}: look at the next file"},
                {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"cmd": f"cat f{n}"}},
            ]
            out.write(entry("assistant", n, reply, id=f"msg_{n}", usage=usage) + "\n")
            result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"line {n}\n" * 3}
            out.write(entry("user", n, [result]) + "\n")


def write_trajectory(path: Path, calls: int) -> int:
    """A conversation of `calls` calls, each request holding all before it; returns its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sent: list[str] = [json.dumps({"role": "user", "content": "fix the failing test in src/"})]
    with path.open("w") as out:
        for n in range(calls):
            reply = [
                {"type": "thinking", "thinking": f"step {n}: look at the next file"},
                {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"cmd": f"cat f{n}"}},
            ]
            line = {
                "started_at": _stamp(n),
                "duration_s": 0.8,
                "model": "claude-bench",
                "protocol": "messages",
                "status": 200,
                "usage": {"input_tokens": 1000 + n, "output_tokens": 40},
                "request": "@@",
                "response": {"id": f"msg_{n}", "content": reply},
            }
            request = '{"system": "You are a careful engineer.", "messages": [' + ", ".join(sent)
            out.write(json.dumps(line).replace('"@@"', request + "]}") + "\n")
            sent.append(json.dumps({"role": "assistant", "content": reply}))
            result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"line {n}\n" * 3}
            sent.append(json.dumps({"role": "user", "content": [result]}))
    return path.stat().st_size


def make_job(jobs: Path, calls: int, session_log: bool = False) -> int:
    job = jobs / JOB
    plan = ["long", "empty"]
    (job).mkdir(parents=True)
    (job / "evaluation.json").write_text(
        json.dumps({"agent": "claude", "model": None, "tasks_dir": "tasks", "plan": plan})
    )
    size = 0
    for task in plan:
        rollout = f"{task}__a1b2c3d4"
        folder = job / rollout
        (folder / "verifier").mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"task_name": task, "trial_name": task}))
        result = {
            "task_name": task,
            "trial_name": task,
            "rollout_name": rollout,
            "trial_index": 0,
            "attempt": 1,
            "rewards": {"reward": 1.0},
            "agent": "claude",
            "started_at": "2026-12-04T12:00:00.000",
            "finished_at": "2026-12-04T12:40:00.000",
        }
        (folder / "result.json").write_text(json.dumps(result))
        if task == "long":
            size = write_trajectory(folder / "trajectory/llm_trajectory.jsonl", calls)
            if session_log:
                write_session_log(folder / "agent/sessions/-app/s1.jsonl", calls)
    return size


def paint(base: str, path: str, runs: int) -> tuple[list[float], list[float]]:
    from playwright.sync_api import sync_playwright

    fcp: list[float] = []
    first: list[float] = []
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        for _ in range(runs + 1):  # the first warms the server and the browser's cache
            page = browser.new_page()
            start = time.perf_counter()
            page.goto(base + path, wait_until="commit")
            page.wait_for_selector("#e1", state="attached")
            until_event = (time.perf_counter() - start) * 1000
            page.wait_for_load_state("load")
            painted = page.evaluate(
                """() => new Promise(done => new PerformanceObserver(list => {
                    const e = list.getEntriesByName('first-contentful-paint')[0];
                    if (e) done(e.startTime);
                }).observe({type: 'paint', buffered: true}))"""
            )
            page.close()
            fcp.append(float(painted))
            first.append(until_event)
        browser.close()
    return fcp[1:], first[1:]


def timed_get(client: httpx.Client, url: str) -> tuple[float, str]:
    start = time.perf_counter()
    response = client.get(url)
    response.raise_for_status()
    return (time.perf_counter() - start) * 1000, response.text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--session-log", action="store_true", help="with Claude Code's log too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as tmp:
        root = Path(tmp)
        size = make_job(root / "jobs", args.calls, args.session_log)
        port = _free_port()
        env = {**os.environ, "BENCHFLOW_HOME": str(root / "home"), "PYTHONPATH": str(REPO)}
        env.pop("DATABASE_URL", None)
        with (root / "server.log").open("w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "benchflow_site.cli", "view", "jobs"]
                + ["--port", str(port), "--no-browser"],
                cwd=root,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(timeout=120) as client:
                for _ in range(600):
                    try:
                        client.get(base + "/")
                        break
                    except httpx.TransportError:
                        time.sleep(0.1)
                key = re.search(r'href="/jobs/([^/"]+)/"', client.get(base + "/").text)
                assert key, "the job is not listed"
                job = key.group(1)
                long_page, empty_page = f"/jobs/{job}/long/", f"/jobs/{job}/empty/"
                server: dict[str, list[float]] = {"long": [], "empty": []}
                for _ in range(args.runs + 1):
                    server["long"].append(timed_get(client, base + long_page)[0])
                    server["empty"].append(timed_get(client, base + empty_page)[0])
                html = timed_get(client, base + long_page)[1]
                pages: list[float] = []
                events = html.count('<details class="ev ')
                while found := re.search(r'class="more" data-url="([^"]+)"', html):
                    took, html = timed_get(client, base + found.group(1).replace("&amp;", "&"))
                    pages.append(took)
                    events += html.count('<details class="ev ')
            fcp, first_event = paint(base, long_page, args.runs)
        finally:
            proc.terminate()
            proc.wait(10)
    report = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "calls": args.calls,
        "trajectory_bytes": size,
        "session_log": args.session_log,
        "events": events,
        "runs": args.runs,
        "target_ms": TARGET_MS,
        "first_contentful_paint_ms": {"median": statistics.median(fcp), "all": fcp},
        "first_event_in_page_ms": {"median": statistics.median(first_event), "all": first_event},
        "server_page_ms": {k: statistics.median(v[1:]) for k, v in server.items()},
        "later_pages": {
            "count": len(pages),
            "median_ms": statistics.median(pages) if pages else None,
            "max_ms": max(pages) if pages else None,
        },
    }
    name = "trial_stream_session.json" if args.session_log else "trial_stream.json"
    out = REPO / "benchmarks" / "results" / name
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
