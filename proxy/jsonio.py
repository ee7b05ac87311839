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

    Fragment = orjson.Fragment  # valid JSON bytes that dumps() splices in as they are

    def dumps(obj: Any) -> bytes:
        try:
            return orjson.dumps(obj)
        except TypeError:
            return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=_str).encode()

    def _str(obj: Any) -> str:
        if isinstance(obj, Fragment):  # the standard library cannot splice it: the caller can
            raise TypeError("a Fragment beside a value orjson refuses")
        return str(obj)

except ImportError:  # pragma: no cover - exercised only without orjson

    class Fragment:  # type: ignore[no-redef]
        def __init__(self, contents: bytes) -> None:
            self.contents = contents

    def loads(data: bytes | str) -> Any:
        return json.loads(data)

    def parse(data: bytes | str) -> tuple[Any, bool]:
        return json.loads(data), True

    def dumps(obj: Any) -> bytes:
        return json.dumps(
            obj,
            separators=(",", ":"),
            ensure_ascii=False,
            default=lambda o: json.loads(o.contents) if isinstance(o, Fragment) else str(o),
        ).encode()
