"""Redacting a logged call: the trajectory log's key-shape scan on agent-sized lines.

Run: .venv/bin/python benchmarks/redact_bench.py [--runs 7]
Compares proxy.trajectory.redact_shapes (the pattern tried only where a hint stands) with
running the pattern over the whole line (KEY_PATTERN.sub), on lines of 2 KB to 800 KB made
of agent-like text ("task-" words hint almost every line). Prints medians of --runs runs.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.trajectory import KEY_PATTERN, REDACTED, redact_shapes  # noqa: E402

WORDS = (
    "the agent runs ls -la in /app/task-1 then git diff -- src/ and reads the disk-usage "
    "report; it edits main.py, runs pytest -q, and asks for a risk-free change to the config"
).split()


def line_of(size: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    words: list[str] = []
    total = 0
    while total < size:
        words.append(rng.choice(WORDS))
        total += len(words[-1]) + 1
    # one real-looking key in the middle, so each side has something to redact
    words.insert(len(words) // 2, "sk-proj-" + "a1B2c3D4" * 4)
    doc = {"request": {"messages": [{"role": "user", "content": " ".join(words)}]}}
    return json.dumps(doc).encode()


def per_call_ms(fn: object, line: bytes, repeat: int) -> float:
    call = fn  # type: ignore[assignment]
    t0 = time.perf_counter()
    for _ in range(repeat):
        call(line)  # type: ignore[operator]
    return (time.perf_counter() - t0) / repeat * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    print(f"{'line':>8}{'whole-line sub':>16}{'from hints':>12}{'speed-up':>10}")
    for size in (2_000, 20_000, 100_000, 800_000):
        line = line_of(size)
        assert redact_shapes(line) == KEY_PATTERN.sub(REDACTED, line)
        repeat = max(2, 2_000_000 // size)
        sub, hints = [], []
        for _ in range(args.runs):
            sub.append(per_call_ms(lambda s: KEY_PATTERN.sub(REDACTED, s), line, repeat))
            hints.append(per_call_ms(redact_shapes, line, repeat))
        a, b = statistics.median(sub), statistics.median(hints)
        print(f"{len(line) / 1000:>6.0f}KB{a:>13.3f} ms{b:>9.3f} ms{a / b:>9.1f}x")


if __name__ == "__main__":
    main()
