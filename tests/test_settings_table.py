"""docs/settings.md lists every environment variable the code reads: a read the table lacks, or a
row no code reads any more, fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("runs", "proxy", "viewer", "benchflow_site")
TABLE = REPO / "docs" / "settings.md"
ROW = re.compile(r"^\|\s*`([A-Z][A-Z0-9_<>]*)`\s*\|")
ENVIRON = re.compile(r"\benviron\b|\benv\b|^env$")
READERS = {"get", "pop", "setdefault", "getenv"}
HELPERS = {"setting", "_seconds"}  # runs.environment.setting, runs.workers.config._seconds


def documented() -> list[str]:
    return [m[1] for line in TABLE.read_text().splitlines() if (m := ROW.match(line))]


def _strings(node: ast.AST | None) -> list[str]:
    """The str constants of a literal tuple or list (or a lone str)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [
            e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        ]
    return []


class Reads(ast.NodeVisitor):
    """The names a module reads from its environment: literal names, module constants naming
    them, and the names a loop or a comprehension over a literal tuple goes through."""

    def __init__(self, tree: ast.Module) -> None:
        self.found: set[str] = set()
        self.constants: dict[str, list[str]] = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
                if isinstance(target, ast.Name) and _strings(stmt.value):
                    self.constants[target.id] = _strings(stmt.value)
        self.bound: list[dict[str, list[str]]] = [{}]

    def names(self, node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Name):
            for scope in reversed(self.bound):
                if node.id in scope:
                    return scope[node.id]
            return self.constants.get(node.id, [])
        return []

    def _loop(self, target: ast.AST, iterable: ast.AST) -> dict[str, list[str]]:
        values = _strings(iterable) or self.names(iterable)
        return {target.id: values} if isinstance(target, ast.Name) and values else {}

    def visit_For(self, node: ast.For) -> None:
        self.bound.append(self._loop(node.target, node.iter))
        self.generic_visit(node)
        self.bound.pop()

    def _comprehension(self, node: ast.AST) -> None:
        scope: dict[str, list[str]] = {}
        for gen in node.generators:  # type: ignore[attr-defined]
            scope.update(self._loop(gen.target, gen.iter))
        self.bound.append(scope)
        self.generic_visit(node)
        self.bound.pop()

    visit_DictComp = visit_ListComp = visit_SetComp = visit_GeneratorExp = _comprehension

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if node.args:
            if isinstance(func, ast.Attribute) and func.attr in READERS:
                if ENVIRON.search(ast.unparse(func.value)):
                    self.found.update(self.names(node.args[0]))
            elif isinstance(func, ast.Name) and func.id in HELPERS | {"getenv"}:
                self.found.update(self.names(node.args[0]))
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if ENVIRON.search(ast.unparse(node.value)):
            self.found.update(self.names(node.slice))
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
            if any(ENVIRON.search(ast.unparse(c)) for c in node.comparators):
                self.found.update(self.names(node.left))
        self.generic_visit(node)


def read_by_the_code() -> set[str]:
    found: set[str] = set()
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text())
            reads = Reads(tree)
            reads.visit(tree)
            found |= reads.found
    # names held in tables: each provider's key and base-URL variables, and the per-provider
    # override of its upstream
    from proxy.providers import PROVIDERS, override_var

    for name, provider in PROVIDERS.items():
        found |= {provider.key_var, provider.openai_base_var, provider.anthropic_base_var} - {None}
        found |= {override_var(name), override_var(name, anthropic=True)}
    from runs.environment import RENAMED

    found |= set(RENAMED.values())
    return {name for name in found if re.fullmatch(r"[A-Z][A-Z0-9_]+", name)}


def _matches(row: str, name: str) -> bool:
    return re.fullmatch(re.sub(r"<[A-Z]+>", "[A-Z_]+", row), name) is not None


def test_every_variable_the_code_reads_is_in_docs_settings_md():
    rows = documented()
    missing = sorted(n for n in read_by_the_code() if not any(_matches(r, n) for r in rows))
    assert missing == [], f"add a row to {TABLE.relative_to(REPO)} for each"


def test_every_row_of_docs_settings_md_is_read_by_the_code():
    read = read_by_the_code()
    stale = [r for r in documented() if not any(_matches(r, n) for n in read)]
    assert stale == []


def test_the_scan_finds_a_read_of_each_kind():
    source = """
import os
NAME = "FROM_A_CONSTANT"
PASSED = ("IN_A_TUPLE",)
os.environ.get("PLAIN_GET")
os.environ["SUBSCRIPT"]
"TESTED_IN" in os.environ
setting("THROUGH_THE_HELPER")
env = {k: os.environ[k] for k in PASSED if k in os.environ}
for name in ("LOOPED",):
    os.environ.get(name)
os.environ.get(NAME)
"""
    tree = ast.parse(source)
    reads = Reads(tree)
    reads.visit(tree)
    assert reads.found == {
        "FROM_A_CONSTANT",
        "IN_A_TUPLE",
        "PLAIN_GET",
        "SUBSCRIPT",
        "TESTED_IN",
        "THROUGH_THE_HELPER",
        "LOOPED",
    }
