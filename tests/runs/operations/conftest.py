"""Fixtures of the operating tests: roots under tmp_path, users of each role, a launcher that
records what it was asked to start (a fake of our own seam; the real process is tested in e2e)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runs.index.folder import index_path
from runs.operations import roles
from runs.operations.process import Request
from tests.conftest import EXAMPLES
from tests.e2e.browser import chromium  # noqa: F401 - a fixture for the browser tests
from tests.jobfolders import result_doc, write_attempt, write_job, write_summary

STARTED: list[Request] = []


class RecordingLauncher:
    def start(self, request: Request) -> str:
        STARTED.append(request)
        return "recorded"


@pytest.fixture
def roots(tmp_path, settings, monkeypatch):
    """Task roots holding a copy of the examples; jobs under tmp_path/jobs; the Docker engine
    answered as up (a test says when it is down)."""
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES, tasks / "examples")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    settings.BENCHFLOW_TASK_ROOTS = str(tasks)
    settings.BENCHFLOW_JOBS_DIR = str(jobs)
    settings.BENCHFLOW_LAUNCHER = "tests.runs.operations.conftest.RecordingLauncher"
    settings.BENCHFLOW_VIEW_ROOT = ""
    monkeypatch.setattr("runs.operations.launch.docker_client", lambda: object())
    STARTED.clear()
    return tasks, jobs


@pytest.fixture
def users(db):
    made = {}
    for role in roles.ROLES:
        roles.add_user(role, role, f"pw-{role}-123")
        from django.contrib.auth import get_user_model

        made[role] = get_user_model().objects.get(username=role)
    return made


@pytest.fixture
def done_job(roots, db) -> Path:
    """A finished oracle job on the examples' hello-world, under BENCHFLOW_JOBS_DIR."""
    tasks, jobs = roots
    job = write_job(
        jobs, agent="oracle", model=None, tasks_dir=str(tasks / "examples"), plan=["hello-world"]
    )
    write_attempt(
        job, "hello-world__00000001", result_doc("hello-world", "hello-world__00000001", 1.0)
    )
    write_summary(job, passed=1)
    index_path(job)
    return job
