"""Fast JSON in and out: orjson when installed, the standard library otherwise."""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson

    def loads(data: bytes | str) -> Any:
        return parse(data)[0]

    def parse(data: bytes | str) -> tuple[Any, bool]:
        """(the value, whether `data` is strict JSON that may be spliced into a line as is)."""
        try:
            return orjson.loads(data), True
        except orjson.JSONDecodeError:
            # orjson refuses integers beyond 64 bits, and NaN; the standard library does not.
            return json.loads(data), False

    def dumps(obj: Any) -> bytes:
        try:
            return orjson.dumps(obj)
        except TypeError:
            return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=str).encode()

except ImportError:  # pragma: no cover - exercised only without orjson

    def loads(data: bytes | str) -> Any:
        return json.loads(data)

    def parse(data: bytes | str) -> tuple[Any, bool]:
        return json.loads(data), True

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=str).encode()
