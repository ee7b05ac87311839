"""The live path: a trial finishing in `bench run` to the change on the page, with 50 websocket
clients, on SQLite (the server's watch of the Event table), on Redis (channels-redis), and under
`bench serve` (a login: every client a logged-in user's session, Redis).

    .venv/bin/python benchmarks/live_bench.py [--clients 50] [--procs 5] [--trials 30] [--runs 3]
                                              [--modes sqlite,redis,serve]

Each round starts the server (`bench view`, or `bench serve`) on a fresh index, and a writer
process that is what `bench run` runs: runs.index.Index, its one writer thread, opening a job and
starting and finishing trials one by one (a trial every GAP_S). The clients are real websocket
clients (the `websockets` package) on the job page's socket, spread over --procs processes so
that the load generator's own queue is not what is measured; each does what the page's
static/viewer/live.js does: on a hint it fetches the page's live response over HTTP (one raw
keep-alive HTTP/1.1 GET with the hint's sequence number in X-Bench-Seq, `?parts=finished` after
a finished trial), at once, and a hint arriving while its request is out makes one more request
when it returns. The latency of one (trial, client) is from the moment the writer is handed the
finished result (`Index.attempt_finished`, as the runner calls it) to the moment that client has
a response made for that trial's finish (asked with its sequence number or a later one).
p50/p95/max over every (trial, client); medians over rounds. Each round also reports the CPU each
process used per trial and how busy the machine's cores were (others' work included).
Target: p95 under 250 ms on each. Writes benchmarks/results/live.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runs.events import FINISHED_KINDS, AttemptFinished  # noqa: E402

TARGET_P95_MS = 250.0
# a database number of its own (the scale-out tests use 12): channels' group names are by job id,
# and ids repeat across the indexes of processes sharing a Redis database
REDIS_URL = "redis://127.0.0.1:6379/13"
GAP_S = float(os.environ.get("LIVE_BENCH_GAP_S", "1.0"))
JOB = "2026-12-02__12-00-00"


def writer(home: str, jobs: str, trials: int, sessions: int, out: str) -> None:
    """The `bench run` side: open a job (and, for `bench serve`, log in `sessions` users), wait for
    'go' on stdin, then start and finish trials one by one."""
    os.environ["BENCHFLOW_HOME"] = home
    from benchflow_site.django_setup import setup_django

    setup_django()
    from runs import events as ev
    from runs.index import Index
    from runs.results.trial_result import TrialResult

    index = Index()
    job_dir = Path(jobs) / JOB
    job_dir.mkdir(parents=True, exist_ok=True)
    names = [f"task-{i:03d}" for i in range(trials)]
    settings = {"agent": "oracle", "plan": names, "trials": 1}
    index(ev.JobStarted(job_dir.name, str(job_dir), settings, trials, 0, trials, 1, 0))
    index.flush()
    print(json.dumps(_log_in(sessions)), flush=True)
    sys.stdin.readline()
    sent: dict[str, float] = {}
    committed: dict[str, float] = {}
    for i, name in enumerate(names):
        rollout = f"{name}__{i:08x}"
        index(ev.AttemptStarted(name, name, 0, 1, rollout))
        time.sleep(GAP_S / 2)
        document = {
            "task_name": name,
            "trial_name": name,
            "trial_index": 0,
            "rollout_name": rollout,
            "attempt": 1,
            "rewards": {"reward": 1.0},
            "agent_result": {"total_tokens": 100, "cost_usd": 0.001},
            "timing": {"total": 1.0},
            "agent": "oracle",
            "agent_name": "oracle",
            "model": None,
            "started_at": datetime.now().isoformat(),
        }
        finished = ev.AttemptFinished(name, rollout, TrialResult.from_json(document))
        sent[name] = time.time()
        index(finished)
        # the writer thread runs this right after the finish's transaction committed
        index.after(partial(_stamp, committed, name))
        time.sleep(GAP_S / 2)
    index.close()
    Path(out).write_text(json.dumps({"sent": sent, "committed": committed}))


def _stamp(stamps: dict[str, float], name: str) -> None:
    stamps[name] = time.time()


def _log_in(n: int) -> list[str]:
    """n users of the viewer role, each with a session as Django's login() makes it (the
    password step skipped: its hashing is not what is measured)."""
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import (
        BACKEND_SESSION_KEY,
        HASH_SESSION_KEY,
        SESSION_KEY,
        get_user_model,
    )

    from runs.operations.roles import VIEWER, ensure_roles

    group = ensure_roles()[VIEWER]
    keys = []
    for i in range(n):
        user = get_user_model().objects.create(username=f"bench-{i}")
        user.groups.add(group)
        session = import_module(settings.SESSION_ENGINE).SessionStore()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session.create()
        keys.append(str(session.session_key))
    return keys


class RawHttp:
    """One keep-alive HTTP/1.1 connection, as a browser tab holds: a GET costs this benchmark's
    process a few tens of microseconds, where httpx's client cost 3-5 ms."""

    def __init__(self, host: str, port: int, cookie: str):
        self.host, self.port, self.cookie = host, port, cookie
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str, seq: int) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nHX-Request: true\r\n"
        if seq:
            head += f"X-Bench-Seq: {seq}\r\n"
        if self.cookie:
            head += f"Cookie: {self.cookie}\r\n"
        self.writer.write((head + "\r\n").encode())
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status = int(raw.split(b" ", 2)[1])
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (line.partition(b":") for line in raw.split(b"\r\n")[1:] if line)
        }
        if b"content-length" in headers:
            body = await self.reader.readexactly(int(headers[b"content-length"]))
        else:  # chunked
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(chunk[:-2])
            body = b"".join(parts)
        return status, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class Page:
    """One open job page: its socket, and its live requests as static/viewer/live.js makes them."""

    def __init__(self, port: int, cookie: str, job_path: str):
        self.port, self.cookie, self.job_path = port, cookie, job_path
        self.http = RawHttp("127.0.0.1", port, cookie)
        self.seq = 0
        self.out = False
        self.wanted = ""
        self.hints: dict[str, tuple[float, int]] = {}  # finished trial -> (hint received, seq)
        self.seen: dict[str, float] = {}  # finished trial -> a response for it received
        self.requests = 0
        self.failed: list[str] = []

    async def run(self, connected: asyncio.Event, stop: asyncio.Event) -> None:
        import websockets

        headers = {"Cookie": self.cookie} if self.cookie else None
        async with websockets.connect(
            f"ws://127.0.0.1:{self.port}/ws{self.job_path}",
            origin=f"http://127.0.0.1:{self.port}",  # type: ignore[arg-type]
            additional_headers=headers,
        ) as ws:
            connected.set()
            while not stop.is_set():
                try:
                    raw = await asyncio.wait_for(ws.recv(), timeout=0.5)
                except TimeoutError:
                    continue
                hint = json.loads(raw)
                self.seq = max(self.seq, hint["seq"])
                finished = hint["kind"] in FINISHED_KINDS
                if hint["kind"] == AttemptFinished.kind:
                    self.hints[hint["trial"]] = (time.time(), hint["seq"])
                self.wanted = "finished" if finished or self.wanted == "finished" else "changed"
                if not self.out:
                    self.ask()
        self.http.close()

    def ask(self) -> None:
        seq, parts = self.seq, self.wanted
        self.out, self.wanted = True, ""
        asyncio.get_running_loop().create_task(self._ask(seq, parts))

    async def _ask(self, seq: int, parts: str) -> None:
        path = f"{self.job_path}live/" + ("?parts=finished" if parts == "finished" else "")
        try:
            status, _ = await self.http.get(path, seq)
        except (OSError, asyncio.IncompleteReadError) as exc:
            self.failed.append(repr(exc))
            return
        now = time.time()
        self.requests += 1
        if status != 200:
            self.failed.append(f"{path}: {status}")
        for trial, (_, hint_seq) in self.hints.items():
            if hint_seq <= seq and trial not in self.seen:
                self.seen[trial] = now
        self.out = False
        if self.wanted:
            self.ask()


