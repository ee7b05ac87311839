"""What the index's projector (runs/index/projector.py) keeps from one event to the next: the job's
row, its trials' rows, a running attempt's phase and tool calls, and what a replayed job folder
(`bench index`) has shown so far; and what every handler may end with: the job's counts moved and
the event's own row (job, seq, kind, payload) added, in the handler's transaction."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runs.index.writer import record_event, refresh_job, trial_id
from runs.models import Job

THROTTLE_S = 1.0  # a running attempt's row moves at most this often for a frequent event


@dataclass
class Replay:
    """A job folder being replayed: what its first event said, and what its batches held."""

    settings: Mapping[str, Any]
    summary: Mapping[str, Any] | None
    live: bool
    ended: bool = False
    finished_at: str | None = None
    duration_s: float | None = None
    # attempt folders read, by trial and folder (a Harbor trial may be numbered anew as its task's
    # trials finish)
    seen: set[tuple[str, str]] = field(default_factory=set)
    agent_model: tuple[str, str] | None = (
        None  # of the first attempt, for a folder without settings
    )
    searched: int = 0  # pieces of its attempts' words put in the search index


class Projection:
    """One job's rows as events reach them, in order (one projector per job, or per operation)."""

    def __init__(self, job_dir: Path | None = None) -> None:
        self.job_path = str(job_dir.resolve()) if job_dir is not None else None
        self.job_id: int | None = None
        self.trials: dict[str, int] = {}
        self.phase: dict[str, str] = {}
        self.tools: dict[str, int] = {}
        self.written: dict[tuple[str, str], float] = {}
        self.replay: Replay | None = None

    def job(self) -> int | None:
        """The job's row: the one a job event opened, else the one at the projector's folder."""
        if self.job_id is None and self.job_path is not None:
            self.job_id = job_at(self.job_path)
        return self.job_id

    def trial(self, name: str, task: str, index: int) -> int:
        """A trial's row id (made if the plan did not name it: a folder from elsewhere)."""
        if name not in self.trials:
            assert self.job_id is not None
            self.trials[name] = trial_id(self.job_id, name, task, index)
        return self.trials[name]

    def due(self, kind: str, rollout: str) -> bool:
        """Whether a frequent event (a tool call, the proxy's count) may move its attempt's row now."""
        now = time.monotonic()
        if now - self.written.get((kind, rollout), 0.0) < THROTTLE_S:
            return False
        self.written[(kind, rollout)] = now
        return True

    def changed(self, kind: str, trial_name: str, payload: Mapping[str, Any]) -> None:
        """An attempt's row changed: the job's counts follow, and the event's row is added."""
        assert self.job_id is not None
        refresh_job(self.job_id)
        record_event(self.job_id, kind, trial_name, payload)

    def record(self, kind: str, trial_name: str, payload: Mapping[str, Any]) -> None:
        assert self.job_id is not None
        record_event(self.job_id, kind, trial_name, payload)


def job_at(path: str) -> int | None:
    return Job.objects.filter(path=str(Path(path).resolve())).values_list("id", flat=True).first()
