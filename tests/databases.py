"""Databases for the `bench` processes a test starts: SQLite in the test's own state folder, or,
when the suite runs on PostgreSQL (DATABASE_URL=postgres://...), a fresh PostgreSQL database per
test, copied from a template migrated once per session (so no test sees another's rows)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from urllib.parse import urlparse, urlunparse


def postgres_url() -> str | None:
    url = os.environ.get("DATABASE_URL", "")
    return url if url.startswith(("postgres://", "postgresql://")) else None


def with_name(url: str, name: str) -> str:
    return urlunparse(urlparse(url)._replace(path=f"/{name}"))


class Postgres:
    """Databases on the server of `url`, made and dropped through its `postgres` database."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.template = f"bench_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.made: list[str] = []

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(with_name(self.url, "postgres"), autocommit=True) as conn:
            conn.execute(sql)

    def make_template(self) -> None:
        self._admin(f'CREATE DATABASE "{self.template}"')
        env = {**os.environ, "DATABASE_URL": with_name(self.url, self.template)}
        subprocess.run(
            [
                sys.executable,
                "-c",
                "from benchflow_site.django_setup import setup_django; setup_django()",
            ],
            env=env,
            check=True,
            capture_output=True,
            timeout=300,
        )

    def create(self) -> str:
        name = f"bench_t_{uuid.uuid4().hex[:12]}"
        self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        self.made.append(name)
        return with_name(self.url, name)

    def drop(self, url: str) -> None:
        name = urlparse(url).path.lstrip("/")
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self.made:
            self.made.remove(name)

    def drop_all(self) -> None:
        for name in list(self.made):
            self.drop(with_name(self.url, name))
        self._admin(f'DROP DATABASE IF EXISTS "{self.template}" WITH (FORCE)')


def query(database: str | None, sqlite_path: str, sql: str, *args: object) -> list[tuple]:
    """Rows of `sql` (with %s placeholders) in a test's database: PostgreSQL by URL, else the
    SQLite file."""
    if database is not None:
        import psycopg

        with psycopg.connect(database) as conn:
            return list(conn.execute(sql, args).fetchall())  # type: ignore[arg-type]
    import sqlite3

    with sqlite3.connect(sqlite_path) as conn:
        return list(conn.execute(sql.replace("%s", "?"), args).fetchall())
