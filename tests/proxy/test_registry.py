from __future__ import annotations

import threading

import pytest

from proxy.prices import price_for
from proxy.providers import ProviderError
from proxy.registry import (
    Attempt,
    AttemptUsage,
    Registry,
    budget_message,
    check_budget,
    error_class_for,
)
from proxy.usage import Usage


def test_budget_message_matches_benchflow() -> None:
    assert budget_message("tokens", 60_000, 63_260, 6) == (
        "trial_budget_spent: the token budget of 60,000 is spent (63,260 tokens, 6 turns used)"
    )
    assert budget_message("turns", 5, 1_234, 5) == (
        "trial_budget_spent: the turn budget of 5 is spent (1,234 tokens, 5 turns used)"
    )


@pytest.mark.parametrize(
    ("tokens", "turns", "token_budget", "turn_budget", "refused_by"),
    [
        (0, 0, None, None, None),
        (59_999, 5, 60_000, None, None),
        (60_000, 5, 60_000, None, "tokens"),  # spent means used >= budget
        (63_260, 6, 60_000, None, "tokens"),
        (0, 4, None, 5, None),
        (0, 5, None, 5, "turns"),
        (70_000, 5, 60_000, 5, "tokens"),  # both spent: tokens is named
        (10, 5, 60_000, 5, "turns"),
        (0, 0, 0, None, "tokens"),  # a zero budget refuses the first call
    ],
)
def test_budget_rule(
    tokens: int,
    turns: int,
    token_budget: int | None,
    turn_budget: int | None,
    refused_by: str | None,
) -> None:
    u = AttemptUsage(
        "a",
        "m",
        total_tokens=tokens,
        turns=turns,
        token_budget=token_budget,
        turn_budget=turn_budget,
    )
    refusal = check_budget(u)
    assert (refusal.measure if refusal else None) == refused_by


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (200, None),
        (400, "provider_rejected"),
        (401, "provider_auth"),
        (403, "provider_auth"),
        (429, "provider_rate_limit"),
        (500, "api_error"),
        (529, "api_error"),
    ],
)
def test_error_classes(status: int, cls: str | None) -> None:
    assert error_class_for(status) == cls


def test_turns_are_reserved_when_a_call_starts() -> None:
    reg = Registry({})
    key = reg.register(Attempt("a", "mock/echo", turn_budget=2))
    state = reg.lookup(key)
    assert state is not None
    assert reg.begin_call(state) is None
    assert reg.begin_call(state) is None
    refusal = reg.begin_call(state)  # two in flight, none finished: still refused
    assert refusal is not None and refusal.measure == "turns"
    u = reg.usage(key)
    assert (u.turns, u.in_flight, u.refused_calls, u.stopped_by) == (2, 2, 1, "turns")
    assert u.stopped_at == {"tokens": 0, "turns": 2}


def test_token_budget_counts_finished_calls_only() -> None:
    reg = Registry({})
    key = reg.register(Attempt("a", "mock/echo", token_budget=100))
    state = reg.lookup(key)
    assert state is not None
    price = price_for("mock/echo", {})
    assert reg.begin_call(state) is None
    assert reg.begin_call(state) is None  # in flight beside the first
    reg.end_call(state, Usage(90, 30, 0, 0, 120), price, 0.1, 200, None, None)
    reg.end_call(state, Usage(50, 10, 0, 0, 60), price, 0.1, 200, None, None)
    assert reg.usage("a").total_tokens == 180  # passed by the calls already in flight
    assert reg.begin_call(state) is not None  # but no new call starts
    u = reg.usage("a")
    assert (u.calls, u.turns, u.refused_calls, u.stopped_by) == (2, 2, 1, "tokens")
    assert u.stopped_at == {"tokens": 180, "turns": 2}
    assert u.cost_usd == pytest.approx((140 * 1.0 + 40 * 5.0) / 1e6)


def test_on_budget_spent_is_called_once() -> None:
    calls: list[str] = []
    reg = Registry({})
    key = reg.register(Attempt("a7", "mock/echo", turn_budget=0, on_budget_spent=calls.append))
    state = reg.lookup(key)
    assert state is not None
    for _ in range(3):
        assert reg.begin_call(state) is not None
    assert calls == ["a7"]
    assert reg.usage(key).refused_calls == 3


def test_a_failing_callback_does_not_break_the_refusal() -> None:
    def boom(_: str) -> None:
        raise RuntimeError("runner bug")

    reg = Registry({})
    state = reg.lookup(reg.register(Attempt("a", "mock/echo", turn_budget=0, on_budget_spent=boom)))
    assert state is not None and reg.begin_call(state) is not None


def test_keys_are_random_and_unguessable() -> None:
    reg = Registry({})
    keys = {reg.register(Attempt(f"a{n}", "mock/echo")) for n in range(50)}
    assert len(keys) == 50
    assert all(k.startswith("bf-") and len(k) >= 40 for k in keys)


def test_registration_refuses_unroutable_models_and_duplicates() -> None:
    reg = Registry({})
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY"):
        reg.register(Attempt("a", "sonnet"))
    reg.register(Attempt("b", "mock/echo"))
    with pytest.raises(ValueError, match="already registered"):
        reg.register(Attempt("b", "mock/echo"))


def test_unregister_forgets_the_key() -> None:
    reg = Registry({})
    key = reg.register(Attempt("a", "mock/echo"))
    final = reg.unregister(key)
    assert final is not None and final.attempt_id == "a"
    assert reg.lookup(key) is None
    with pytest.raises(KeyError):
        reg.usage("a")
    assert reg.unregister(key) is None


def test_usage_snapshots_errors_and_busy_time() -> None:
    reg = Registry({})
    key = reg.register(Attempt("a", "mock/echo"))
    state = reg.lookup(key)
    assert state is not None
    reg.begin_call(state)
    reg.end_call(state, None, None, 0.25, 429, "provider_rate_limit", "HTTP 429: slow down")
    reg.begin_call(state)
    reg.end_call(state, None, None, 0.5, 500, "api_error", "HTTP 500: oops")
    u = reg.usage(key)
    assert u.errors == {"provider_rate_limit": 1, "api_error": 1}
    assert u.last_error == "HTTP 500: oops"
    assert u.request_seconds == pytest.approx(0.75)
    assert u.busy_seconds >= 0 and u.in_flight == 0
    u.errors["x"] = 1  # a snapshot: changing it changes nothing
    assert "x" not in reg.usage(key).errors


def test_register_and_usage_from_many_threads() -> None:
    reg = Registry({})
    keys: list[str] = []
    lock = threading.Lock()

    def work(n: int) -> None:
        for i in range(50):
            key = reg.register(Attempt(f"t{n}-{i}", "mock/echo", turn_budget=3))
            state = reg.lookup(key)
            assert state is not None
            for _ in range(5):
                reg.begin_call(state)
            with lock:
                keys.append(key)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(keys) == 400
    assert all(reg.usage(k).turns == 3 and reg.usage(k).refused_calls == 2 for k in keys)
