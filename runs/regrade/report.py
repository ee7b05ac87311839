"""What a regrade run reports: each trial's line and change, the closing line, regrade-summary.json."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runs.events import Regraded, RegradeStarted

TOLERANCE = 1e-9


def change_of(original: float | None, new: float | None, status: str) -> str | None:
    """same | fail->pass | pass->fail | reward a -> b | scored | unscored; None when no verdict came."""
    if status != "complete":
        return None
    if original is None:
        return "same" if new is None else "scored"
    if new is None:
        return "unscored"
    if abs(original - new) <= TOLERANCE:
        return "same"
    if original == 1.0:
        return "pass->fail"
    if new == 1.0:
        return "fail->pass"
    return f"reward {original:g} -> {new:g}"


def _reward_text(value: float | None) -> str:
    return "none" if value is None else f"{value:.2f}"


@dataclass
class TrialRow:
    """One trial of the regrade run, as the report and regrade-summary.json show it."""

    trial: str
    task: str
    attempt: str | None
    status: str  # complete | failed | interrupted | refused
    change: str | None = None
    original_reward: float | None = None
    new_reward: float | None = None
    message: str | None = None  # the refusal, the sandbox failure or the verifier error

    def line(self) -> str:
        if self.status == "refused":
            return f"[REFUSED] {self.trial}: {self.message}"
        rewards = f"reward {_reward_text(self.original_reward)} -> {_reward_text(self.new_reward)}"
        if self.status != "complete":
            return f"[REGRADE] {self.trial}: {self.status} ({self.message or rewards})"
        note = f"; verifier error: {self.message}" if self.message else ""
        return f"[REGRADE] {self.trial}: {self.change} ({rewards}{note})"


@dataclass
class RegradeReport:
    job_dir: Path
    regrade_id: str
    created_at: str
    reason: str | None
    rows: list[TrialRow] = field(default_factory=list)
    summary_path: Path | None = None
    interrupted: bool = False

    def _count(self, status: str) -> int:
        return sum(r.status == status for r in self.rows)

    @property
    def counts(self) -> dict[str, int]:
        """Complete regrades by change; every "reward a -> b" counts under "reward"."""
        changes = (r.change or "none" for r in self.rows if r.status == "complete")
        return dict(Counter("reward" if c.startswith("reward ") else c for c in changes))

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        if not any(r.status != "refused" for r in self.rows):
            return 2
        return 1 if self._count("failed") else 0

    @property
    def closing(self) -> str:
        regraded, refused, failed = (
            self._count("complete"),
            self._count("refused"),
            self._count("failed"),
        )
        if self.exit_code == 2:
            return f"Nothing to regrade in {self.job_dir}: {refused} trial(s) refused, none regradable."
        changes = ", ".join(f"{n} {k}" for k, n in sorted(self.counts.items()))
        text = f"Regraded {regraded} trial(s)" + (f" ({changes})" if changes else "")
        text += f", {refused} refused, {failed} failed"
        if self._count("interrupted"):
            text += f", {self._count('interrupted')} interrupted"
        return text + (f". Summary: {self.summary_path}" if self.summary_path else ".")

    def render(self) -> str:
        return "\n".join([*(r.line() for r in self.rows), self.closing])

    def to_dict(self) -> dict[str, Any]:
        """The regrade-summary.json document."""
        return {
            "job": self.job_dir.name,
            "job_dir": str(self.job_dir),
            "regrade_id": self.regrade_id,
            "created_at": self.created_at,
            "reason": self.reason,
            "counts": self.counts,
            "trials": {"regraded": self._count("complete")}
            | {s: self._count(s) for s in ("refused", "failed", "interrupted")},
            "interrupted": self.interrupted,
            "rows": [asdict(r) for r in self.rows],
        }


def regrade_line(event: Any) -> str:
    """The console line of one runs.events.Regraded."""
    return TrialRow(
        event.trial_name,
        event.task_name,
        event.rollout_name,
        event.status,
        event.change,
        event.reward_before,
        event.reward_after,
        event.message,
    ).line()


def console_line(event: Any) -> str | None:
    """What `bench regrade` prints for an event of its run (a RegradeStarted or a Regraded)."""
    if isinstance(event, RegradeStarted):
        return (
            f"Regrading {event.trials} trial(s) of {event.job_name} with the current verifiers "
            f"(regrade {event.regrade_id}, concurrency={event.concurrency})"
        )
    if isinstance(event, Regraded):
        return regrade_line(event)
    return None