def job_path(port: int, cookie: str) -> str:
    """The job page's path as the server names the job (a checkout whose URLs name a job by name~id
    redirects the name to it), found once so that no measured request is a redirect."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", f"/jobs/{JOB}/", headers={"Cookie": cookie} if cookie else {})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response.getheader("Location") or f"/jobs/{JOB}/"


def clients(port: int, cookies: list[str]) -> None:
    """A client process: its pages connect, it says 'connected', runs until 'stop' on stdin, then
    prints what each page saw."""

    async def main() -> None:
        where = job_path(port, cookies[0])
        pages = [Page(port, cookie, where) for cookie in cookies]
        stop = asyncio.Event()
        connected = [asyncio.Event() for _ in pages]
        tasks = [asyncio.create_task(p.run(c, stop)) for p, c in zip(pages, connected, strict=True)]
        for event, task in zip(connected, tasks, strict=True):
            while not event.is_set():
                if task.done():
                    task.result()
                await asyncio.sleep(0.02)
        print("connected", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        stop.set()
        await asyncio.gather(*tasks)
        print(
            json.dumps(
                [
                    {"hints": p.hints, "seen": p.seen, "requests": p.requests, "failed": p.failed}
                    for p in pages
                ]
            ),
            flush=True,
        )

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / os.sysconf("SC_CLK_TCK"), sum(values) / os.sysconf("SC_CLK_TCK")


def _spawn(args: list[str], env: dict[str, str], **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *args], env=env, cwd=REPO, text=True, stdin=subprocess.PIPE, **kwargs
    )


def one_round(mode: str, n_clients: int, procs: int, trials: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="live-bench-") as tmp:
        home, jobs, out = f"{tmp}/home", f"{tmp}/jobs", f"{tmp}/sent.json"
        Path(jobs).mkdir()
        env = {**os.environ, "BENCHFLOW_HOME": home}
        for name in ("DATABASE_URL", "BENCHFLOW_REDIS_URL", "BENCHFLOW_LOGIN_REQUIRED"):
            env.pop(name, None)
        if mode in ("redis", "serve"):
            env["BENCHFLOW_REDIS_URL"] = REDIS_URL
        sessions = n_clients if mode == "serve" else 0
        w = _spawn(
            [__file__, "--_writer", home, jobs, str(trials), str(sessions), out],
            env,
            stdout=subprocess.PIPE,
        )
        assert w.stdout is not None and w.stdin is not None
        keys = json.loads(w.stdout.readline())
        cookies = [f"sessionid={k}" for k in keys] or [""] * n_clients
        port = _free_port()
        command = ["serve"] if mode == "serve" else ["view", jobs, "--no-browser"]
        server = _spawn(
            ["-m", "benchflow_site.cli", *command, "--port", str(port)],
            env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        pool: list[subprocess.Popen[str]] = []
        try:
            _wait_for(port)
            share = [cookies[i::procs] for i in range(procs)]
            pool = [
                _spawn(
                    [__file__, "--_clients", str(port), json.dumps(part)],
                    env,
                    stdout=subprocess.PIPE,
                )
                for part in share
                if part
            ]
            for p in pool:
                assert p.stdout is not None and p.stdout.readline().strip() == "connected"
            time.sleep(0.5)
            pids = {
                "server": server.pid,
                "writer": w.pid,
                **{f"c{i}": p.pid for i, p in enumerate(pool)},
            }
            cpu0 = {k: _cpu_s(pid) for k, pid in pids.items()}
            busy0 = _machine_busy()
            w.stdin.write("go\n")
            w.stdin.flush()
            cpu1 = {k: _cpu_s(pid) for k, pid in pids.items() if k != "writer"}
            while w.poll() is None:
                cpu1["writer"] = _cpu_s(w.pid)
                time.sleep(0.05)
            time.sleep(1.0)
            cpu1.update({k: _cpu_s(pid) for k, pid in pids.items() if k != "writer"})
            busy1 = _machine_busy()
            pages = []
            for p in pool:
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write("stop\n")
                p.stdin.flush()
                pages.extend(json.loads(p.stdout.readline()))
            written = json.loads(Path(out).read_text())
        finally:
            for p in [*pool, server]:
                p.terminate()
                p.wait(10)
            if w.poll() is None:
                w.kill()
    return _figures(mode, pages, written, n_clients, trials, cpu0, cpu1, busy0, busy1)


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _pct(values: list[float], q: float) -> float:
    return round(values[int(q * (len(values) - 1))], 1)


def _figures(
    mode: str,
    pages: list[dict[str, Any]],
    written: dict[str, dict[str, float]],
    n_clients: int,
    trials: int,
    cpu0: dict[str, float],
    cpu1: dict[str, float],
    busy0: tuple[float, float],
    busy1: tuple[float, float],
) -> dict[str, Any]:
    sent = written["sent"]
    commits = sorted((t - sent[n]) * 1000 for n, t in written["committed"].items())
    latencies = sorted(
        (t - sent[n]) * 1000 for p in pages for n, t in p["seen"].items() if n in sent
    )
    hints = sorted(
        (t - sent[n]) * 1000 for p in pages for n, (t, _) in p["hints"].items() if n in sent
    )
    failed = [f for p in pages for f in p["failed"]]
    clients_cpu = sum(cpu1[k] - cpu0[k] for k in cpu0 if k.startswith("c"))
    busy, total = busy1[0] - busy0[0], busy1[1] - busy0[1]
    ours = sum(cpu1[k] - cpu0[k] for k in cpu0)
    return {
        "mode": mode,
        "samples": f"{len(latencies)}/{n_clients * trials}",
        "failed": failed[:5],
        "p50_ms": round(statistics.median(latencies), 1),
        "p95_ms": _pct(latencies, 0.95),
        "max_ms": round(latencies[-1], 1),
        "commit_p50_ms": round(statistics.median(commits), 1),
        "hint_p50_ms": round(statistics.median(hints), 1),
        "hint_p95_ms": _pct(hints, 0.95),
        "requests_per_client_per_trial": round(
            sum(p["requests"] for p in pages) / (n_clients * trials), 2
        ),
        "cpu_ms_per_trial": {
            "server": round((cpu1["server"] - cpu0["server"]) * 1000 / trials, 1),
            "writer": round((cpu1["writer"] - cpu0["writer"]) * 1000 / trials, 1),
            "clients": round(clients_cpu * 1000 / trials, 1),
        },
        "machine_busy": f"{busy / total:.0%}" if total else "-",
        "others_cpu_s": round(max(0.0, busy - ours), 1),
        # cores the machine's other work held during the round, of os.cpu_count()
        "others_cores": round(max(0.0, busy - ours) / (total / (os.cpu_count() or 1)), 2)
        if total
        else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--procs", type=int, default=5, help="client processes")
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="sqlite,redis,serve")
    parser.add_argument("--_writer", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--_clients", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._writer:
        home, jobs, trials, sessions, out = args._writer
        writer(home, jobs, int(trials), int(sessions), out)
        return
    if args._clients:
        clients(int(args._clients[0]), json.loads(args._clients[1]))
        return
    figures: dict[str, Any] = {}
    for mode in args.modes.split(","):
        rounds = []
        for _ in range(args.runs):
            rounds.append(one_round(mode, args.clients, args.procs, args.trials))
            print(json.dumps(rounds[-1]), flush=True)
        figures[mode] = {
            "p50_ms": statistics.median(r["p50_ms"] for r in rounds),
            "p95_ms": statistics.median(r["p95_ms"] for r in rounds),
            "p95_ms_runs": [r["p95_ms"] for r in rounds],
            "max_ms": max(r["max_ms"] for r in rounds),
            "hint_p50_ms": statistics.median(r["hint_p50_ms"] for r in rounds),
            "hint_p95_ms": statistics.median(r["hint_p95_ms"] for r in rounds),
            "rounds": rounds,
        }
        print(mode, {k: v for k, v in figures[mode].items() if k != "rounds"}, flush=True)
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "clients": args.clients,
        "client_processes": args.procs,
        "trials": args.trials,
        "target_p95_ms": TARGET_P95_MS,
        "figures": figures,
    }
    (REPO / "benchmarks" / "results" / "live.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
