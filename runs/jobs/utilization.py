"""How busy the run is: sampled each second, reported two minutes in and every five minutes after."""

from __future__ import annotations

from dataclasses import dataclass, field

FIRST_REPORT_S = 120.0
EVERY_S = 300.0
IDLE_SLOTS_WARN = 0.5  # slots idle on average while tasks waited
MODEL_RARE_WARN = 0.10  # agents had a model request in flight less than this share of their time


@dataclass
class Sample:
    setup: int  # trials preparing a sandbox or verifying
    agent: int  # trials whose agent runs
    waiting: int  # trials not yet started
    in_flight: int  # model requests in flight over all agents
    agents_waiting_on_model: int  # agents with at least one request in flight


@dataclass
class Utilization:
    slots: int
    samples: list[Sample] = field(default_factory=list)
    started: float = 0.0
    last_report: float | None = None

    def add(self, sample: Sample) -> None:
        self.samples.append(sample)

    def due(self, now: float) -> bool:
        if self.last_report is None:
            return now - self.started >= FIRST_REPORT_S
        return now - self.last_report >= EVERY_S

    def report(self, now: float, uses_model: bool) -> list[str]:
        """The line (and any warnings) for the samples since the last report; starts a new window."""
        window = now - (self.last_report if self.last_report is not None else self.started)
        samples, self.samples, self.last_report = self.samples, [], now
        return utilization_lines(samples, self.slots, window, uses_model)


def _minutes(seconds: float) -> str:
    return f"{max(1, round(seconds / 60))} min"


def utilization_lines(
    samples: list[Sample], slots: int, window_s: float, uses_model: bool
) -> list[str]:
    if not samples:
        return []
    n = len(samples)
    setup = sum(s.setup for s in samples) / n
    agent = sum(s.agent for s in samples) / n
    waiting = round(sum(s.waiting for s in samples) / n)
    running = setup + agent
    noun = "slot" if slots == 1 else "slots"
    line = (
        f"Utilization, last {_minutes(window_s)}: {running:.1f} of {slots} {noun} running "
        f"({setup:.1f} in setup, {agent:.1f} with the agent); {waiting} tasks waiting"
    )
    agent_time = sum(s.agent for s in samples)
    share = None
    if uses_model and agent_time:
        share = sum(s.agents_waiting_on_model for s in samples) / agent_time
        at_once = sum(s.in_flight for s in samples) / agent_time
        line += (
            f"; a model request in flight {share:.0%} of the agents' time "
            f"({at_once:.1f} requests at once on average)"
        )
    lines = [line]
    idle = slots - running
    if idle >= IDLE_SLOTS_WARN and any(s.waiting for s in samples):
        lines.append(
            f"  warning: {idle:.1f} of {slots} {noun} sat idle on average while tasks waited; "
            "sandbox set-up (image builds, container starts) is holding the run back"
        )
    if share is not None and share < MODEL_RARE_WARN:
        lines.append(
            f"  warning: the agents were waiting on the model only {share:.0%} of their time; "
            "their own tools (the sandbox) set the pace, so more -j needs more CPU and memory, not model quota"
        )
    return lines
