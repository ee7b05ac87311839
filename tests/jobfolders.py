"""Job folders written by hand for index and page tests: BenchFlow's layout and field names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def result_doc(task: str, rollout: str, reward: float | None, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "task_name": task,
        "trial_name": over.pop("trial_name", task),
        "trial_index": 0,
        "rollout_name": rollout,
        "attempt": 1,
        "rewards": None if reward is None else {"reward": reward},
        "agent": "opencode",
        "model": "mock/oracle",
        "n_tool_calls": 3,
        "agent_result": {
            "n_input_tokens": 1200,
            "n_cache_read_tokens": 400,
            "n_cache_creation_tokens": 0,
            "n_output_tokens": 300,
            "total_tokens": 1500,
            "cost_usd": 0.0021,
            "usage_source": "provider_response",
            "price_source": "prices.json",
            "n_calls": 4,
        },
        "error": None,
        "error_category": None,
        "verifier_error": None,
        "verifier_error_category": None,
        "trial_budget": None,
        "started_at": "2026-11-29T12:00:00.000",
        "finished_at": "2026-11-29T12:00:30.000",
        "timing": {
            "environment_setup": 1.0,
            "agent_setup": 0.0,
            "agent_execution": 25.0,
            "verifier": 4.0,
            "total": 30.0,
        },
    }
    doc.update(over)
    return doc


def write_attempt(job: Path, rollout: str, result: dict[str, Any] | str | None) -> Path:
    """An attempt folder; `result` None leaves result.json out, a str is written as it is."""
    folder = job / rollout
    (folder / "agent").mkdir(parents=True, exist_ok=True)
    (folder / "verifier").mkdir(exist_ok=True)
    task = rollout.rsplit("__", 1)[0]
    (folder / "config.json").write_text(json.dumps({"task_name": task, "trial_name": task}))
    if isinstance(result, dict):
        (folder / "result.json").write_text(json.dumps(result))
    elif isinstance(result, str):
        (folder / "result.json").write_text(result)
    return folder


def write_job(root: Path, name: str = "2026-11-29__12-00-00", **settings: Any) -> Path:
    job = root / name
    job.mkdir(parents=True, exist_ok=True)
    body = {"agent": "opencode", "model": "mock/oracle", "tasks_dir": "tasks", "trials": 1}
    body.update(settings)
    (job / "evaluation.json").write_text(json.dumps(body))
    return job


def write_summary(job: Path, **fields: Any) -> None:
    (job / "summary.json").write_text(json.dumps({"job_name": job.name, **fields}))


def key(job: Path | str) -> str:
    """The job's key in the dashboard's URLs (name~id), URL-quoted, for a job folder indexed in
    this test's database."""
    from urllib.parse import quote

    from viewer.queries import job_key_at

    return quote(job_key_at(Path(job)), safe="~")


def name_in(url: str) -> str:
    """The job folder's name a job page's URL names (/jobs/<name>~<id>/, or /jobs/<name>/)."""
    from urllib.parse import unquote

    segment = unquote(url.split("/jobs/", 1)[1].split("/", 1)[0])
    name, sep, pk = segment.rpartition("~")
    return name if sep and pk.isdigit() else segment
