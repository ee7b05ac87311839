"""bench eval resume keeps the automatic review's settings, and asks for its env values again
(evaluation.json keeps their names only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runs.jobs.preflight import resume_spec
from runs.problems import UserError
from runs.spec import RunSpec


def a_job(tmp_path: Path) -> Path:
    spec = RunSpec(
        tasks_dir=Path("tasks"),
        reviewer_model="mock/oracle",
        reviewer_timeout_sec=120.0,
        reviewer_open_network=True,
        reviewer_agent_env={"MODE": "strict", "NOTE": "sk-live-abcdefghijklmnop"},
    )
    job = tmp_path / "jobs" / "j1"
    job.mkdir(parents=True)
    (job / "evaluation.json").write_text(json.dumps(spec.recorded()))
    return job


def test_a_resumed_job_reviews_with_its_recorded_settings_and_the_secret_given_again(tmp_path):
    given = {"MODE": "strict", "NOTE": "sk-live-again"}
    spec = resume_spec(a_job(tmp_path), {}, None, reviewer_env=given)

    assert (spec.reviewer_model, spec.reviewer_timeout_sec) == ("mock/oracle", 120.0)
    assert spec.reviewer_open_network is True
    assert spec.reviewer_agent_env == {"MODE": "strict", "NOTE": "sk-live-again"}


def test_a_resume_without_the_reviewers_env_values_is_refused_naming_them(tmp_path):
    job = a_job(tmp_path)
    with pytest.raises(UserError) as refused:
        resume_spec(job, {}, None, reviewer_env={"MODE": "strict"})

    assert "--reviewer-agent-env NOTE=..." in str(refused.value)
    assert "MODE" not in str(refused.value)
