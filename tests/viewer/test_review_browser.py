"""Human review in Chromium: a note with tags on the step picked with j, its tag filtering the job
page; and `bench view JOB --confirm` answered with the Approve button."""

from __future__ import annotations

import pytest

from tests.e2e.browser import Viewer, chromium  # noqa: F401  (the fixture)
from tests.jobfolders import result_doc, write_attempt, write_job, write_summary
from tests.trajectories import trajectory

pytestmark = [pytest.mark.browser, pytest.mark.database]


def test_a_note_on_a_step_then_approve_ends_bench_view_confirm(
    chromium,  # noqa: F811
    tmp_path,
    bench_env,
):
    # given a job opened with bench view --confirm
    job = write_job(tmp_path / "jobs", plan=["hello", "other"])
    attempt = write_attempt(job, "hello__00000001", result_doc("hello", "hello__00000001", 1.0))
    write_attempt(job, "other__00000002", result_doc("other", "other__00000002", 0.0))
    trajectory(attempt, 5)
    write_summary(job)
    viewer = Viewer(tmp_path, bench_env, [str(job), "--confirm"])
    try:
        page = chromium.new_page()
        page.goto(f"{viewer.base}/jobs/{job.name}/hello/")
        page.wait_for_selector("#e1", state="attached")
        # when a step is picked with j and a note written on it
        page.locator("body").press("j")
        page.locator("body").press("j")
        step = page.locator("#stream details.ev.cur").get_attribute("id")
        assert page.input_value("#note-step") == step
        page.fill('#note-form input[name="tags"]', "flaky")
        page.fill('#note-form input[name="text"]', "retried <twice>")
        page.click("#note-form button")
        # then the note shows on the trial, linked to its step, its tag a filter of the job page
        note = page.locator("#notes li.note").first
        note.wait_for()
        assert "retried <twice>" in note.inner_text() and f"{step}" in note.inner_text()
        note.locator("a.tag").click()
        page.wait_for_selector("#trials")
        names = page.locator("#trials tbody td:nth-child(2) a").all_inner_texts()
        assert names == ["hello"]
        # and Approve on the job page answers bench view, which prints it and exits 0
        page.click("#approve")
        page.wait_for_selector("#decided")
        assert viewer.proc.wait(30) == 0
    finally:
        if viewer.proc.poll() is None:
            viewer.stop()
    assert "DECISION: approved" in viewer.log.read_text()


def test_the_rubric_tab_shows_the_review(chromium, tmp_path, bench_env):  # noqa: F811
    import json

    job = write_job(tmp_path / "jobs", plan=["hello"])
    attempt = write_attempt(job, "hello__00000001", result_doc("hello", "hello__00000001", 1.0))
    trajectory(attempt, 2)
    write_summary(job)
    criteria = [
        {
            "name": "safe",
            "guidance": "g",
            "blocker": True,
            "weight": 1,
            "verdict": "pass",
            "explanation": "fine",
        },
        {
            "name": "tidy",
            "guidance": "g",
            "blocker": False,
            "weight": 3,
            "verdict": "fail",
            "explanation": "messy",
        },
    ]
    review = {
        "rubric_version": "0.2",
        "reviewer": {"agent": "claude", "model": "mock/oracle"},
        "reviewer_usage": {"cost_usd": 0.03, "total_tokens": 12400},
        "criteria": criteria,
        "raw_quality": 0.0,
        "gated_quality": 0.0,
        "gates": {"passed": True},
        "band": "not_publishable",
    }
    (attempt / "review.json").write_text(json.dumps(review))
    viewer = Viewer(tmp_path, bench_env, ["jobs"])
    try:
        page = chromium.new_page()
        page.goto(f"{viewer.base}/jobs/{job.name}/hello/")
        page.wait_for_selector("#e1", state="attached")
        assert not page.locator("#rubric").is_visible()
        page.click('#tabs button[data-tab="rubric"]')
        assert page.locator("#rubric").is_visible() and not page.locator("#stream").is_visible()
        rows = page.locator("#rubric tr.criterion").all_inner_texts()
        assert len(rows) == 2 and "messy" in rows[1] and "blocker" in rows[0]
        assert "12,400 tokens" in page.locator("#review-usage").inner_text()
        assert "not_publishable" in page.locator("#rubric-score").inner_text()
    finally:
        viewer.stop()
