"""The job page's live response: what a hint changed, in one request (static/viewer/live.js)."""

from __future__ import annotations

import html
import json
import re

import pytest

from runs.index.folder import index_path
from tests.jobfolders import key, result_doc, write_attempt, write_job

pytestmark = pytest.mark.django_db


def _part(page: str, element_id: str) -> str:
    """The opening tag of the element with that id."""
    found = re.search(rf'<[a-z]+ id="{element_id}"[^>]*>', page)
    assert found, element_id
    return found.group(0)


def test_a_hint_brings_the_progress_and_the_trials_page_in_one_response(client, job):
    page = client.get(f"/jobs/{key(job)}/live/").content.decode()
    assert 'hx-swap-oob="true"' in _part(page, "progress")
    assert 'hx-swap-oob="true"' in _part(page, "trials")
    assert "hello" in page and "broken" in page
    # the grid and the chart change only when a trial finishes
    assert 'id="grid"' not in page and 'id="chart-data"' not in page


def test_a_finished_trial_brings_the_grid_and_the_charts_series_too(client, job):
    page = client.get(f"/jobs/{key(job)}/live/", {"parts": "finished"}).content.decode()
    assert 'hx-swap-oob="innerHTML"' in _part(page, "grid") and 'id="grid-data"' in page
    series = re.search(r'id="chart-data" hx-swap-oob="true" hidden data-series="([^"]*)"', page)
    assert series, page
    data = json.loads(html.unescape(series.group(1)))
    assert set(data) == {"x", "running", "finished", "busy"} and len(data["x"]) == len(
        data["finished"]
    )
    assert 'hx-swap-oob="innerHTML"' in _part(page, "job-regrades")


def test_the_trials_part_is_the_page_the_visitor_is_on(client, view_root):
    job = write_job(view_root, plan=[f"t{i:03d}" for i in range(6)])
    for i in range(6):
        name = f"t{i:03d}"
        write_attempt(job, f"{name}__{i:08x}", result_doc(name, f"{name}__{i:08x}", i % 2))
    index_path(job)
    page = client.get(
        f"/jobs/{key(job)}/live/", {"sort": "-trial", "show": "passed", "parts": "finished"}
    ).content.decode()
    trials = page[page.index('id="trials"') : page.index("</section>", page.index('id="trials"'))]
    assert "t005" in trials and "t003" in trials and "t002" not in trials
    assert trials.index("t005") < trials.index("t003")
    # its own links and query keep the visitor's sort and filter, never the live request's parts
    assert 'data-query="?sort=-trial&amp;show=passed"' in _part(page, "trials")
    assert "parts=" not in trials


def test_the_job_page_fetches_nothing_per_part_on_a_hint(client, job):
    """Only the live response updates the parts: none of them asks on its own when a hint comes."""
    page = client.get(f"/jobs/{key(job)}/").content.decode()
    assert f'data-live="/jobs/{key(job)}/live/"' in page
    assert "bench:changed" not in page and "bench:finished" not in page
    assert 'id="chart-data"' in page
