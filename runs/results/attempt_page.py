"""What a trial page shows of one attempt's folder, bounded whatever the folder holds.

The agent writes the folder: a million files, names of 4,000 characters, logs of quotes that HTML
turns into six bytes each. Each part of the page gets a share of PAGE_BYTES, counted as the
bytes the page will carry (escaped for HTML, quoted in links): the listing is cut into pages, a
file is previewed by its head, and what does not fit is a link away.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runs.results import attempt_folder, files
from runs.results.files import FileEntry
from runs.results.html_size import fit, html_bytes, url_bytes

PAGE_BYTES = 2_000_000  # the promise: a trial page stays under this
LISTING_BYTES = 400_000  # one page of the file listing
LISTING_ROWS = 100
INLINE_BYTES = 500_000  # the heads of agent/, verifier/, config.json ... shown open
INLINE_FILES = 20
LOGS_BYTES = 100_000  # the session logs offered as entries
LOGS_SHOWN = 20
RESULT_BYTES = 150_000  # result.json (or its first bytes when it is not JSON)
REGRADES_SHOWN = 50  # the last regrades of regrade.json
REWARDS_SHOWN = 50
ROW_BYTES = 400  # a row's markup beside its path

INLINE = ("agent/", "verifier/", "config.json", "timing.json", "steps/")
TRAJECTORY = "trajectory/llm_trajectory.jsonl"


def row_bytes(entry: FileEntry) -> int:
    """A listing row: the path as text and in a link."""
    return 2 * html_bytes(entry.path) + url_bytes(entry.path) + ROW_BYTES


def listing_pages(entries: list[FileEntry]) -> list[int]:
    """Where each page of the listing starts: LISTING_ROWS rows, or fewer when their paths are
    long enough to fill LISTING_BYTES (at least one row a page)."""
    starts: list[int] = []
    used = rows = 0
    for i, entry in enumerate(entries):
        cost = row_bytes(entry)
        if not starts or rows >= LISTING_ROWS or used + cost > LISTING_BYTES:
            starts.append(i)
            used = rows = 0
        used += cost
        rows += 1
    return starts or [0]


@dataclass
class Preview:
    entry: FileEntry
    text: str
    cut: bool
    binary: bool


@dataclass
class AttemptFiles:
    """One attempt's folder as its page shows it."""

    result: dict[str, Any] | None = None
    result_text: str = ""
    result_cut: bool = False
    listing: list[FileEntry] = field(default_factory=list)  # this page's rows
    page: int = 1
    pages: int = 1
    total: int = 0  # files listed in all
    complete: bool = True  # False: the folder holds more than the listing looked at
    inline: list[Preview] = field(default_factory=list)
    inline_more: int = 0  # files that would be shown open, listed only
    logs: list[FileEntry] = field(default_factory=list)
    logs_more: int = 0
    has_transcript: bool = False


def _result(folder: Path) -> tuple[dict[str, Any] | None, str, bool]:
    """result.json as a document, or (None, its first bytes) when it is missing or corrupt."""
    raw, raw_cut = attempt_folder.result_text(folder, files.HEAD_BYTES)
    if not raw:
        return None, "", False
    doc = None
    if not raw_cut:
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            doc = None
    if isinstance(doc, dict):
        text, cut = fit(json.dumps(doc, indent=2), RESULT_BYTES)
        return doc, text, cut
    text, cut = fit(raw, RESULT_BYTES)
    return None, text, cut or raw_cut


def _previews(folder: Path, entries: list[FileEntry]) -> tuple[list[Preview], int]:
    left = INLINE_BYTES
    out: list[Preview] = []
    wanted = [e for e in entries if e.path.startswith(INLINE) and not e.path.endswith(".jsonl")]
    for entry in wanted:
        cost = 2 * html_bytes(entry.path) + url_bytes(entry.path) + ROW_BYTES
        if len(out) >= INLINE_FILES or left - cost <= 0:
            break
        head = files.head_of(folder, entry.path)
        if head is None:
            continue
        text, cut = fit(head.text, left - cost)
        left -= cost + html_bytes(text)
        out.append(Preview(entry, "" if head.binary else text, head.cut or cut, head.binary))
    return out, len(wanted) - len(out)


