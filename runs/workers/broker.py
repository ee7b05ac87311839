"""What the coordinator needs of the broker: send a lease's id to the workers' queue."""

from __future__ import annotations

from typing import Protocol


class Broker(Protocol):
    """benchflow_site.celery.CeleryBroker; raises when the broker cannot take the message."""

    def enqueue(self, lease: int, queue: str) -> None: ...
