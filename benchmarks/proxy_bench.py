"""Proxy overhead benchmark: direct vs through the proxy, against a fast fake provider.

Run: .venv/bin/python benchmarks/proxy_bench.py [--runs 5] [--n 10000]
Prints a table and writes benchmarks/results/proxy.json. Traffic stays on 127.0.0.1.

The processes: a fake provider (benchmarks/proxy_upstream.py), two proxies (ProxyServer,
with and without budgets on their keys, logging every exchange as in a real run;
BENCH_NO_LOG=1 turns the log off to see its cost; each point's log is counted and
deleted after it, see take_lines), a bare pass-through
(benchmarks/proxy_passthrough.py, the ceiling for any proxy built from the same server and
client) and, per point, a load generator. The load generator is the proxy's own
asyncio+httptools client, the same for every target; httpx was not used because its
connection pool, not the servers, becomes the bottleneck at c=32.
Wall-clock figures depend on what else the machine runs; the proxy's CPU time per
request (from /proc) is steadier, and is what the budget-cost column compares. The load
generator's and the provider's CPU per call are counted too: with the two cores busy, the
throughput ratio follows the CPU a call costs the three processes together.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
KINDS: dict[str, tuple[str, str, dict[str, Any]]] = {  # kind -> (path, key name, body)
    "chat": ("/v1/chat/completions", "openai", {"stream": False}),
    "chat_stream": (
        "/v1/chat/completions",
        "openai",
        {"stream": True, "stream_options": {"include_usage": True}},
    ),
    "responses_stream": ("/v1/responses", "openai", {"stream": True}),
    "messages_stream": ("/v1/messages", "anthropic", {"stream": True}),
}
KEYS = {
    "openai": "bf-bench-openai-key-0123456789abcdef",
    "anthropic": "bf-bench-anthropic-key-0123456789abcdef",
}
TARGETS: dict[str, float] = {
    "added_p50_ms": 1.5,
    "added_p50_ms_stream": 3.0,
    "ratio_c32": 0.50,
    "ratio_c32_stream": 0.35,
    "rss_mb": 120.0,
}


def request_body(kind: str) -> bytes:
    path, who, extra = KINDS[kind]
    model = "claude-sonnet-4-5" if who == "anthropic" else "bench-model"
    body: dict[str, Any] = {"model": model, **extra}
    text = "Summarise the benchmark task in one line. " * 20  # about 1 KB, as a small turn
    if kind.startswith("responses"):
        body["input"] = text
    else:
        body["messages"] = [{"role": "user", "content": text}]
        body["max_tokens"] = 256
    return json.dumps(body).encode()


# -- roles run in child processes --------------------------------------------------------


async def load(url: str, kind: str, conc: int, n: int, key: str) -> dict[str, Any]:
    """conc workers, each on its own keep-alive connection, n requests in all."""
    sys.path.insert(0, str(ROOT))
    from proxy.upstream import UpstreamClient

    path, who, _ = KINDS[kind]
    body = request_body(kind)
    headers = [(b"content-type", b"application/json"), (b"authorization", f"Bearer {key}".encode())]
    if who == "anthropic":
        headers = [
            (b"content-type", b"application/json"),
            (b"x-api-key", key.encode()),
            (b"anthropic-version", b"2023-06-01"),
        ]
    client = UpstreamClient(read_timeout=30.0)
    lat: list[float] = []

    async def one(record: bool) -> None:
        t0 = time.perf_counter()
        resp = await client.post(url + path, headers, body)
        async for _ in resp.batches():
            pass
        if resp.status != 200:
            raise SystemExit(f"HTTP {resp.status} from {url}{path}")
        if record:
            lat.append(time.perf_counter() - t0)

    async def worker(count: int, record: bool) -> None:
        for _ in range(count):
            await one(record)

    warm = max(200 // conc, 5)
    await asyncio.gather(*(worker(warm, False) for _ in range(conc)))
    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker(n // conc, True) for _ in range(conc)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    await client.aclose()
    lat.sort()
    return {
        "rps": len(lat) / wall,
        "p50_ms": lat[len(lat) // 2] * 1e3,
        "p90_ms": lat[int(len(lat) * 0.9)] * 1e3,
        "n": len(lat),
        "client_cpu_us": cpu / len(lat) * 1e6,
        "total": len(lat) + warm * conc,
    }


async def serve_proxy(upstream: str, port: int, budget: bool, log_dir: str) -> None:
    sys.path.insert(0, str(ROOT))
    from proxy.registry import Attempt
    from proxy.server import ProxyServer

    env = {
        "BENCHFLOW_PROVIDER_API_KEY": "sk-bench-upstream-0123456789",
        "BENCHFLOW_PROVIDER_BASE_URL": upstream + "/v1",
        "ANTHROPIC_API_KEY": "sk-ant-bench-upstream-0123456789",
        "BENCHFLOW_UPSTREAM_ANTHROPIC_BASE_URL": upstream,
    }
    server = ProxyServer(env=env)
    await server.start("127.0.0.1", port)
    caps: dict[str, Any] = {"token_budget": 10**15, "turn_budget": 10**12} if budget else {}
    for who, model in (
        ("openai", "openai-compatible/bench-model"),
        ("anthropic", "anthropic/claude-sonnet-4-5"),
    ):
        log = None if os.environ.get("BENCH_NO_LOG") else f"{log_dir}/{who}/llm_trajectory.jsonl"
        server.registry.register(Attempt(f"bench-{who}", model, log, **caps), key=KEYS[who])
    print("ready", flush=True)
    await asyncio.Event().wait()


def budget_check_us(calls: int = 200_000) -> dict[str, float]:
    """CPU of the registry's per-call bookkeeping (begin_call + end_call), with and without
    budgets: what a budget adds to every call, measured where it happens."""
    sys.path.insert(0, str(ROOT))
    from proxy.registry import Attempt, Registry
    from proxy.usage import Usage

    out = {}
    budgets: dict[str, Any] = {"token_budget": 10**15, "turn_budget": 10**12}
    for name, caps in (("none", {}), ("budget", budgets)):
        reg = Registry({})
        state = reg.lookup(reg.register(Attempt(f"a-{name}", "mock/echo", **caps)))
        assert state is not None
        usage = Usage(120, 12, 100, 0, 132)
        t0 = time.process_time()
        for _ in range(calls):
            reg.begin_call(state)
            reg.end_call(state, usage, state.price, 0.001, 200, None, None)
        out[name] = (time.process_time() - t0) / calls * 1e6
    return out


# -- the orchestrator --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


def vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_load(
    url: str, kind: str, conc: int, n: int, key: str, server_pid: int, upstream_pid: int
) -> dict[str, Any]:
    """One point; also the CPU per request of the server process (robust to a busy machine),
    of the fake provider and of the load generator: where the machine's two cores go."""
    cpu0, up0 = cpu_seconds(server_pid), cpu_seconds(upstream_pid)
    out = subprocess.run(
        [PY, __file__, "load", url, kind, str(conc), str(n), key],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    result["server_cpu_us"] = (cpu_seconds(server_pid) - cpu0) / result["total"] * 1e6
    result["upstream_cpu_us"] = (cpu_seconds(upstream_pid) - up0) / result["total"] * 1e6
    # all the CPU a call costs, and how busy that kept the cores: near 100% means the
    # throughput is set by the sum, whichever process spends it
    cpu = result["client_cpu_us"] + result["upstream_cpu_us"]
    if server_pid != upstream_pid:
        cpu += result["server_cpu_us"]
    result["call_cpu_us"] = cpu
    result["cores_busy_pct"] = cpu * result["rps"] / 1e4 / (os.cpu_count() or 1)
    return result


def take_lines(logs: str) -> int:
    """Count the trajectory lines written so far and delete their files.

    At 20,000 calls a second the proxy appends about 36 MB of log a second, a rate no run
    reaches (an agent makes a few calls a second). Left on disk, that log is written back by
    the kernel some 30 s later (vm.dirty_expire_centisecs), in whatever point runs then:
    over 9 runs the proxy's rate fell from 21,000 to 12,000 calls a second while the same
    runs with the log on a tmpfs held at 21,000. Deleted before writeback, its dirty pages
    are dropped unwritten: the proxy's own work (serialising, redacting, write()) is still
    measured, the disk's writeback of lines at that rate is not."""
    lines = 0
    for path in Path(logs).rglob("*.jsonl"):
        with path.open("rb") as fh:
            lines += sum(1 for _ in fh)
        path.unlink()
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--n", type=int, default=10000, help="requests per point")
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    up_port, p_budget, p_plain, p_pass = free_port(), free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}"
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as logs:
        try:
            procs.append(subprocess.Popen([PY, str(HERE / "proxy_upstream.py"), str(up_port)]))
            wait_port(up_port)
            for port, budget in ((p_budget, "1"), (p_plain, "0")):
                procs.append(
                    subprocess.Popen(
                        [PY, __file__, "proxy", upstream, str(port), budget, f"{logs}/{port}"]
                    )
                )
                wait_port(port)
            procs.append(
                subprocess.Popen([PY, str(HERE / "proxy_passthrough.py"), upstream, str(p_pass)])
            )
            wait_port(p_pass)
            targets = {
                "direct": (upstream, procs[0].pid),
                "proxy": (f"http://127.0.0.1:{p_budget}", procs[1].pid),
                "proxy_no_budget": (f"http://127.0.0.1:{p_plain}", procs[2].pid),
                "passthrough": (f"http://127.0.0.1:{p_pass}", procs[3].pid),
            }
            raw: dict[str, list[dict[str, Any]]] = {}
            lines = 0
            for run in range(args.runs):
                for kind in kinds:
                    key = KEYS[KINDS[kind][1]]
                    for conc in (1, 32):
                        order = list(targets.items())
                        if run % 2:  # alternate so that no target always runs first
                            order.reverse()
                        for name, (url, pid) in order:
                            r = run_load(url, kind, conc, args.n, key, pid, procs[0].pid)
                            raw.setdefault(f"{kind}|c{conc}|{name}", []).append(r)
                            if name.startswith("proxy"):
                                # its last batch is written 50 ms after that batch's first line
                                time.sleep(0.1)
                                lines += take_lines(logs)
                print(f"run {run + 1}/{args.runs} done", file=sys.stderr, flush=True)
            rss = {"proxy": vm_hwm_mb(procs[1].pid), "proxy_no_budget": vm_hwm_mb(procs[2].pid)}
            lines += take_lines(logs)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)
    report(raw, kinds, rss, lines, args, budget_check_us())


