"""A viewer's requests on an attempt an agent filled to exhaust the server, against the server's
memory: the resident set of a real `bench serve` (daphne) before and at its peak.

    .venv/bin/python benchmarks/viewer_memory_bench.py [--runs 3] [--big-mb 150] [--tree DIR]

The attempt (issue 28, hole 5): agent/sessions/empty.jsonl, 10 MB of empty lines; 1,500 files of
64 KiB under agent/ (shown open on the trial page when they fit); artifacts/big.bin, 150 MB. A
viewer logged in over HTTP asks for the trial page and every page of its file listing, the log's
first, middle and last pages (each a new line index), and the 150 MB file read slowly (a socket
with a 64 KB receive buffer, 256 KB then a 10 ms pause: about 25 MB/s). The baseline is the same
requests on a plain attempt (its log 10 lines, 3 small files, a 1 MB file) in the same run.

The figure is the peak rise: VmHWM (the process's peak resident set) after the requests minus
VmRSS before them (the server warmed up on the jobs list and the job's page, which read no
attempt folder), each round on a fresh server, median and range of the rounds. Target: under
100 MB. `--tree DIR` serves from another checkout (the code before a change, say). Also recorded: the largest page (target under 2 MB) and the server's bytes read (rchar)
against the bytes sent while the slow client read. Writes benchmarks/results/viewer_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
PASSWORD = "bench-viewer-memory-pw-1"
TARGET_MB = 100.0
PAGE_TARGET = 2_000_000
JOB = "2026-12-04__12-00-00"


def _bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "benchflow_site.cli", *args]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def make_attempt(jobs: Path, nasty: bool, big_mb: int) -> tuple[str, str]:
    """A job with one trial whose one attempt is the nasty one (or a plain one); returns (trial,
    rollout)."""
    job = jobs / JOB
    rollout = "flood__a1b2c3d4"
    folder = job / rollout
    for sub in ("agent/sessions", "verifier", "artifacts"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (job / "evaluation.json").write_text(
        json.dumps({"agent": "oracle", "model": None, "tasks_dir": "tasks", "plan": ["flood"]})
    )
    (folder / "config.json").write_text(json.dumps({"task_name": "flood", "trial_name": "flood"}))
    result = {
        "task_name": "flood",
        "trial_name": "flood",
        "rollout_name": rollout,
        "trial_index": 0,
        "attempt": 1,
        "rewards": {"reward": 1.0},
        "agent": "oracle",
        "started_at": "2026-12-04T12:00:00.000",
        "finished_at": "2026-12-04T12:00:30.000",
    }
    (folder / "result.json").write_text(json.dumps(result))
    log = folder / "agent" / "sessions" / "empty.jsonl"
    big = folder / "artifacts" / "big.bin"
    if nasty:
        log.write_bytes(b"\n" * 10_000_000)
        block = (b'<"&' * 22_000)[: 64 * 1024]
        for i in range(1500):
            (folder / "agent" / f"out-{i:04d}.txt").write_bytes(block)
        size = big_mb << 20
    else:
        log.write_text("".join(json.dumps({"type": "user", "n": i}) + "\n" for i in range(10)))
        for i in range(3):
            (folder / "agent" / f"out-{i}.txt").write_text("hello\n")
        size = 1 << 20
    with big.open("wb") as fh:
        chunk = os.urandom(1 << 20)
        for _ in range(size >> 20):
            fh.write(chunk)
    (job / "summary.json").write_text(json.dumps({"job_name": JOB, "passed": 1}))
    return "flood", rollout


def _status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            name, value = line.split(":", 1)
            fields[name] = int(value.split()[0]) * 1024
    return fields


def _rchar(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


class Server:
    def __init__(self, root: Path, jobs: Path, tree: Path):
        self.env = {
            **os.environ,
            "BENCHFLOW_HOME": str(root / "home"),
            "BENCHFLOW_PASSWORD": PASSWORD,
            "PYTHONPATH": str(tree),
        }
        self.env.pop("DATABASE_URL", None)
        # `python -m` puts the working folder first on sys.path: the tree's own code is served
        subprocess.run(
            _bench("user", "add", "viewer", "--role", "viewer"), env=self.env, cwd=tree, check=True
        )
        self.port = _free_port()
        self.log = (root / "server.log").open("w")
        self.proc = subprocess.Popen(
            _bench("serve", "--port", str(self.port), "--index", str(jobs)),
            env=self.env,
            cwd=tree,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                httpx.get(self.base + "/login/", timeout=2)
                break
            except httpx.HTTPError:
                if self.proc.poll() is not None:
                    raise RuntimeError("bench serve exited") from None
                time.sleep(0.2)
        self.http = httpx.Client(base_url=self.base, timeout=60)
        self.http.get("/login/")
        answer = self.http.post(
            "/login/",
            data={
                "username": "viewer",
                "password": PASSWORD,
                "csrfmiddlewaretoken": self.http.cookies["csrftoken"],
            },
        )
        assert answer.status_code in (200, 302), answer.status_code
        assert "sessionid" in self.http.cookies, "not logged in"

    def stop(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def slow_read(server: Server, path: str) -> dict[str, int]:
    """GET `path` on a socket with a small receive buffer, read 256 KB then pause 10 ms; returns
    the bytes received and the most the server had read from disk beyond them at any time."""
    cookie = "; ".join(f"{k}={v}" for k, v in server.http.cookies.items())
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nCookie: {cookie}\r\n"
        "Connection: close\r\n\r\n".encode()
    )
    start = _rchar(server.proc.pid)
    received = lead = 0
    while True:
        got = 0
        while got < 256 * 1024:
            block = sock.recv(65536)
            if not block:
                break
            got += len(block)
        received += got
        lead = max(lead, _rchar(server.proc.pid) - start - received)
        if got < 256 * 1024:
            break
        time.sleep(0.01)
    sock.close()
    return {"received": received, "read_ahead_max": lead}


def one_round(nasty: bool, big_mb: int, tree: Path) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="viewer-mem-"))
    try:
        jobs = root / "jobs"
        trial, rollout = make_attempt(jobs, nasty, big_mb)
        server = Server(root, jobs, tree)
        try:
            # the process warmed up on pages that read no attempt folder: templates, the ORM
            server.http.get("/")
            server.http.get(f"/jobs/{JOB}/")
            before = _status(server.proc.pid)
            pages: list[int] = []
            first = server.http.get(f"/jobs/{JOB}/{trial}/")
            pages.append(len(first.content))
            count = re.search(r"page 1 of (\d+)", first.text)
            for n in range(2, int(count.group(1)) + 1 if count else 1):
                pages.append(
                    len(server.http.get(f"/jobs/{JOB}/{trial}/", params={"files": n}).content)
                )
            base = f"/jobs/{JOB}/{trial}/{rollout}"
            for page in (1, 100_000, 10**9):
                log = server.http.get(
                    f"{base}/log/", params={"path": "agent/sessions/empty.jsonl", "page": page}
                )
                pages.append(len(log.content))
            read = slow_read(server, f"{base}/files/artifacts/big.bin")
            after = _status(server.proc.pid)
        finally:
            server.stop()
        return {
            "rss_before_mb": before["VmRSS"] / 1e6,
            "peak_rise_mb": (after["VmHWM"] - before["VmRSS"]) / 1e6,
            "rss_after_rise_mb": (after["VmRSS"] - before["VmRSS"]) / 1e6,
            "largest_page_bytes": max(pages),
            "pages": len(pages),
            **read,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--big-mb", type=int, default=150)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout to serve from")
    args = parser.parse_args()
    rounds: dict[str, list[dict[str, Any]]] = {"plain": [], "flood": []}
    for n in range(args.runs):
        for kind in ("plain", "flood"):
            measured = one_round(kind == "flood", args.big_mb, args.tree.resolve())
            rounds[kind].append(measured)
            print(f"round {n + 1} {kind}: {json.dumps(measured)}", flush=True)
    summary: dict[str, Any] = {}
    for kind, found in rounds.items():
        rises = [r["peak_rise_mb"] for r in found]
        summary[kind] = {
            "peak_rise_mb_median": round(statistics.median(rises), 1),
            "peak_rise_mb_range": [round(min(rises), 1), round(max(rises), 1)],
            "largest_page_bytes": max(r["largest_page_bytes"] for r in found),
            "read_ahead_max_bytes": max(r["read_ahead_max"] for r in found),
        }
    flood = summary["flood"]
    print(
        f"peak rise: flood {flood['peak_rise_mb_median']} MB {flood['peak_rise_mb_range']}, "
        f"plain {summary['plain']['peak_rise_mb_median']} MB (target under {TARGET_MB:g} MB); "
        f"largest page {flood['largest_page_bytes']:,} bytes (target under {PAGE_TARGET:,}); "
        f"read ahead of the slow client at most {flood['read_ahead_max_bytes'] / 1e6:.1f} MB"
    )
    name = "viewer_memory.json" if args.tree.resolve() == REPO else "viewer_memory_tree.json"
    out = REPO / "benchmarks" / "results" / name
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": platform.node(),
                "cpus": os.cpu_count(),
                "big_mb": args.big_mb,
                "tree": str(args.tree.resolve()),
                "summary": summary,
                "rounds": rounds,
            },
            indent=2,
        )
        + "\n"
    )
    ok = flood["peak_rise_mb_median"] < TARGET_MB and flood["largest_page_bytes"] < PAGE_TARGET
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
