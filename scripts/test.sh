#!/usr/bin/env bash
# Sets everything up (Docker engine, base images, venv; Redis and PostgreSQL when none answers) and
# runs the whole test suite on SQLite, then again on PostgreSQL what depends on the database.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/services.sh
export PYTHONUNBUFFERED=1
echo "== lint, format, types and layers (ruff, mypy on runs/, proxy/ and benchmarks/, lint-imports)"
.venv/bin/ruff check runs proxy benchflow_site viewer benchmarks tests
.venv/bin/ruff format --check .
.venv/bin/mypy runs proxy benchmarks
.venv/bin/lint-imports
echo "== tests on SQLite (the embedded default)"
.venv/bin/pytest -q -p no:cacheprovider "$@"
echo "== again on PostgreSQL: the tests whose behaviour depends on the database"
# (in-process ORM tests, and those marked `database`: a process they start coordinates through it,
# or they check what it wrote; a sandbox, an agent or a job folder is the same on either database)
# A database of this run's own (pytest-django makes test_<name> beside it; each `bench` process a
# test starts gets one more, copied from a migrated template): runs in parallel never meet.
pg="${BENCH_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/bench_ci_$$}"
.venv/bin/python scripts/pgdb.py create "$pg"
trap '.venv/bin/python scripts/pgdb.py drop "$pg"' EXIT
DATABASE_URL="$pg" .venv/bin/pytest -q -p no:cacheprovider --database-only "$@"
