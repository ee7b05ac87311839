"""A job handed to the worker fleet: its page says where it is coordinated and each handover."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from runs.models import Coordination
from runs.operations.control import FLEET_MARK
from runs.workers import coordination
from tests.jobfolders import key

pytestmark = pytest.mark.django_db


def test_the_job_page_names_the_machine_and_each_handover(client, job):
    path = str(Path(job).resolve())
    (Path(job) / FLEET_MARK).write_text("coordination\n")
    pk = coordination.submit(path, "q", {})
    assert pk is not None
    assert coordination.take(pk, "alpha-worker", 20, host="alpha") is not None
    at = coordination.now() - timedelta(seconds=60)
    Coordination.objects.filter(pk=pk).update(renewed_at=at, expires_at=at + timedelta(seconds=20))
    assert coordination.take(pk, "beta-worker", 20, host="beta") is not None
    page = client.get(f"/jobs/{key(job)}/").content.decode()
    assert "Coordinated on beta (worker beta-worker)" in page
    assert "coordinator on alpha lost at " in page and "adopted by beta at " in page


def test_a_job_run_in_its_own_process_says_nothing_of_coordination(client, job):
    page = client.get(f"/jobs/{key(job)}/").content.decode()
    assert 'id="coordination"' not in page
