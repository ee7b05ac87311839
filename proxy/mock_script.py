"""A `mock/script:FILE` model's replies, read from its file: the registry reads them when an
attempt registers, and the mock provider (proxy/mock.py) plays them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_script(path: str | Path) -> list[dict[str, Any]]:
    """A mock/script file: a JSON (or YAML) list of {text} / {shell} / {tool, args} / {error}
    replies."""
    text = Path(path).expanduser().read_text()
    if str(path).endswith((".yaml", ".yml")):
        import yaml

        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ValueError(f"{path}: a mock script is a list of objects")
    for reply in data:
        if not {"text", "shell", "tool", "error"} & set(reply):
            raise ValueError(f"{path}: each reply needs text, shell, tool or error: {reply!r}")
        if "tool" in reply and not isinstance(reply.get("args", {}), dict):
            raise ValueError(f"{path}: a tool reply's args are an object of arguments: {reply!r}")
    return data
