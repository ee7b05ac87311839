"""A worker's own log: a line for each attempt it starts and ends, naming the trial, so an operator
sees where each attempt ran; the lines are made here from the worker's typed events."""

from __future__ import annotations

import sys
import time
from typing import IO

from runs import events as ev

ENDINGS = {
    "cancelled": "stopped",
    "discarded": "called off before it started",
    "lost": "its lease was taken back (it runs elsewhere; nothing of this run counts)",
    "failed": "could not run it",
    "handed back": "given back to the queue before it started (another worker had a slot free)",
}


class WorkerReporter:
    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout

    def line(self, text: str) -> None:
        self.stream.write(f"{time.strftime('%H:%M:%S')} {text}\n")
        self.stream.flush()

    def __call__(self, event: ev.Event) -> None:
        if isinstance(event, ev.WorkerStarted):
            reaped = (
                f"; removed {event.reaped} container(s) left by dead processes"
                if event.reaped
                else ""
            )
            self.line(
                f"worker {event.worker} up: {event.slots} slot(s), {event.ahead} prepared "
                f"ahead, queue(s) "
                f"{', '.join(event.queues)}{reaped}"
            )
        elif isinstance(event, ev.WorkerAttemptStarted):
            self.line(
                f"[{event.worker}] started {event.trial_name} (attempt {event.attempt}, "
                f"{event.rollout_name}) of job {event.job_name}"
            )
        elif isinstance(event, ev.WorkerAttemptEnded):
            self.line(f"[{event.worker}] ended {event.trial_name}{_rollout(event)}: {_how(event)}")
        elif isinstance(event, ev.OrphansReaped):
            self.line(
                f"[{event.worker}] removed {event.containers} container(s) whose owning process "
                "on this machine died"
            )
        elif isinstance(event, ev.WorkerNote):
            self.line(f"[{event.worker}] {event.text}")


def _rollout(event: ev.WorkerAttemptEnded) -> str:
    return f" ({event.rollout_name})" if event.rollout_name else ""


def _how(event: ev.WorkerAttemptEnded) -> str:
    took = f" after {event.seconds:.1f}s"
    if event.state == "finished":
        if event.reward is not None:
            return f"reward {event.reward:g}{took}"
        return f"error: {(event.error or '')[:200]}{took}"
    text = ENDINGS.get(event.state, event.state)
    if event.error:
        text += f": {event.error[:200]}"
    return text + took
