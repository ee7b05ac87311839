"""Scale-out settings from the environment, read in one place (the same on every machine)."""

from __future__ import annotations

import os

DEFAULT_QUEUE = "benchflow"
# runs lost with their worker are moved here in the job folder (readers skip dot folders)
LOST_DIR = ".lost"


def redis_url() -> str:
    """BENCHFLOW_REDIS_URL: the broker and the hints between a coordinator and its workers."""
    return os.environ.get("BENCHFLOW_REDIS_URL", "").strip()


def queue() -> str:
    """The Celery queue `bench run` sends attempts to (a `bench worker` serves its --queues)."""
    return os.environ.get("BENCHFLOW_QUEUE", "").strip() or DEFAULT_QUEUE


def _seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


def lease_s() -> float:
    """How long a lease holds without being renewed: a worker killed mid-attempt is noticed after
    this long, and its attempt runs again elsewhere. Renewed every sixth of it."""
    return _seconds("BENCHFLOW_LEASE_S", 30.0)


def coordination_lease_s() -> float:
    """How long a job's coordinator holds the job unrenewed (a third less than an attempt's lease,
    at most 20 s): a worker adopts the job of a lost coordinator within about this long."""
    return min(lease_s(), 20.0)


def dispatcher_stale_s() -> float:
    """A coordinator not seen for this long is gone: workers start none of its attempts."""
    return max(3 * lease_s(), 15.0)


def reap_every_s() -> float:
    """How often a worker sweeps this machine's containers whose owning process died."""
    return _seconds("BENCHFLOW_REAP_EVERY_S", 30.0)


def worker_alive_s() -> float:
    """A worker seen within this long counts as up (it writes every 2 s)."""
    return 15.0
