"""The trial page's Verifier tab: what a verifier run left (rewards, exit code, the heads of its
stdout and stderr, the tests of its CTRF report, /logs/verifier/ctrf.json), for the attempt's own
run and, when it was regraded, for the latest regrade beside it (regrade/<id>/verifier/).

Bounded as the rest of the page: the heads of the files (files.head_of), the first TESTS_SHOWN
tests of a report, each message cut to MESSAGE_MAX characters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runs.results import files
from runs.results.html_size import fit, html_bytes

OUTPUT_BYTES = 30_000  # of stdout, and of stderr, each run (escaped for HTML)
TESTS_BYTES = 100_000  # of the tests' names and messages, each run
CTRF_BYTES = 4 << 20
TESTS_SHOWN = 500
MESSAGE_MAX = 4_000
REWARDS_SHOWN = 50


@dataclass
class TestRow:
    name: str
    status: str  # CTRF's: passed, failed, skipped, pending, other
    message: str = ""
    duration_ms: float | None = None


@dataclass
class VerifierRun:
    label: str
    rewards: list[tuple[str, Any]] = field(default_factory=list)
    reward: Any = None
    exit_code: int | None = None
    error: str = ""
    stdout: str = ""
    stdout_cut: bool = False
    stderr: str = ""
    stderr_cut: bool = False
    tests: list[TestRow] = field(default_factory=list)
    tests_more: int = 0
    summary: dict[str, int] = field(default_factory=dict)
    ctrf_unreadable: bool = False
    folder: str = "verifier/"  # where its files are, in the attempt folder


def _head(folder: Path, rel: str) -> tuple[str, bool]:
    head = files.head_of(folder, rel, OUTPUT_BYTES)
    if head is None or head.binary:
        return "", False
    text, cut = fit(head.text, OUTPUT_BYTES)
    return text, cut or head.cut


def ctrf_tests(doc: Any) -> tuple[list[TestRow], int, dict[str, int]]:
    """The tests of a CTRF report ({"results": {"tests": [...], "summary": {...}}}): the first
    TESTS_SHOWN, failed ones first, how many more, and its summary's counts."""
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, dict):
        raise ValueError("no results")
    raw = results.get("tests")
    rows: list[TestRow] = []
    for test in raw if isinstance(raw, list) else []:
        if not isinstance(test, dict):
            continue
        message = test.get("message") or test.get("trace") or ""
        duration = test.get("duration")
        rows.append(
            TestRow(
                str(test.get("name") or "?")[:500],
                str(test.get("status") or "other")[:20],
                str(message)[:MESSAGE_MAX],
                float(duration) if isinstance(duration, int | float) else None,
            )
        )
    rows.sort(key=lambda r: r.status != "failed")  # stable: the report's order within each
    left, shown = TESTS_BYTES, 0
    for row in rows[:TESTS_SHOWN]:
        row.name, _ = fit(row.name, max(0, min(left, 3_000)))
        row.message, _ = fit(row.message, max(0, left - html_bytes(row.name)))
        left -= html_bytes(row.name) + html_bytes(row.message)  # markup: TESTS_SHOWN rows at most
        shown += 1
        if left <= 0:
            break
    summary = results.get("summary")
    counts = {
        k: v
        for k, v in (summary.items() if isinstance(summary, dict) else ())
        if k in ("tests", "passed", "failed", "skipped", "pending", "other") and isinstance(v, int)
    }
    if not counts:
        counts = {"tests": len(rows)}
        for row in rows:
            counts[row.status] = counts.get(row.status, 0) + 1
    return rows[:shown], len(rows) - shown, counts


def _read_run(folder: Path, run: VerifierRun) -> VerifierRun:
    base = run.folder
    run.stdout, run.stdout_cut = _head(folder, base + "test-stdout.txt")
    run.stderr, run.stderr_cut = _head(folder, base + "test-stderr.txt")
    head = files.head_of(folder, base + "ctrf.json", CTRF_BYTES)
    if head is not None:
        try:
            run.tests, run.tests_more, run.summary = ctrf_tests(json.loads(head.text))
        except (ValueError, RecursionError):
            run.ctrf_unreadable = True
    return run


def _rewards(rewards: Any) -> list[tuple[str, Any]]:
    if not isinstance(rewards, dict):
        return []
    return [(str(k)[:200], v) for k, v in list(rewards.items())[:REWARDS_SHOWN]]


def original_run(folder: Path, result: Any, reward: Any) -> VerifierRun:
    """The verifier run of the attempt itself, from its result (a TrialResult, or None) and its
    verifier/ folder."""
    exit_code = getattr(result, "verifier_exit_code", None)
    run = VerifierRun(
        "this attempt",
        rewards=_rewards(getattr(result, "rewards", None)),
        reward=reward,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        error=str(getattr(result, "verifier_error", None) or "")[:MESSAGE_MAX],
    )
    return _read_run(folder, run)


def latest_regrade(folder: Path, regrades: dict[str, Any] | None) -> VerifierRun | None:
    """The latest regrade's verifier run (regrade.json's last block, regrade/<id>/verifier/)."""
    done = (regrades or {}).get("regrades")
    if not isinstance(done, list) or not done or not isinstance(done[-1], dict):
        return None
    block = done[-1]
    out = str(block.get("output_dir") or "")
    parts = out.split("/")
    if len(parts) != 2 or parts[0] != "regrade" or parts[1] in ("", ".", ".."):
        out = ""
    exit_code = block.get("verifier_exit_code")
    run = VerifierRun(
        f"regrade {str(block.get('id') or '')[:40]} · {str(block.get('created_at') or '')[:40]}",
        rewards=_rewards(block.get("new_rewards")),
        reward=block.get("new_reward"),
        exit_code=exit_code if isinstance(exit_code, int) else None,
        error=str(block.get("verifier_error") or block.get("error") or "")[:MESSAGE_MAX],
        folder=f"{out}/verifier/" if out else "",
    )
    return _read_run(folder, run) if out else run
