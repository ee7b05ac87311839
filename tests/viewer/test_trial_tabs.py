"""The trial page's Verifier and Metrics tabs."""

from __future__ import annotations

import json

from tests.jobfolders import key


def test_the_verifier_tab_shows_ctrf_tests_and_a_regrade_beside_the_original(client, job):
    # given an attempt whose verifier wrote a CTRF report, regraded since
    folder = job / "hello__00000001"
    report = {"results": {"tests": [{"name": "test_<x>", "status": "failed", "message": "boom"}]}}
    (folder / "verifier" / "ctrf.json").write_text(json.dumps(report))
    (folder / "regrade" / "r9" / "verifier").mkdir(parents=True)
    (folder / "regrade" / "r9" / "verifier" / "test-stdout.txt").write_text("regraded output")
    regrade = {"id": "r9", "output_dir": "regrade/r9", "new_reward": 0.0, "status": "complete"}
    (folder / "regrade.json").write_text(
        json.dumps({"original": {"reward": 1.0}, "regrades": [regrade]})
    )
    # when
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    # then
    tab = page[page.index('id="tab-verifier"') : page.index('id="tab-metrics"')]
    assert 'class="vruns side"' in tab and "this attempt" in tab and "regrade r9" in tab
    assert "test_&lt;x&gt;" in tab and "boom" in tab and "regraded output" in tab
    assert "ok &lt;b&gt;bold&lt;/b&gt;" in tab  # the original's stdout


def test_the_metrics_tab_has_the_timing(client, job):
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    tab = page[page.index('id="tab-metrics"') : page.index('id="tab-files"')]
    assert "agent_execution" in tab


def test_the_rubric_tab_shows_criteria_verdicts_the_score_and_the_reviewers_cost_apart(client, job):
    review = {
        "rubric_version": "0.2",
        "reviewer": {"agent": "claude", "model": "mock/oracle"},
        "reviewer_usage": {"cost_usd": 0.0393, "total_tokens": 38792},
        "complete": True,
        "problems": [],
        "criteria": [
            {
                "name": "safe",
                "guidance": "no <rm -rf>",
                "blocker": True,
                "weight": 1,
                "verdict": "pass",
                "explanation": "ok",
            },
            {
                "name": "tidy",
                "guidance": "tidy?",
                "blocker": False,
                "weight": 3,
                "verdict": "fail",
                "explanation": "messy",
            },
        ],
        "raw_quality": 0.0,
        "gated_quality": 0.0,
        "gates": {"passed": True},
        "band": "not_publishable",
    }
    (job / "hello__00000001" / "review.json").write_text(json.dumps(review))
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    tab = page[page.index('id="tab-rubric"') : page.index('id="tab-metrics"')]
    assert "no &lt;rm -rf&gt;" in tab and 'class="verdict-fail">fail' in tab and "messy" in tab
    assert "not_publishable" in tab and "$0.0393, 38,792 tokens" in tab
    # the job's own cost line is not the reviewer's
    assert "0.0393" not in client.get(f"/jobs/{key(job)}/").content.decode()


def test_an_attempt_without_a_stream_opens_on_its_files_where_its_output_is(client, job):
    # given an attempt that kept no model calls (a script agent's)
    folder = job / "hello__00000001"
    assert not (folder / "trajectory").exists()
    # when
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    # then the Files tab is the one shown first, and the Stream tab says where to look
    assert 'data-first="files"' in page
    assert '<button type="button" data-tab="files" class="on">' in page
    assert "What the agent wrote is in the Files tab." in page


def test_the_rubric_tab_shows_the_automatic_review_that_gated_the_reward(client, job):
    # given an attempt reviewed once verified (bench run --reviewer-model): its scoring file as
    # the automatic review writes it
    from runs.review import auto
    from runs.review import rubric as rb

    rubric = rb.parse_rubric(
        {
            "criteria": [
                {"name": "safe", "description": "d", "guidance": "g", "blocker": 1, "weight": 1},
                {
                    "name": "tidy",
                    "description": "d",
                    "guidance": "tidy?",
                    "blocker": 0,
                    "weight": 2,
                },
            ]
        }
    )
    answer = {
        "criteria": [
            {"name": "safe", "verdict": "pass", "explanation": "nothing removed"},
            {"name": "tidy", "verdict": "fail", "explanation": "left <tmp> files"},
        ]
    }
    solver = {"rewards": {"reward": 1.0}, "error": None}
    usage = {"cost_usd": 0.0125, "total_tokens": 4200}
    record = auto.scoring_record(rubric, solver, answer, None, {"agent": "opencode"}, usage)
    folder = job / "hello__00000001"
    (folder / "scoring").mkdir()
    (folder / "scoring" / "hello__00000001.json").write_text(json.dumps(record))
    # when
    page = client.get(f"/jobs/{key(job)}/hello/").content.decode()
    # then the tab shows its verdicts, and says the reward is the gated quality
    tab = page[page.index('id="tab-rubric"') : page.index('id="tab-metrics"')]
    assert 'class="verdict-fail">fail' in tab and "left &lt;tmp&gt; files" in tab
    assert "the reward is the gated quality, 0.00 (the solver's was 1.0)" in tab
    assert "$0.0125, 4,200 tokens" in tab
