"""An attempt before it runs: its plan, and its sandbox prepared (ahead of its turn, for the warm pool)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runs.results.trial_result import AttemptTiming
from runs.sandboxes.docker import Sandbox
from runs.tasks.load import Task


@dataclass
class AttemptPlan:
    task: Task
    trial_name: str
    trial_index: int
    attempt: int  # 1-based within the trial
    env_digest: str


@dataclass
class Prepared:
    plan: AttemptPlan
    attempt_dir: Path
    started_at: str
    t0: float
    sandbox: Sandbox | None = None
    workdir: str | None = None
    error: str | None = None
    error_category: str | None = None
    verifier_image: str | None = None  # a separate verifier's, built with the sandbox
    verifier_error: str | None = None  # that image could not be had: nothing runs
    verifier_error_category: str | None = None
    timing: AttemptTiming = field(default_factory=AttemptTiming)
    cancelled_by: str | None = (
        None  # the cap's `budget reached: ...`, set before a job cap cancels it
    )
    cancelled_record: dict[str, Any] | None = (
        None  # the timing.json written when a job cap cancelled it
    )
    ready_at: float | None = None  # when its sandbox was ready (monotonic)
    resources: dict[str, Any] | None = None  # the CPUs and memory it got, and what it asked for
    began: bool = False
    running: bool = False  # its agent already started (on a worker, once its sandbox was up)

    def begin(self, now: float | None = None) -> None:
        """It takes its slot: the trial's clock (t0) leaves out the time its prepared sandbox waited
        for one, so timing.total and --max-sandbox-seconds count set-up and run, not the queue."""
        if self.began:
            return
        self.began = True
        if self.ready_at is not None:
            self.t0 += max((time.monotonic() if now is None else now) - self.ready_at, 0.0)
