"""Login throttling: failed logins counted per user name and per client address, in the index, so
a lock holds across every server process sharing it.

The USER_FREE-th failure of a user name (the ADDRESS_FREE-th of an address: many people may
share one) locks it for LOCK_S seconds, and each failure after the lock doubles that, up to
LOCK_MAX_S. While a name or an address is locked every login with it is refused
unchecked, the right password included, and the login form says so. A success clears the user
name's count (not the address's: one account an attacker holds must not reset the count of the
address it guesses others' passwords from). Counts are forgotten after FORGET_S without a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from runs.models import LoginThrottle

USER_FREE = 5
ADDRESS_FREE = 20
LOCK_S = 30.0
LOCK_MAX_S = 900.0
FORGET_S = 3600.0


def _lock_s() -> float:
    return float(getattr(settings, "BENCHFLOW_LOGIN_LOCK_S", LOCK_S))


@dataclass(frozen=True)
class Lock:
    what: str  # "account" | "address"
    seconds: int  # left, rounded up

    def text(self) -> str:
        whose = "for this account" if self.what == "account" else "from this address"
        return (
            f"Too many failed logins {whose}: it is locked for {self.seconds} more seconds, "
            "and no password is checked until then."
        )


def _keys(username: str | None, address: str | None) -> list[tuple[str, str, int]]:
    keys = []
    if username:
        keys.append((f"user:{username[:150]}", "account", USER_FREE))
    if address:
        keys.append((f"addr:{address[:45]}", "address", ADDRESS_FREE))
    return keys


def lock_for(excess: int) -> float:
    """Seconds of lock for the `excess`-th failure from the one that first locks (1-based)."""
    return float(min(LOCK_MAX_S, _lock_s() * 2 ** max(0, excess - 1)))


def locked(username: str | None, address: str | None, now: datetime) -> Lock | None:
    """The lock that refuses a login with this name from this address now, if any (the longer)."""
    what = {key: kind for key, kind, _ in _keys(username, address)}
    found: Lock | None = None
    rows = LoginThrottle.objects.filter(key__in=list(what), locked_until__gt=now)
    for key, until in rows.values_list("key", "locked_until"):
        seconds = int(-(-(until - now).total_seconds() // 1))
        if found is None or seconds > found.seconds:
            found = Lock(what[key], seconds)
    return found


def failed(username: str | None, address: str | None, now: datetime) -> None:
    """Count a failed login against the name and the address; lock either past its free ones."""
    forget = now - timedelta(seconds=FORGET_S)
    for key, _kind, free in _keys(username, address):
        with transaction.atomic():
            row, _ = LoginThrottle.objects.select_for_update().get_or_create(
                key=key, defaults={"last_failed_at": now}
            )
            if row.last_failed_at < forget and (row.locked_until is None or row.locked_until < now):
                row.failures = 0
            row.failures += 1
            row.last_failed_at = now
            if row.failures >= free:
                row.locked_until = now + timedelta(seconds=lock_for(row.failures - free + 1))
            row.save()
    # counts of names and addresses quiet for an hour, so guessed names do not pile up
    LoginThrottle.objects.filter(last_failed_at__lt=forget, locked_until__lt=now).delete()
    LoginThrottle.objects.filter(last_failed_at__lt=forget, locked_until__isnull=True).delete()


def succeeded(username: str) -> None:
    LoginThrottle.objects.filter(key=f"user:{username[:150]}").delete()


def unlock(username: str) -> None:
    """An admin's reset: the name's count and lock are gone (`bench user reset-password`)."""
    succeeded(username)
