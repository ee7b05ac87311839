"""Outcomes across jobs (grid, pass@1 per column, Pareto) and the compare page's flipped tasks."""

from __future__ import annotations

import html
import json
import re

import pytest

from runs.index.folder import index_path
from tests.jobfolders import key, result_doc, write_attempt, write_job, write_summary

pytestmark = pytest.mark.django_db


def _json(page: str, element_id: str) -> dict:
    found = re.search(rf'id="{element_id}"[^>]*>(.*?)</script>', page, re.S)
    assert found, element_id
    return json.loads(html.unescape(found.group(1)))


@pytest.fixture
def two_jobs(view_root):
    """A and B over tasks x, y, z: A passes x and y, B passes y and z; B costs more."""
    jobs = []
    for name, model, rewards, cost in (
        ("2026-11-29__01-00-00", "m/cheap", [1.0, 1.0, 0.0], 0.01),
        ("2026-11-29__02-00-00", "m/dear", [0.0, 1.0, 1.0], 0.05),
    ):
        job = write_job(view_root, name, plan=["x", "y", "z"], model=model)
        for i, (task, reward) in enumerate(zip("xyz", rewards, strict=True)):
            doc = result_doc(task, f"{task}__{name[-8:-6]}00000{i}", reward, model=model)
            doc["agent_result"]["cost_usd"] = cost
            write_attempt(job, f"{task}__{name[-8:-6]}00000{i}", doc)
        write_summary(job)
        index_path(job)
        jobs.append(job)
    return jobs


def test_the_outcomes_page_puts_jobs_side_by_side_with_pass_at_1_and_pareto(client, two_jobs):
    a, b = two_jobs
    page = client.get("/outcomes/", {"job": [key(a), key(b)]}).content.decode()
    grid = _json(page, "grid-data")
    assert grid["tasks"] == ["x", "y", "z"]
    assert [c["cells"] for c in grid["columns"]] == [["k", "k", "a"], ["a", "k", "k"]]
    assert "m/cheap" in grid["columns"][0]["label"] and "m/dear" in grid["columns"][1]["label"]
    assert grid["columns"][0]["pass1"] == pytest.approx(2 / 3)
    table = page[page.index('id="pass1"') :]
    assert "0.67" in table and "95% CI" in page
    pareto = _json(page, "pareto-data")
    points = {p["key"].split("~")[0]: p for p in pareto["points"]}
    assert points["2026-11-29__01-00-00"]["means"]["cost_usd"] == pytest.approx(0.01)
    assert points["2026-11-29__01-00-00"]["means"]["sandbox_s"] == pytest.approx(30.0)
    # same reward, A cheaper: only A is on the cost frontier
    assert points["2026-11-29__01-00-00"]["frontier"]["cost_usd"] is True
    assert points["2026-11-29__02-00-00"]["frontier"]["cost_usd"] is False
    assert "<canvas" in page and 'class="legend"' in page


def test_the_grid_filter_keeps_the_tasks_on_which_the_jobs_differ(client, two_jobs):
    a, b = two_jobs
    page = client.get("/outcomes/", {"job": [key(a), key(b)], "show": "differ"}).content.decode()
    assert _json(page, "grid-data")["tasks"] == ["x", "z"]
    assert "1 task(s) hidden by the filter" in page


def test_the_outcomes_page_without_jobs_offers_them_to_tick(client, two_jobs):
    page = client.get("/outcomes/").content.decode()
    assert page.count('name="job"') == 2 and "grid-data" not in page


def test_the_compare_page_lists_flipped_tasks_each_linking_to_both_trials(client, two_jobs):
    a, b = two_jobs
    page = client.get("/compare/", {"a": key(a), "b": key(b)}).content.decode()
    flips = page[page.index('id="flipped"') : page.index("Every pair")]
    passed_a, passed_b = flips.split("Passed in B, failed in A")
    assert ">x<" in passed_a and ">z<" not in passed_a
    assert ">z<" in passed_b and ">x<" not in passed_b
    assert f'href="/jobs/{key(a)}/x/"' in passed_a and f'href="/jobs/{key(b)}/x/"' in passed_a
