#!/usr/bin/env bash
# Sets everything up (Docker engine, base images, venv) and runs the whole test suite,
# on SQLite and then on PostgreSQL (the database index tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONUNBUFFERED=1
echo "== lint, format, types and layers (ruff, mypy on runs/, proxy/ and benchmarks/, lint-imports)"
.venv/bin/ruff check runs proxy benchflow_site viewer benchmarks tests
.venv/bin/ruff format --check .
.venv/bin/mypy runs proxy benchmarks
.venv/bin/lint-imports
echo "== tests on SQLite (the embedded default)"
.venv/bin/pytest -q -p no:cacheprovider "$@"
echo "== database tests on PostgreSQL"
DATABASE_URL="${BENCH_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}" \
  .venv/bin/pytest -q -p no:cacheprovider -m "not browser" tests/runs/test_index.py tests/runs/test_results.py tests/runs/test_summary.py tests/cli tests/viewer tests/operate/test_views.py
