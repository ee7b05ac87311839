"""A coordinator on the worker fleet renews its lease whatever Redis does: sealing the job's
secret values for the next coordinator waits on Redis (paused, or away), the renewal never."""

from __future__ import annotations

import threading

from runs.operations import fleet


def test_the_lease_is_renewed_while_sealing_waits_on_a_paused_redis(monkeypatch):
    # given a coordinator whose Redis holds every command (CLIENT PAUSE)
    paused = threading.Event()
    seals: list[int] = []

    def seal_waits(pk: int, secret: dict) -> None:
        seals.append(pk)
        paused.wait(30)

    renewed = threading.Semaphore(0)
    monkeypatch.setattr(fleet, "seal_secrets", seal_waits)
    monkeypatch.setattr(fleet, "coordination_lease_s", lambda: 0.06)
    monkeypatch.setattr(fleet.coordination, "renew", lambda pk, fence, s: renewed.release() or "ok")
    monkeypatch.setattr(fleet.coordination, "renewed", lambda sent_at: None)
    monkeypatch.setattr("django.db.close_old_connections", lambda: None)
    beat = fleet.Heartbeat(5, 1, {"API_TOKEN": "sk-live-abcdefghijklmnop"})
    # when it beats
    beat.start()
    try:
        # then it renews again and again while the one seal waits, and starts no second seal
        for _ in range(10):
            assert renewed.acquire(timeout=10)
        assert seals == [5]
    finally:
        beat.stop()
        paused.set()
