"""A `mock/script:FILE` model's replies, read from its file: the registry reads them when an
attempt registers, and the mock provider (proxy/mock.py) plays them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_script(path: str | Path) -> list[dict[str, Any]]:
    """A mock/script file: a JSON (or YAML) list of {text} / {shell} / {tool, args} / {error}
    replies. A file that is not one raises ValueError saying where, never what it holds: the
    message reaches logs and pages, and the path may name any file."""
    try:
        text = Path(path).expanduser().read_text()
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file") from None
    if str(path).endswith((".yaml", ".yml")):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" (line {mark.line + 1})" if mark is not None else ""
            raise ValueError(f"{path}: not YAML{at}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not JSON (line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ValueError(f"{path}: a mock script is a list of objects")
    for n, reply in enumerate(data, 1):
        if not {"text", "shell", "tool", "error"} & set(reply):
            raise ValueError(f"{path}: reply {n} needs text, shell, tool or error")
        if "tool" in reply and not isinstance(reply.get("args", {}), dict):
            raise ValueError(f"{path}: reply {n}: a tool reply's args are an object of arguments")
    return data
