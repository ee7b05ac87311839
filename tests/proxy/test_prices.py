from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.prices import BUILTIN_SOURCE, USER_SOURCE, Price, cost_usd, price_for
from proxy.usage import Usage

NO_USER = {"BENCHFLOW_PRICES": "/nonexistent/prices.json"}


@pytest.mark.parametrize(
    ("model", "table_id_input"),
    [
        ("claude-sonnet-4-5", 3.0),  # exact
        ("anthropic/claude-sonnet-4-5", 3.0),  # without the provider prefix
        ("claude-sonnet-4-5-20250929", 3.0),  # dated id: longest id inside it
        ("claude-opus-4-1-20250805", 15.0),  # opus-4-1 beats opus-4
        ("claude-opus-4-5", 5.0),
        ("openrouter/anthropic/claude-haiku-4.5", 1.0),  # OpenRouter's dotted spelling
        ("openai/gpt-5-mini-2025-08-07", 0.25),  # gpt-5-mini beats gpt-5
        ("gpt-5.1-codex-max", 1.25),
        ("gpt-4o-mini", 0.15),
        ("gpt-4.1", 2.0),
        ("deepseek/deepseek-v4-flash", 0.28),
        ("deepseek-v4-pro", 0.28),
        ("mock/oracle", 1.0),
        ("mock/script:/tmp/replies.json", 1.0),
    ],
)
def test_price_lookup(model: str, table_id_input: float) -> None:
    price = price_for(model, NO_USER)
    assert price is not None
    assert price.input == table_id_input
    assert price.source == BUILTIN_SOURCE


@pytest.mark.parametrize(
    "model",
    [
        "xiaomi/mimo-v2.6-flash",
        "mimo/mimo-v2.6-flash",
        "openai-compatible/some-local-model",
        "gpt-99",
    ],
)
def test_unpriced_models_have_no_price(model: str) -> None:
    assert price_for(model, NO_USER) is None


def test_deepseek_placeholder_rates() -> None:
    price = price_for("deepseek/deepseek-v4-flash", NO_USER)
    assert price is not None
    assert (price.input, price.cached_input, price.output) == (0.28, 0.028, 0.42)
    assert price.placeholder


def test_user_file_extends_and_overrides(tmp_path: Path) -> None:
    user = tmp_path / "prices.json"
    user.write_text(
        json.dumps(
            {
                "models": {
                    "mimo-v2.6-flash": {"input": 0.1, "output": 0.3},
                    "claude-sonnet-4-5": {
                        "input": 2.0,
                        "cached_input": 0.2,
                        "cache_write": 2.5,
                        "output": 10.0,
                    },
                }
            }
        )
    )
    env = {"BENCHFLOW_PRICES": str(user)}
    mimo = price_for("xiaomi/mimo-v2.6-flash", env)
    assert mimo == Price(0.1, 0.1, 0.1, 0.3, USER_SOURCE)
    sonnet = price_for("claude-sonnet-4-5-20250929", env)
    assert sonnet is not None and sonnet.input == 2.0 and sonnet.source == USER_SOURCE
    haiku = price_for("claude-haiku-4-5", env)
    assert haiku is not None and haiku.source == BUILTIN_SOURCE


@pytest.mark.parametrize(
    ("usage", "want"),
    [
        # 1M fresh input at $3 + 1M output at $15
        (Usage(1_000_000, 1_000_000, 0, 0, 2_000_000), 18.0),
        # cache reads at $0.30, cache writes at $3.75, the rest of input at $3
        (Usage(1_000_000, 0, 700_000, 200_000, 1_000_000), 0.1 * 3 + 0.7 * 0.3 + 0.2 * 3.75),
        (Usage(0, 0, 0, 0, 0), 0.0),
    ],
)
def test_cost(usage: Usage, want: float) -> None:
    price = Price(3.0, 0.3, 3.75, 15.0)
    assert cost_usd(usage, price) == pytest.approx(want)


def test_cost_of_an_unpriced_call_is_none() -> None:
    assert cost_usd(Usage(10, 10, 0, 0, 20), None) is None
