"""Whether a job's attempts run on workers or in this process (`--workers auto|on|off`)."""

from __future__ import annotations

from dataclasses import dataclass

from runs.events import WorkersChosen
from runs.problems import UserError
from runs.workers import config, leases
from runs.workers.broker import Broker
from runs.workers.channel import redis_answers


@dataclass(frozen=True)
class ScaleOut:
    """A job runs its attempts on workers: through this broker and queue, Redis for the hints."""

    broker: Broker
    redis_url: str
    queue: str
    workers: list[tuple[str, int]]  # (name, slots) of the workers up when the job started

    def chosen(self, adopted: tuple[str, ...] = ()) -> WorkersChosen:
        return WorkersChosen(
            self.queue,
            tuple(f"{name} ({slots} slots)" for name, slots in self.workers),
            sum(slots for _name, slots in self.workers),
            adopted,
        )


def choose(workers: str, broker: Broker | None) -> ScaleOut | None:
    """`on`: workers, or a UserError saying what is missing; `auto`: workers when Redis is set and
    answers and a worker serving the queue was seen in the last seconds; `off`: in process."""
    url, queue = config.redis_url(), config.queue()
    if workers == "off" or (workers == "auto" and (not url or broker is None)):
        return None
    if not url or broker is None:
        raise UserError(
            "--workers on: no broker to send attempts through; fix: export "
            "BENCHFLOW_REDIS_URL=redis://HOST:6379/0 here and where each `bench worker` runs"
        )
    if (why := redis_answers(url)) is not None:
        if workers == "auto":
            return None
        raise UserError(
            f"--workers on: Redis at {url} does not answer ({why}); fix: start it, or run "
            "with --workers off",
            exit_code=1,
        )
    up = leases.live_workers(queue)
    if workers == "auto" and not up:
        return None
    return ScaleOut(broker, url, queue, up)