def med(raw: dict[str, list[dict[str, Any]]], key: str, field: str) -> float:
    return statistics.median(r[field] for r in raw[key])


def _paired(raw: dict[str, list[dict[str, Any]]], a: str, b: str, fn: Any) -> float:
    return statistics.median(fn(x, y) for x, y in zip(raw[a], raw[b], strict=True))


def report(
    raw: dict[str, list[dict[str, Any]]],
    kinds: list[str],
    rss: dict[str, float],
    lines: int,
    args: argparse.Namespace,
    checks: dict[str, float],
) -> None:
    rows = []
    for kind in kinds:
        k1, k32 = f"{kind}|c1|", f"{kind}|c32|"
        stream = kind.endswith("stream")
        row: dict[str, Any] = {
            "kind": kind,
            "direct_p50_ms_c1": med(raw, k1 + "direct", "p50_ms"),
            "proxy_p50_ms_c1": med(raw, k1 + "proxy", "p50_ms"),
            "added_p50_ms_c1": _paired(
                raw, k1 + "proxy", k1 + "direct", lambda p, d: p["p50_ms"] - d["p50_ms"]
            ),
            "added_p90_ms_c1": _paired(
                raw, k1 + "proxy", k1 + "direct", lambda p, d: p["p90_ms"] - d["p90_ms"]
            ),
            "direct_rps_c32": med(raw, k32 + "direct", "rps"),
            "proxy_rps_c32": med(raw, k32 + "proxy", "rps"),
            "throughput_ratio_c32": _paired(
                raw, k32 + "proxy", k32 + "direct", lambda p, d: p["rps"] / d["rps"]
            ),
            "upstream_cpu_us_per_req_c32": med(raw, k32 + "direct", "server_cpu_us"),
            "proxy_cpu_us_per_req_c32": med(raw, k32 + "proxy", "server_cpu_us"),
            "proxy_no_budget_cpu_us_per_req_c32": med(
                raw, k32 + "proxy_no_budget", "server_cpu_us"
            ),
            "passthrough_rps_c32": med(raw, k32 + "passthrough", "rps"),
            "passthrough_ratio_c32": _paired(
                raw, k32 + "passthrough", k32 + "direct", lambda p, d: p["rps"] / d["rps"]
            ),
            "proxy_vs_passthrough_c32": _paired(
                raw, k32 + "proxy", k32 + "passthrough", lambda p, q: p["rps"] / q["rps"]
            ),
            "passthrough_cpu_us_per_req_c32": med(raw, k32 + "passthrough", "server_cpu_us"),
            "budget_bookkeeping_pct_of_call": 100
            * (checks["budget"] - checks["none"])
            / med(raw, k32 + "proxy", "server_cpu_us"),
            "budget_cpu_overhead_pct": 100
            * _paired(
                raw,
                k32 + "proxy",
                k32 + "proxy_no_budget",
                lambda p, q: p["server_cpu_us"] / q["server_cpu_us"] - 1,
            ),
            "budget_vs_none_rps_ratio_c32": _paired(
                raw, k32 + "proxy", k32 + "proxy_no_budget", lambda p, q: p["rps"] / q["rps"]
            ),
        }
        for name in ("direct", "passthrough", "proxy"):
            for part in ("client", "upstream", "call"):
                row[f"{name}_{part}_cpu_us_c32"] = med(raw, k32 + name, f"{part}_cpu_us")
            row[f"{name}_cores_busy_pct_c32"] = med(raw, k32 + name, "cores_busy_pct")
        # with the cores busy, the ratio the CPU a call costs allows: direct's over the proxy's
        row["cpu_ratio_c32"] = _paired(
            raw, k32 + "direct", k32 + "proxy", lambda d, p: d["call_cpu_us"] / p["call_cpu_us"]
        )
        row["ok"] = (
            row["added_p50_ms_c1"] <= TARGETS["added_p50_ms_stream" if stream else "added_p50_ms"]
            and row["throughput_ratio_c32"]
            >= TARGETS["ratio_c32_stream" if stream else "ratio_c32"]
        )
        rows.append(row)
    print(
        f"{'kind':<17}{'p50 dir':>8}{'p50 prx':>8}{'+p50':>7}{'+p90':>7}{'rps dir':>8}"
        f"{'rps prx':>8}{'ratio':>6}{'pass':>6}{'cpu/req':>8}{'budget':>7}  ok"
    )
    print(
        f"{'':<17}{'ms c1':>8}{'ms c1':>8}{'ms':>7}{'ms':>7}{'c32':>8}{'c32':>8}{'c32':>6}"
        f"{'c32':>6}{'us prx':>8}{'cpu %':>7}"
    )
    for r in rows:
        print(
            f"{r['kind']:<17}{r['direct_p50_ms_c1']:>8.3f}{r['proxy_p50_ms_c1']:>8.3f}"
            f"{r['added_p50_ms_c1']:>7.3f}{r['added_p90_ms_c1']:>7.3f}"
            f"{r['direct_rps_c32']:>8.0f}{r['proxy_rps_c32']:>8.0f}"
            f"{r['throughput_ratio_c32']:>6.2f}{r['passthrough_ratio_c32']:>6.2f}"
            f"{r['proxy_cpu_us_per_req_c32']:>8.0f}"
            f"{r['budget_cpu_overhead_pct']:>+7.1f}  {'yes' if r['ok'] else 'NO'}"
        )
    print("CPU per call at c=32, us: client + provider (+ the middle) = all; cores busy")
    for r in rows:
        parts = []
        for name in ("direct", "passthrough", "proxy"):
            mid = "" if name == "direct" else f" + {r[f'{name}_cpu_us_per_req_c32']:.0f}"
            parts.append(
                f"{name} {r[f'{name}_client_cpu_us_c32']:.0f} + "
                f"{r[f'{name}_upstream_cpu_us_c32']:.0f}{mid} = "
                f"{r[f'{name}_call_cpu_us_c32']:.0f} ({r[f'{name}_cores_busy_pct_c32']:.0f}%)"
            )
        print(f"  {r['kind']}: " + "; ".join(parts) + f"; direct/proxy {r['cpu_ratio_c32']:.2f}")
    print(
        f"budget bookkeeping per call: {checks['budget']:.2f} us with budgets, "
        f"{checks['none']:.2f} us without (+{checks['budget'] - checks['none']:.2f} us, "
        f"{max(r['budget_bookkeeping_pct_of_call'] for r in rows):.2f}% of a proxied call "
        "at most); the 'budget cpu %' column is the same A/B seen from outside, with "
        "its noise"
    )
    print(
        "pass: a bare pass-through (benchmarks/proxy_passthrough.py: same server and client, "
        "no parsing, accounting or log) against direct, the ceiling for any proxy built "
        "from these parts here"
    )
    print(
        f"proxy RSS peak (VmHWM): {rss['proxy']:.1f} MB (target < {TARGETS['rss_mb']:.0f}); "
        f"trajectory lines written: {lines}; load average at the end: "
        f"{os.getloadavg()[0]:.2f}"
    )
    out = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "runs": args.runs,
        "n_per_point": args.n,
        "client": "asyncio+httptools keep-alive client (proxy/upstream.py) in its own "
        "process, same for direct and proxy",
        "cpus": os.cpu_count(),
        "loadavg_end": os.getloadavg(),
        "targets": TARGETS,
        "rows": rows,
        "rss_mb": rss,
        "trajectory_lines": lines,
        "budget_bookkeeping_us": checks,
        "raw": raw,
    }
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "proxy.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    role = sys.argv[1] if len(sys.argv) > 1 else ""
    if role == "load":
        url, kind, conc, n, key = sys.argv[2:7]
        import uvloop

        print(json.dumps(uvloop.run(load(url, kind, int(conc), int(n), key))))
    elif role == "proxy":
        import uvloop

        uvloop.run(serve_proxy(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]))
    else:
        main()
