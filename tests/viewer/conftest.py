"""Pages over an indexed job folder: the defects of the old viewer each have a test here."""

from __future__ import annotations

import pytest

from runs.index.folder import index_path
from tests.jobfolders import result_doc, write_attempt, write_job, write_summary


@pytest.fixture(autouse=True)
def short_lived_connections():
    """database_sync_to_async's threads close their connection after each call, so none is left
    open on the test database when it is dropped (PostgreSQL's are kept CONN_MAX_AGE seconds)."""
    from django.db import connections

    age = connections.settings["default"].get("CONN_MAX_AGE", 0)
    connections.settings["default"]["CONN_MAX_AGE"] = 0
    yield
    connections.settings["default"]["CONN_MAX_AGE"] = age


@pytest.fixture
def view_root(tmp_path, settings):
    root = tmp_path / "jobs"
    root.mkdir()
    settings.BENCHFLOW_VIEW_ROOT = str(root)
    return root


@pytest.fixture
def job(view_root, db):
    """A finished job: hello passed (its agent printed a script tag), broken has a corrupt
    result.json, repeat#1 failed."""
    job = write_job(view_root, plan=["hello", "broken"], trials=1)
    hello = write_attempt(job, "hello__00000001", result_doc("hello", "hello__00000001", 1.0))
    (hello / "agent" / "opencode.txt").write_text("<script>alert(1)</script>\n")
    (hello / "verifier" / "test-stdout.txt").write_text("ok <b>bold</b>")
    write_attempt(job, "broken__00000002", '{"task_name": "broken", "rewa')
    write_summary(job, passed=1)
    index_path(job)
    return job
