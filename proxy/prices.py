"""Price table: USD per 1M tokens per model, shipped data plus the user's own file."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from proxy.usage import Usage

BUILTIN_SOURCE = "benchflow-price-table"
USER_SOURCE = "user-price-table"
_BUILTIN = Path(__file__).with_name("prices.json")


@dataclass(frozen=True, slots=True)
class Price:
    """USD per 1M tokens; `source` says which table priced it."""

    input: float
    cached_input: float
    cache_write: float
    output: float
    source: str = BUILTIN_SOURCE
    placeholder: bool = False


def user_prices_path(env: Mapping[str, str] = os.environ) -> Path:
    if env.get("BENCHFLOW_PRICES"):
        return Path(env["BENCHFLOW_PRICES"]).expanduser()
    return Path.home() / ".config" / "benchflow-site" / "prices.json"


def _parse(data: object, source: str) -> dict[str, Price]:
    models = data.get("models", data) if isinstance(data, dict) else {}
    table: dict[str, Price] = {}
    for name, row in models.items():
        if name.startswith("_") or not isinstance(row, dict):
            continue
        inp = float(row["input"])
        table[name] = Price(
            input=inp,
            cached_input=float(row.get("cached_input", inp)),
            cache_write=float(row.get("cache_write", inp)),
            output=float(row["output"]),
            source=source,
            placeholder=bool(row.get("placeholder", False)),
        )
    return table


def load_table(user_file: Path | None) -> dict[str, Price]:
    """Built-in table, then the user's file on top (its rows win)."""
    table = _parse(json.loads(_BUILTIN.read_text()), BUILTIN_SOURCE)
    if user_file is not None and user_file.is_file():
        table.update(_parse(json.loads(user_file.read_text()), USER_SOURCE))
    return table


@lru_cache(maxsize=8)
def _cached_table(user_file: str, mtime: float) -> dict[str, Price]:
    return load_table(Path(user_file))


def price_table(env: Mapping[str, str] = os.environ) -> dict[str, Price]:
    path = user_prices_path(env)
    try:
        mtime = path.stat().st_mtime
    except OSError:
        mtime = -1.0
    return _cached_table(str(path), mtime)


def price_for(model: str, env: Mapping[str, str] = os.environ) -> Price | None:
    """Exact id, then the id without provider prefixes, then the longest table id inside it."""
    table = price_table(env)
    name = model.strip()
    if name in table:
        return table[name]
    if name.startswith("mock/"):
        kind = name[5:].split(":", 1)[0]
        return table.get(f"mock/{kind}")
    while "/" in name:
        name = name.split("/", 1)[1]
        if name in table:
            return table[name]
    if name.startswith("claude") and "." in name:
        name = name.replace(".", "-")  # OpenRouter spells claude-sonnet-4.5
    best = max((k for k in table if "/" not in k and k in name), key=len, default=None)
    return table[best] if best else None


def cost_usd(usage: Usage, price: Price | None) -> float | None:
    """Dollars for one call; None when unpriced."""
    if price is None:
        return None
    fresh = max(usage.input_tokens - usage.cache_read_tokens - usage.cache_creation_tokens, 0)
    return (
        fresh * price.input
        + usage.cache_read_tokens * price.cached_input
        + usage.cache_creation_tokens * price.cache_write
        + usage.output_tokens * price.output
    ) / 1_000_000
