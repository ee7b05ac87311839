"""Each attempt folder of a job read into an Attempt (one result.json each) and which attempt is best.

The best attempt of a trial is the scored one (the newest scored if several), else the newest a job
cap did not cancel; resume, regrade, summary.json and `bench results` use the same rule. An attempt
cancelled while it ran has no result.json; its timing.json says so, and why when a job cap did it.
"""

from __future__ import annotations

import gc
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from runs.jobfolder import NOT_STARTED_MARK

Outcome = Literal["passed", "failed", "errored", "verifier_errored", "interrupted", "cancelled"]
CORRUPT_TEXT = "result.json is corrupt or half-written (not a JSON object)"


def reward_of(result: Mapping[str, Any] | None) -> float | None:
    """The numeric, finite `rewards.reward` of a result, else None (bools and NaN are no reward)."""
    if not result:
        return None
    rewards = result.get("rewards")
    value = rewards.get("reward") if isinstance(rewards, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def outcome_of(result: Mapping[str, Any] | None) -> Outcome:
    """passed / failed (a reward wins over an error) / errored / verifier_errored / interrupted (no
    result.json; an Attempt a job cap cancelled is `cancelled` instead)."""
    return _outcome(result, reward_of(result))


def _outcome(result: Mapping[str, Any] | None, reward: float | None) -> Outcome:
    if result is None:
        return "interrupted"
    if reward is not None:
        return "passed" if reward == 1.0 else "failed"
    if result.get("error") or not result.get("verifier_error"):
        return "errored"  # an agent error, or no verdict at all
    return "verifier_errored"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return value


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


@dataclass(slots=True)
class Attempt:
    """One attempt folder `<task>__<id>`; `result` is None when it never wrote result.json, and then
    `timing` is its timing.json, if any (an attempt cancelled while it ran)."""

    task: str
    trial_name: str
    trial_index: int
    folder: str
    path: str
    result: dict[str, Any] | None
    when: float  # finished_at, else started_at, else folder mtime (epoch seconds)
    mtime: float | None = None
    reward: float | None = None  # reward_of(result), computed once
    timing: dict[str, Any] | None = None
    corrupt: bool = False  # result.json is there but is not a JSON object (half-written, edited)

    @property
    def cancelled_by(self) -> str | None:
        """The cap's `budget reached: ...` when a job cap cancelled this attempt while it ran."""
        if self.result is not None or self.timing is None:
            return None
        reason = self.timing.get("cancelled_by")
        return str(reason) if reason is not None else None

    @property
    def budget_cancelled(self) -> bool:
        """A job cap cancelled it: no failure, and not the trial's last word."""
        return self.cancelled_by is not None

    @property
    def error(self) -> str | None:
        if self.corrupt:
            return f"{CORRUPT_TEXT} ({self.folder}/result.json)"
        if self.cancelled_by is not None:
            return f"cancelled by the job budget: {self.cancelled_by}"
        return self.get("error")

    @property
    def outcome(self) -> Outcome:
        return "cancelled" if self.budget_cancelled else _outcome(self.result, self.reward)

    @property
    def scored(self) -> bool:
        return self.reward is not None

    def get(self, key: str, default: Any = None) -> Any:
        return self.result.get(key, default) if self.result else default

    def usage(self, key: str) -> float | None:
        """From result.json's agent_result, or, for an attempt a job cap cancelled, what the proxy
        counted for it (timing.json's agent_result)."""
        agent_result = (
            self.get("agent_result")
            if self.result is not None
            else (self.timing or {}).get("agent_result")
        )
        return _number(agent_result.get(key)) if isinstance(agent_result, Mapping) else None

    def folder_mtime(self) -> float:
        if self.mtime is None:
            try:
                self.mtime = os.stat(self.path).st_mtime
            except OSError:
                self.mtime = 0.0
        return self.mtime


try:
    from orjson import loads as _loads  # 2-3x faster on thousands of result.json files
except ImportError:  # pragma: no cover
    _loads = json.loads  # type: ignore[assignment]


def read_json(path: str) -> Any:
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    try:
        return _loads(raw)
    except ValueError:
        try:  # NaN or Infinity from an older writer: the standard library reads them
            return json.loads(raw)
        except ValueError:
            return None


def _split_folder(name: str) -> str:
    return name.rsplit("__", 1)[0]


def _attempt(entry: os.DirEntry[str]) -> Attempt | None:
    data = read_json(os.path.join(entry.path, "result.json"))
    result = data if isinstance(data, dict) else None
    corrupt = result is None and os.path.exists(os.path.join(entry.path, "result.json"))
    if result is not None and result.get("purpose") == "reviewer":
        return None
    if result is None and os.path.exists(os.path.join(entry.path, NOT_STARTED_MARK)):
        return None  # prepared ahead and never started (or a job stopped hard before it did)
    meta = result if result is not None else read_json(os.path.join(entry.path, "config.json"))
    meta = meta if isinstance(meta, dict) else {}
    task = str(meta.get("task_name") or _split_folder(entry.name))
    index = meta.get("trial_index")
    when = _epoch(meta.get("finished_at")) if result is not None else None
    if when is None and result is not None:
        when = _epoch(result.get("started_at"))
    timing = None
    if result is None:
        data = read_json(os.path.join(entry.path, "timing.json"))
        timing = data if isinstance(data, dict) else None
    mtime = None
    if when is None:
        mtime = entry.stat().st_mtime
        when = mtime
    return Attempt(
        task=task,
        trial_name=str(meta.get("trial_name") or task),
        trial_index=index if isinstance(index, int) and not isinstance(index, bool) else 0,
        folder=entry.name,
        path=entry.path,
        result=result,
        when=when,
        mtime=mtime,
        reward=reward_of(result),
        timing=timing,
        corrupt=corrupt,
    )


@contextmanager
def no_gc() -> Iterator[None]:
    """Building thousands of small dicts triggers needless full collections; pause them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_attempts(job_dir: str | os.PathLike[str]) -> list[Attempt]:
    """Every attempt folder of a job (one result.json read each), in folder-name order."""
    attempts = []
    with no_gc(), os.scandir(job_dir) as entries:
        for entry in entries:
            if entry.name.startswith(".") or "__" not in entry.name or not entry.is_dir():
                continue
            attempt = _attempt(entry)
            if attempt is not None:
                attempts.append(attempt)
    attempts.sort(key=lambda a: a.folder)
    return attempts


def oldest_first(attempts: Iterable[Attempt]) -> list[Attempt]:
    """Attempts by time, ties broken by folder mtime (only then stat'ed), then folder name."""
    items = list(attempts)
    if len(items) < 2:
        return items
    if len({a.when for a in items}) == len(items):
        return sorted(items, key=lambda a: (a.when, a.folder))
    return sorted(items, key=lambda a: (a.when, a.folder_mtime(), a.folder))


def best_attempt(attempts: Sequence[Attempt]) -> Attempt:
    """The newest scored attempt, else the newest attempt a job cap did not cancel, else the newest."""
    if not attempts:
        raise ValueError("a trial has at least one attempt")
    return newest_scored_else_newest(oldest_first(attempts))


def newest_scored_else_newest(ordered: Sequence[Attempt]) -> Attempt:
    """best_attempt of attempts already oldest first."""
    for attempt in reversed(ordered):
        if attempt.reward is not None:
            return attempt
    for attempt in reversed(ordered):
        if not attempt.budget_cancelled:
            return attempt
    return ordered[-1]
