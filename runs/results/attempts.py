"""Each attempt folder of a job as an Attempt, and which attempt of a trial is best.

Folders are read by runs/results/attempt_folder.py (the one reader of result.json).

The best attempt of a trial is the scored one (the newest scored if several), else the newest a job
cap did not cancel; resume, regrade, summary.json and `bench results` use the same rule. An attempt
cancelled while it ran has no result.json; its timing.json says so, and why when a job cap did it.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from runs.jobfolder import finite
from runs.results.attempt_folder import AttemptRecord, job_attempts
from runs.results.trial_result import TrialResult

Outcome = Literal["passed", "failed", "errored", "verifier_errored", "interrupted", "cancelled"]


def reward_of(result: Mapping[str, Any] | None) -> float | None:
    """The numeric, finite `rewards.reward` of a result, else None (bools and NaN are no reward)."""
    if not result:
        return None
    rewards = result.get("rewards")
    return finite(rewards.get("reward")) if isinstance(rewards, Mapping) else None


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


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


@dataclass(slots=True)
class Attempt:
    """One attempt folder `<task>__<id>`: `typed` is its result, `result` the same document in
    BenchFlow's names; both None when it wrote no usable result.json, and then `timing` is its
    timing.json, if any (an attempt cancelled while it ran)."""

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
    record: AttemptRecord | None = None

    @property
    def typed(self) -> TrialResult | None:
        """The result typed (made when first asked for)."""
        return self.record.result if self.record is not None else None

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
        if self.corrupt and self.record is not None:
            return self.record.error
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
        return finite(agent_result.get(key)) if isinstance(agent_result, Mapping) else None

    def folder_mtime(self) -> float:
        if self.mtime is None:
            try:
                self.mtime = os.stat(self.path).st_mtime
            except OSError:
                self.mtime = 0.0
        return self.mtime


def attempt_of(record: AttemptRecord) -> Attempt:
    """An attempt folder's record as an Attempt, placed in time by its result (else its mtime)."""
    document = record.raw if record.raw is not None else record.document
    when = None
    reward = None
    if document is not None:
        when = _epoch(document.get("finished_at")) or _epoch(document.get("started_at"))
        rewards = document.get("rewards")
        reward = finite(rewards.get("reward")) if isinstance(rewards, Mapping) else None
    mtime = None
    if when is None:
        try:
            mtime = os.stat(record.path).st_mtime
        except OSError:
            mtime = 0.0
        when = mtime
    return Attempt(  # positional: this runs for each of thousands of folders
        record.task,
        record.trial_name,
        record.trial_index,
        record.name,
        record.path,
        document,
        when,
        mtime,
        reward,
        record.timing,
        record.kind == "corrupt",
        record,
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
    with no_gc():
        attempts = [attempt_of(record) for record in job_attempts(job_dir)]
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
