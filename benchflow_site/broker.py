"""The broker a job sends its attempts through when it scales out: Celery on BENCHFLOW_REDIS_URL,
else none (Celery is imported only when there is a broker to use)."""

from __future__ import annotations

import os
from typing import Any


def broker() -> Any:
    """A runs.workers.broker.Broker, or None without BENCHFLOW_REDIS_URL."""
    if not os.environ.get("BENCHFLOW_REDIS_URL"):
        return None
    from benchflow_site.celery import CeleryBroker

    return CeleryBroker()
