"""Fixtures of the end-to-end tests: Debian's chromium through playwright (tests/e2e/browser.py)."""

import pytest

from tests.e2e.browser import chromium  # noqa: F401 - a fixture for the browser tests


@pytest.fixture
def cluster(bench_env, bench_database, tmp_path):
    """`bench worker` processes and `bench run` on the machine's Redis (a queue of the test's own)."""
    from tests.e2e.scaleout import Cluster, shared_redis

    made = Cluster(bench_env, tmp_path, shared_redis(), bench_database)
    yield made
    made.stop()
