"""Job caps (--max-cost-usd, --max-tokens, --max-sandbox-seconds, --max-rollouts), as the seed table says.

What counts, when it is checked and whether running trials are cancelled or finish:
cost and tokens of finished rollouts, between starts, cancelled; sandbox seconds of finished and
running trials, as they run, cancelled; rollouts started, at each start, they finish. Everything
the job spent before (a resume) counts too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runs.events import BudgetReached, CostUnknown, Event


@dataclass
class Spent:
    cost_usd: float = 0.0
    sandbox_seconds: float = 0.0
    tokens: int = 0
    rollouts: int = 0
    usd_unknown_trials: int = 0
    tokens_unknown_trials: int = 0
    finished: int = 0

    def add_finished(self, result: dict[str, Any]) -> None:
        usage = result.get("agent_result") or {}
        cost, tokens = usage.get("cost_usd"), usage.get("total_tokens")
        if cost is None:
            self.usd_unknown_trials += 1
        else:
            self.cost_usd += float(cost)
        if tokens is None:
            self.tokens_unknown_trials += 1
        else:
            self.tokens += int(tokens)
        self.sandbox_seconds += float((result.get("timing") or {}).get("total") or 0.0)
        self.finished += 1

    def add_cancelled(self, record: dict[str, Any], seconds: bool = True) -> None:
        """An attempt a job cap cancelled, from its timing.json (it has no result.json): what its agent
        spent before (`agent_result`) and its seconds (`total`) count, but it is no finished trial (nor
        one without a cost)."""
        usage = record.get("agent_result") or {}
        if usage.get("cost_usd") is not None:
            self.cost_usd += float(usage["cost_usd"])
        if usage.get("total_tokens") is not None:
            self.tokens += int(usage["total_tokens"])
        if seconds:
            self.sandbox_seconds += float(record.get("total") or 0.0)


@dataclass
class JobBudget:
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    max_sandbox_seconds: float | None = None
    max_rollouts: int | None = None
    spent: Spent = field(default_factory=Spent)
    emit: Callable[[Event], None] = lambda _event: None
    reason: str | None = None  # "budget reached: ..." once a cap is reached
    reached_by: str | None = None
    running_seconds: float = 0.0
    in_progress: int = (
        0  # rollouts admitted in this run and not yet ended (sandbox set-up included)
    )
    pending: int = 0  # admitted, sandbox prepared or preparing, not yet started: no rollout yet
    _warned_usd: bool = False
    _changed: asyncio.Event | None = None

    @property
    def active(self) -> bool:
        return any(
            v is not None
            for v in (
                self.max_cost_usd,
                self.max_tokens,
                self.max_sandbox_seconds,
                self.max_rollouts,
            )
        )

    def caps(self) -> dict[str, Any]:
        return {
            "max_cost_usd": self.max_cost_usd,
            "max_sandbox_seconds": self.max_sandbox_seconds,
            "max_tokens": self.max_tokens,
            "max_rollouts": self.max_rollouts,
        }

    def seed(self, earlier_results: Iterable[dict[str, Any] | float | None]) -> None:
        """Count what earlier runs of this job spent: a result, the timing.json of an attempt a job cap
        cancelled (`cancelled_by`; no result.json), the seconds of one a signal cancelled while it ran,
        or None for one with neither."""
        for result in earlier_results:
            self.spent.rollouts += 1
            if isinstance(result, dict) and result.get("cancelled_by") is not None:
                self.spent.add_cancelled(result)
            elif isinstance(result, dict):
                self.spent.add_finished(result)
            elif result is not None:  # seconds of an attempt cancelled while it ran
                self.spent.sandbox_seconds += float(result)
        self._check_reached()

    # -- checks ---------------------------------------------------------------------------------
    def _check_reached(self, running_seconds: float = 0.0) -> bool:
        if self.reason is not None:
            return True
        s = self.spent
        if self.max_cost_usd is not None and s.cost_usd >= self.max_cost_usd:
            self.reached_by = "cost"
            self.reason = (
                f"budget reached: ${s.cost_usd:.4f} USD spent of a ${self.max_cost_usd:.4f} cap"
            )
        elif self.max_tokens is not None and s.tokens >= self.max_tokens:
            self.reached_by = "tokens"
            self.reason = f"budget reached: {s.tokens:,} tokens spent of a {self.max_tokens:,} cap"
        elif (
            self.max_sandbox_seconds is not None
            and s.sandbox_seconds + running_seconds >= self.max_sandbox_seconds
        ):
            self.reached_by = "sandbox_seconds"
            self.running_seconds = running_seconds
            self.reason = (
                f"budget reached: {s.sandbox_seconds + running_seconds:.1f} sandbox-seconds spent "
                f"of a {self.max_sandbox_seconds:.1f} cap"
            )
        elif self.max_rollouts is not None and s.rollouts >= self.max_rollouts:
            self.reached_by = "rollouts"
            self.reason = (
                f"budget reached: {s.rollouts} rollouts started of a {self.max_rollouts} cap"
            )
        return self.reason is not None

    @property
    def reached(self) -> bool:
        return self.reason is not None

    def cancels_running(self) -> bool:
        """Spend caps cancel running trials; the rollout cap lets them finish."""
        return self.reached_by != "rollouts"

    def reached_event(self, running: int) -> BudgetReached:
        """What the job says once a cap is reached, with the running trials it stops or lets finish."""
        if not self.cancels_running():
            # The rollout cap is met at a start, before the trials it admitted leave sandbox set-up;
            # they run on and finish, so they count as running.
            running = max(running, self.in_progress)
        return BudgetReached(self.reason or "", running, self.cancels_running())

    def _projection_allows(self, running: int) -> bool:
        """After a rollout finished, a new one waits while spent + (running+1) x mean would reach a cap.

        With nothing running the next one starts while the cap is not reached, so a job passes a
        cost or token cap by about one trial's spend at -j 1.
        """
        if running == 0 or self.spent.finished == 0:
            return True
        s = self.spent
        n = running + 1
        if self.max_cost_usd is not None and s.finished > s.usd_unknown_trials:
            mean = s.cost_usd / (s.finished - s.usd_unknown_trials)
            if s.cost_usd + n * mean >= self.max_cost_usd:
                return False
        if self.max_tokens is not None and s.finished > s.tokens_unknown_trials:
            mean_t = s.tokens / (s.finished - s.tokens_unknown_trials)
            if s.tokens + n * mean_t >= self.max_tokens:
                return False
        return True

    def _rollouts_left(self) -> bool:
        """Room for one more admitted rollout: those started plus those admitted and not yet started."""
        return self.max_rollouts is None or self.spent.rollouts + self.pending < self.max_rollouts

    async def admit(self, running: Callable[[], int]) -> bool:
        """Wait for a rollout to be allowed to prepare and start; False once a cap is reached (start
        nothing more). The rollout counts once it starts (`on_start`), not here: a warm-pool sandbox
        that never runs is no rollout."""
        while True:
            if self._check_reached(self.running_seconds):
                return False
            # trials still setting up their sandbox will spend too: they count as running
            if self._rollouts_left() and self._projection_allows(max(running(), self.in_progress)):
                self.pending += 1
                self.in_progress += 1
                return True
            if self._changed is None:
                self._changed = asyncio.Event()
            self._changed.clear()
            await self._changed.wait()

    def on_start(self) -> bool:
        """An admitted rollout starts (takes its slot): it counts now; True when this start reached the
        rollout cap."""
        self.pending = max(self.pending - 1, 0)
        self.spent.rollouts += 1
        self._wake()
        if self.reached or self.max_rollouts is None or self.spent.rollouts < self.max_rollouts:
            return False
        self.reached_by = "rollouts"
        self.reason = (
            f"budget reached: {self.spent.rollouts} rollouts started of a {self.max_rollouts} cap"
        )
        return True

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def on_finish(self, result: dict[str, Any]) -> bool:
        """Count a finished rollout; True when this finish reached a spend cap."""
        was = self.reached
        self.in_progress = max(self.in_progress - 1, 0)
        self.spent.add_finished(result)
        usage = result.get("agent_result") or {}
        if self.max_cost_usd is not None and usage.get("cost_usd") is None and not self._warned_usd:
            self._warned_usd = True
            self.emit(CostUnknown())
        self._wake()
        return self._check_reached() and not was

    def on_cancelled(self, record: dict[str, Any]) -> None:
        """A running rollout a cap cancelled, with what it spent (its timing.json record); its seconds
        were counted as it ran."""
        self.spent.add_cancelled(record, seconds=False)
        self.on_discard()

    def on_discard(self, started: bool = True) -> None:
        """An admitted rollout that ended without a result: cancelled while it ran (`started`), or
        its prepared sandbox was discarded before it started (no rollout): wake waiters."""
        self.in_progress = max(self.in_progress - 1, 0)
        if not started:
            self.pending = max(self.pending - 1, 0)
        self._wake()

    def check_running(self, elapsed: list[float]) -> bool:
        """The sandbox-seconds cap counts running trials too; True when it is reached now."""
        if self.max_sandbox_seconds is None or self.reached:
            return False
        return self._check_reached(sum(elapsed))

    def summary_block(
        self,
        cancelled: Sequence[str],
        not_started: Sequence[str],
        retries_stopped: Sequence[str] = (),
    ) -> dict[str, Any]:
        """`cancelled` and `not_started` are trials kept from running (no failures); `retries_stopped`
        errored trials whose retry the cap kept from running, counted by their last attempt."""
        s = self.spent
        return {
            "caps": self.caps(),
            "spent": {
                "cost_usd": round(s.cost_usd, 6),
                "sandbox_seconds": round(
                    s.sandbox_seconds
                    + (self.running_seconds if self.reached_by == "sandbox_seconds" else 0.0),
                    1,
                ),
                "tokens": s.tokens,
                "rollouts": s.rollouts,
                "usd_unknown_trials": s.usd_unknown_trials,
                "tokens_unknown_trials": s.tokens_unknown_trials,
            },
            "stopped": self.reached,
            "reason": self.reason,
            "cancelled": list(cancelled),
            "not_started": list(not_started),
            "retries_stopped": list(retries_stopped),
        }
