"""The database router: on SQLite, scale-out's tables (Worker, Dispatcher, Lease, Coordination) are in the
`leases` database, a file of their own beside the index (settings.py); everything else, and
everything on PostgreSQL (whose row locks need no such split), is in `default`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings

T = TypeVar("T")
# waits between tries when the database dropped the connection (it restarted): about a minute
RECONNECT_WAITS = (0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0)


def reconnecting(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn` on this thread's connections; when the database dropped them (a PostgreSQL restart),
    they are closed, so the next query opens new ones, and `fn` is tried again for about a minute.
    For the long-lived threads of a run and a worker, which Django never hands a fresh
    connection (it does so between web requests only)."""
    from django.db import InterfaceError, OperationalError, connections

    for wait in RECONNECT_WAITS:
        try:
            return fn(*args, **kwargs)
        except (OperationalError, InterfaceError) as exc:
            if "locked" in str(exc):  # SQLite's busy writer: not a dropped connection
                raise
            connections.close_all()
            time.sleep(wait)
    return fn(*args, **kwargs)


LEASES = "leases"
LEASE_MODELS = frozenset(
    {"worker", "dispatcher", "lease", "coordination"}
)  # runs.models, by model_name


def leases_db() -> str:
    """The alias the lease tables are in (for `transaction.atomic(using=...)`)."""
    return LEASES if LEASES in settings.DATABASES else "default"


def _is_lease_model(model: Any) -> bool:
    return model._meta.app_label == "runs" and model._meta.model_name in LEASE_MODELS


class LeasesRouter:
    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return leases_db() if _is_lease_model(model) else None

    db_for_write = db_for_read

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        if _is_lease_model(type(obj1)) != _is_lease_model(type(obj2)):
            return LEASES not in settings.DATABASES
        return None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        if LEASES not in settings.DATABASES:
            return None
        lease_table = app_label == "runs" and model_name in LEASE_MODELS
        return db == (LEASES if lease_table else "default")