def _logs(entries: list[FileEntry]) -> tuple[list[FileEntry], int]:
    left = LOGS_BYTES
    logs = [e for e in entries if e.path.endswith(".jsonl") and e.path != TRAJECTORY]
    shown: list[FileEntry] = []
    for entry in logs:
        cost = html_bytes(entry.path) + 3 * url_bytes(entry.path) + ROW_BYTES
        if len(shown) >= LOGS_SHOWN or cost > left:
            break
        left -= cost
        shown.append(entry)
    return shown, len(logs) - len(shown)


def attempt_files(folder: Path, page: int = 1) -> AttemptFiles:
    """What the trial page shows of the attempt folder: result.json, the heads of the files shown
    open, the session logs, and page `page` of the listing."""
    if folder.is_symlink() or not folder.is_dir():
        return AttemptFiles()
    scanned = files.scan_files(folder)
    entries = scanned.entries
    starts = listing_pages(entries)
    page = min(max(1, page), len(starts))
    end = starts[page] if page < len(starts) else len(entries)
    result, result_text, result_cut = _result(folder)
    inline, inline_more = _previews(folder, entries)
    logs, logs_more = _logs(entries)
    return AttemptFiles(
        result=result,
        result_text=result_text,
        result_cut=result_cut,
        listing=entries[starts[page - 1] : end],
        page=page,
        pages=len(starts),
        total=len(entries),
        complete=scanned.complete,
        inline=inline,
        inline_more=inline_more,
        logs=logs,
        logs_more=logs_more,
        has_transcript=any(e.path == TRAJECTORY for e in entries),
    )


def regrades(folder: Path) -> dict[str, Any] | None:
    """regrade.json (written by us) for the page: its last REGRADES_SHOWN regrades."""
    head = files.head_of(folder, "regrade.json", 4 << 20)
    if head is None:
        return None
    try:
        data = json.loads(head.text)
    except (ValueError, RecursionError):
        return {"unreadable": True}
    if not isinstance(data, dict):
        return None
    done = data.get("regrades")
    if isinstance(done, list) and len(done) > REGRADES_SHOWN:
        data = {**data, "regrades": done[-REGRADES_SHOWN:], "earlier": len(done) - REGRADES_SHOWN}
    return data


def rewards_shown(rewards: Any) -> list[tuple[str, Any]]:
    """The rewards a verifier wrote (its reward.json may name thousands): the first few."""
    if not isinstance(rewards, dict):
        return []
    return [(str(k)[:200], v) for k, v in list(rewards.items())[:REWARDS_SHOWN]]


REVIEW_BYTES = 2 << 20
REVIEW_SHOWN = 100_000  # of HTML: the criteria's texts on the Rubric tab
CRITERIA_SHOWN = 200


def rubric_review(folder: Path) -> dict[str, Any] | None:
    """The attempt's latest rubric review, for its tab: bench review's review.json (report only),
    or the automatic review's scoring/<attempt>.json (`bench run --reviewer-model`, whose gated
    quality became the reward), whichever was written last."""
    found = []
    for rel, gated in (("review.json", False), (f"scoring/{folder.name}.json", True)):
        try:
            found.append(((folder / rel).stat().st_mtime, rel, gated))
        except OSError:
            continue
    if not found:
        return None
    _, rel, gated = max(found)
    review = _review_file(folder, rel)
    if review is not None and not review.get("unreadable"):
        review["gated_reward"] = gated
        review.setdefault("reviewed_at", review.get("scored_at"))
    return review


def _review_file(folder: Path, rel: str) -> dict[str, Any] | None:
    head = files.head_of(folder, rel, REVIEW_BYTES)
    if head is None or head.cut:
        return None if head is None else {"unreadable": True}
    try:
        data = json.loads(head.text)
    except (ValueError, RecursionError):
        return {"unreadable": True}
    if not isinstance(data, dict):
        return {"unreadable": True}
    left = REVIEW_SHOWN
    raw = data.get("criteria")
    criteria = (
        [c for c in raw if isinstance(c, dict)][:CRITERIA_SHOWN] if isinstance(raw, list) else []
    )
    for c in criteria:
        for key in ("name", "guidance", "explanation", "verdict"):
            c[key], _ = fit(str(c.get(key) or ""), max(0, min(left, 20_000)))
            left -= html_bytes(c[key]) + 100
    data["criteria"] = criteria
    problems = data.get("problems")
    problems = problems[:20] if isinstance(problems, list) else []
    data["problems"] = [fit(str(p), 2_000)[0] for p in problems]
    return data
