"""How busy the run is: sampled each second, reported two minutes in and every five minutes after.

The report is a typed event (runs.events.UtilizationReported); the console reporter words it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runs.events import UtilizationReported

FIRST_REPORT_S = 120.0
EVERY_S = 300.0


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

    def report(self, now: float, uses_model: bool) -> UtilizationReported | None:
        """The samples since the last report, averaged (None without any); starts a new window."""
        window = now - (self.last_report if self.last_report is not None else self.started)
        samples, self.samples, self.last_report = self.samples, [], now
        return utilization_of(samples, self.slots, window, uses_model)


def utilization_of(
    samples: list[Sample], slots: int, window_s: float, uses_model: bool
) -> UtilizationReported | None:
    if not samples:
        return None
    n = len(samples)
    agent_time = sum(s.agent for s in samples)
    share = at_once = None
    if uses_model and agent_time:
        share = sum(s.agents_waiting_on_model for s in samples) / agent_time
        at_once = sum(s.in_flight for s in samples) / agent_time
    return UtilizationReported(
        window_s=window_s,
        slots=slots,
        setup=sum(s.setup for s in samples) / n,
        agent=sum(s.agent for s in samples) / n,
        waiting=round(sum(s.waiting for s in samples) / n),
        uses_model=uses_model,
        model_share=share,
        model_at_once=at_once,
        waited=any(s.waiting for s in samples),
    )
