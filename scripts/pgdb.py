"""`pgdb.py create|drop URL`: a PostgreSQL database of a test run's own (scripts/test.sh)."""

import sys
from urllib.parse import urlparse, urlunparse

import psycopg

verb, url = sys.argv[1], sys.argv[2]
name = urlparse(url).path.lstrip("/")
admin = urlunparse(urlparse(url)._replace(path="/postgres"))
with psycopg.connect(admin, autocommit=True) as conn:
    if verb == "create":
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    else:
        for db in (name, f"test_{name}"):
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
