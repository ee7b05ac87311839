"""Instructions per call: the proxy, the bare pass-through and the fake provider, under callgrind.

Run: .venv/bin/python benchmarks/proxy_instructions.py [--kinds chat,chat_stream] [--n 2000]
Prints a table and writes benchmarks/results/proxy_instructions.json. Traffic stays on 127.0.0.1.

Throughput on a shared two-core machine moves by a third from one run to the next
(benchmarks/proxy_bench.py shows it); the number of user-space instructions a server runs per
call does not: valgrind counts them, whatever else the machine does, to within 1%. So this is
the figure to compare two versions of the proxy with (run the script in each checkout). It
counts user space only: the kernel's socket work, about half of the proxy's CPU per call, is
not in it, and is the same for every version.

Each server in turn runs under `valgrind --tool=callgrind --instr-atstart=no`; after a warm-up
load, collection is switched on (callgrind_control -i on) for n calls from the load generator of
proxy_bench.py at concurrency 32, then off, and the counts are dumped. The fake provider is
measured as the target of `direct` load; the pass-through and the proxy (with its trajectory
log, as in a run, and with it off: BENCH_NO_LOG=1) in front of a fake provider that runs
normally. valgrind is needed (Debian's package); a run takes about two minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import proxy_bench as pb  # noqa: E402

PY = sys.executable
STARTUP_TIMEOUT = 120.0  # Python under valgrind takes tens of seconds to start


def load(url: str, kind: str, n: int) -> int:
    """n calls at concurrency 32 (plus the load generator's warm-up); how many were made."""
    key = pb.KEYS[pb.KINDS[kind][1]]
    out = subprocess.run(
        [PY, str(HERE / "proxy_bench.py"), "load", url, kind, "32", str(n), key],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return int(json.loads(out.stdout)["total"])


def totals(dump: Path) -> int:
    for line in dump.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals line in {dump}")


def control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], capture_output=True, check=True, timeout=60)


def measure(
    argv: list[str],
    port: int,
    kinds: list[str],
    n: int,
    out: Path,
    env: dict[str, str] | None = None,
) -> dict[str, float]:
    """Instructions per call of the server `argv` starts on `port`, for each kind."""
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        + argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    try:
        pb.wait_port(port, STARTUP_TIMEOUT)
        per_call = {}
        for kind in kinds:
            load(url, kind, 320)  # warm-up: connections, caches, the first trajectory files
            control("-z", str(proc.pid))
            control("-i", "on", str(proc.pid))
            calls = load(url, kind, n)
            control("-i", "off", str(proc.pid))
            control("-d", str(proc.pid))
            dumps = sorted(out.parent.glob(out.name + ".*"), key=lambda p: p.stat().st_mtime)
            per_call[kind] = totals(dumps[-1]) / calls
        return per_call
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--kinds", default="chat,chat_stream")
    ap.add_argument("--n", type=int, default=2000, help="calls counted per server and kind")
    args = ap.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    kinds = args.kinds.split(",")
    for kind in kinds:
        if kind not in pb.KINDS:
            raise SystemExit(f"--kinds: unknown kind {kind!r}; known: {', '.join(pb.KINDS)}")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        up_port = pb.free_port()
        upstream = f"http://127.0.0.1:{up_port}"
        provider = [PY, str(HERE / "proxy_upstream.py"), str(up_port)]
        results["provider"] = measure(provider, up_port, kinds, args.n, Path(tmp, "provider"))
        plain = subprocess.Popen(provider)
        try:
            pb.wait_port(up_port)
            port = pb.free_port()
            passthrough = [PY, str(HERE / "proxy_passthrough.py"), upstream, str(port)]
            results["passthrough"] = measure(passthrough, port, kinds, args.n, Path(tmp, "pass"))
            for name, env in (("proxy", {}), ("proxy_no_log", {"BENCH_NO_LOG": "1"})):
                port = pb.free_port()
                argv = [PY, str(HERE / "proxy_bench.py"), "proxy", upstream, str(port), "1"]
                argv.append(f"{tmp}/logs-{name}")
                results[name] = measure(argv, port, kinds, args.n, Path(tmp, name), env)
        finally:
            plain.terminate()
            plain.wait(10)
    report(results, kinds, args.n)


def report(results: dict[str, dict[str, float]], kinds: list[str], n: int) -> None:
    rows: list[dict[str, Any]] = []
    names = ("provider", "passthrough", "proxy", "proxy_no_log")
    print(f"{'kind':<17}{'provider':>10}{'pass':>10}{'proxy':>10}{'no log':>10}{'log %':>7}")
    for kind in kinds:
        prov, pas, prx, nolog = (results[k][kind] for k in names)
        log_pct = 100 * (prx - nolog) / prx
        rows.append({"kind": kind, **{k: results[k][kind] for k in names}, "log_pct": log_pct})
        print(
            f"{kind:<17}{prov / 1e3:>10.1f}{pas / 1e3:>10.1f}{prx / 1e3:>10.1f}"
            f"{nolog / 1e3:>10.1f}{log_pct:>7.0f}"
        )
    print(
        "thousands of user-space instructions per call (callgrind; the kernel's socket work is "
        "not counted). provider: the fake provider, direct; pass: the bare pass-through; "
        "no log: the proxy with its trajectory log off; log %: the log's share of the proxy's"
    )
    out = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "n_per_point": n,
        "cpus": os.cpu_count(),
        "unit": "user-space instructions per call (valgrind callgrind), concurrency 32",
        "rows": rows,
    }
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "proxy_instructions.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
