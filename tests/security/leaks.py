"""Looking for a secret where it must not be: as written, reversed, and in base64 (of either),
in every file under a folder, in the index's dump and in logs. An exact-match redaction catches
only the first; a program that wants a secret out prints it another way."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from pathlib import Path


def disguises(secret: str) -> dict[str, bytes]:
    """The ways a program might print `secret` so no exact match sees it."""
    plain, backwards = secret.encode(), secret[::-1].encode()
    return {
        "as written": plain,
        "reversed": backwards,
        "in base64": base64.b64encode(plain),
        "reversed, in base64": base64.b64encode(backwards),
    }


def found_in(data: bytes, secret: str) -> list[str]:
    """How `secret` shows in `data` (empty: it does not)."""
    return [how for how, form in disguises(secret).items() if form in data]


def leaks(
    secret: str, folders: Iterable[Path] = (), texts: Iterable[tuple[str, str]] = ()
) -> list[str]:
    """Every place `secret` shows, as "path: how": files under `folders` (symlinks not followed)
    and named `texts` (a database dump, a process's output)."""
    out = []
    for folder in folders:
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file() and not path.is_symlink():
                out += [f"{path}: {how}" for how in found_in(path.read_bytes(), secret)]
    for name, text in texts:
        out += [f"{name}: {how}" for how in found_in(text.encode(), secret)]
    return out


# Real tables only: a virtual table (the search index's FTS5 table, contentless) cannot be read
# row by row; what it holds is in its shadow tables (`<name>_data`, ...), which are read.
SQLITE_TABLES = (
    "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'"
)


def database_dump(env: dict[str, str], database: str | None) -> str:
    """Every row of every table of the index (SQLite in BENCHFLOW_HOME, or the test's PostgreSQL
    database), as text."""
    from tests.databases import query

    home = Path(env["BENCHFLOW_HOME"])
    lines = []
    for file in ("benchflow.sqlite3", "benchflow.leases.sqlite3"):
        sqlite = str(home / file)
        if database is None:
            tables = [r[0] for r in query(None, sqlite, SQLITE_TABLES)]
        else:
            tables = [
                r[0]
                for r in query(
                    database, sqlite, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                )
            ]
        for table in tables:
            lines += [
                f"{table}: {row!r}" for row in query(database, sqlite, f'SELECT * FROM "{table}"')
            ]
        if database is not None:
            break  # one PostgreSQL database holds both
    return "\n".join(lines)
