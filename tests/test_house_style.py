"""What the house style asks of every module, checked over the source: classes of one idea."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("runs", "proxy", "viewer", "benchflow_site")
MAX_METHODS = 20


def test_no_class_holds_more_than_twenty_methods():
    big = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    methods = [
                        b
                        for b in node.body
                        if isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef)
                    ]
                    if len(methods) > MAX_METHODS:
                        big.append(f"{path.relative_to(REPO)}:{node.name} ({len(methods)})")
    assert big == []
