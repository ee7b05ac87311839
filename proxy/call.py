"""One model call in progress through the proxy: who makes it, where it goes, what was asked.
The ASGI app (proxy/app.py), its fast lane (proxy/fastlane.py) and the trajectory record
(proxy/exchange.py) all hold one."""

from __future__ import annotations

import time
from typing import Any

from proxy.prices import Price
from proxy.providers import Route
from proxy.registry import AttemptState


class Call:
    """One model call in progress: who, where to, and what was asked."""

    __slots__ = (
        "protocol",
        "state",
        "route",
        "price",
        "obj",
        "raw",
        "requested",
        "passed",
        "started_at",
        "t0",
        "sent",
        "strict",
    )

    def __init__(
        self,
        protocol: str,
        state: AttemptState,
        route: Route,
        price: Price | None,
        obj: dict[str, Any],
        raw: bytes,
        requested: str,
        passed: list[tuple[bytes, bytes]],
    ) -> None:
        self.protocol, self.state, self.route, self.price = protocol, state, route, price
        self.obj, self.raw, self.requested, self.passed = obj, raw, requested, passed
        self.started_at = time.time()
        self.t0 = time.perf_counter()
        self.sent = raw
        self.strict = True  # raw is strict JSON (no NaN, no integer beyond 64 bits)
