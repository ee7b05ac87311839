"""Ours as Harbor's documents, for `bench export --format harbor` (runs/export.py writes them):
a trial's result.json, config.json and lock.json, the job's config.json and result.json."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from runs.results.harbor.policy import AGENT_NAMES, EXCEPTIONS
from runs.results.harbor.read import parse_time
from runs.results.trial_result import TrialResult


def job_id(job_path: str) -> str:
    """A stable id for an exported job (Harbor ids jobs and trials by UUID)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"benchflow-job:{job_path}"))


def agent_config(agent: str, model: str | None) -> dict[str, Any]:
    return {"name": AGENT_NAMES.get(agent, agent), "model_name": model}


def model_info(model: str | None) -> dict[str, Any] | None:
    if not model:
        return None
    provider, _, name = model.rpartition("/")
    return {"name": name, "provider": provider or None}


def _phases(result: TrialResult) -> dict[str, dict[str, str] | None]:
    """Harbor's phase times from our durations, laid end to end from the start (ours records how
    long each phase took, not when it began)."""
    start = parse_time(result.started_at)
    phases: dict[str, dict[str, str] | None] = {}
    for phase in ("environment_setup", "agent_setup", "agent_execution", "verifier"):
        seconds = getattr(result.timing, phase)
        if (
            start is None
            or seconds is None
            or (result.steps and phase in ("agent_execution", "verifier"))
        ):
            phases[phase] = None
            continue
        end = start + timedelta(seconds=seconds)
        phases[phase] = {"started_at": start.isoformat(), "finished_at": end.isoformat()}
        start = end
    return phases


def _exception(
    text: str | None, category: str | None, at: str | None, scored: bool
) -> dict[str, Any] | None:
    """Our error as Harbor's exception_info: Harbor's type for our class where Harbor's policy
    agrees on the reward, else our class's name (a type Harbor's policy leaves the reward to)."""
    if not text:
        return None
    kind = next(
        (t for t, (c, keeps) in EXCEPTIONS.items() if c == category and (keeps or not scored)),
        category or "Error",
    )
    return {
        "exception_type": kind,
        "exception_message": text,
        "exception_traceback": "",
        "occurred_at": at or datetime.now().isoformat(),
    }


def trial_document(
    result: TrialResult,
    config: Mapping[str, Any],
    *,
    trial_uri: str,
    task_path: str,
    checksum: str,
    source: str | None,
) -> dict[str, Any]:
    """Our attempt's result as a Harbor trial's result.json (TrialResult, schema 1)."""
    scored = result.reward is not None
    error = _exception(result.error, result.error_category, result.finished_at, scored)
    verifier = _exception(
        result.verifier_error, result.verifier_error_category, result.finished_at, scored
    )
    usage = result.agent_result
    context = {
        "n_input_tokens": usage.n_input_tokens,
        "n_cache_tokens": usage.n_cache_read_tokens,
        "n_output_tokens": usage.n_output_tokens,
        "cost_usd": usage.cost_usd,
    }
    steps = [
        {
            "step_name": s.name,
            "agent_result": None,
            "verifier_result": {"rewards": s.rewards} if s.rewards else None,
            "exception_info": _exception(
                s.verifier_error, "verifier_other", result.finished_at, False
            ),
            "agent_execution": None,
            "verifier": None,
        }
        for s in result.steps or ()
        if s.ran
    ]
    return {
        "schema_version": 1,
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, trial_uri)),
        "task_name": result.task_name,
        "trial_name": result.rollout_name,
        "trial_uri": trial_uri,
        "task_id": {"path": task_path},
        "source": source,
        "task_checksum": checksum,
        "config": dict(config),
        "agent_info": {
            "name": AGENT_NAMES.get(result.agent, result.agent) or "unknown",
            "version": result.agent_version or "unknown",
            "model_info": model_info(result.model),
        },
        "agent_result": context,
        "verifier_result": {"rewards": result.rewards} if result.rewards else None,
        "exception_info": error or verifier,
        "started_at": result.started_at or None,
        "finished_at": result.finished_at,
        **_phases(result),
        "step_results": steps or None,
        "reward_valid": bool(result.rewards),
    }


def trial_config(
    task_path: str, trial_name: str, trials_dir: str, agent: dict[str, Any], job: str
) -> dict[str, Any]:
    """A trial's config.json (TrialConfig) as Harbor's job plan would make it from job_config's."""
    return {
        "schema_version": 1,
        "task": {"path": task_path},
        "trial_name": trial_name,
        "trials_dir": trials_dir,
        "agent": agent,
        "job_id": job,
    }


def trial_lock(
    task_name: str, task_path: str, digest: str, agent: dict[str, Any]
) -> dict[str, Any]:
    """A trial's lock.json (TrialLock, schema 2): Harbor's viewer reads it to list the trial."""
    return {
        "schema_version": 2,
        "task": {"name": task_name, "type": "local", "digest": digest, "path": task_path},
        "agent": agent,
        "environment": {"type": "docker"},
        "verifier": {"disable": False},
    }


def job_config(
    name: str,
    jobs_dir: str,
    agent: dict[str, Any],
    task_paths: Sequence[str],
    repeats: int,
    concurrency: Any,
) -> dict[str, Any]:
    """The job's config.json (JobConfig), from which `harbor job resume` plans the same trials."""
    return {
        "schema_version": 1,
        "job_name": name,
        "jobs_dir": jobs_dir,
        "n_attempts": repeats,
        "n_concurrent_trials": concurrency if type(concurrency) is int and concurrency > 0 else 4,
        "agents": [agent],
        "datasets": [],
        "tasks": [{"path": p} for p in task_paths],
    }


def job_result(
    job: str,
    started_at: str | None,
    finished_at: str | None,
    n_total: int,
    trials: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The job's result.json (JobResult): progress and, per agent and model, the rewards' means."""
    evals: dict[str, dict[str, Any]] = {}
    for doc in trials:
        info = doc["agent_info"]
        model = (info.get("model_info") or {}).get("name")
        key = (
            f"{info['name']}__{model}__{doc.get('source') or 'adhoc'}"
            if model
            else f"{info['name']}__{doc.get('source') or 'adhoc'}"
        )
        stats = evals.setdefault(
            key,
            {
                "n_trials": 0,
                "n_errors": 0,
                "metrics": [],
                "pass_at_k": {},
                "reward_stats": {},
                "exception_stats": {},
            },
        )
        rewards = (doc.get("verifier_result") or {}).get("rewards")
        if doc["reward_valid"] and rewards:
            stats["n_trials"] += 1
            for k, v in rewards.items():
                stats["reward_stats"].setdefault(k, {}).setdefault(str(float(v)), []).append(
                    doc["trial_name"]
                )
        if doc.get("exception_info"):
            stats["n_errors"] += 1
            kind = doc["exception_info"]["exception_type"]
            stats["exception_stats"].setdefault(kind, []).append(doc["trial_name"])
    for stats in evals.values():
        means = {}
        for k, by_value in stats["reward_stats"].items():
            values = [float(v) for v, names in by_value.items() for _ in names]
            means[k] = sum(values) / len(values)
        stats["metrics"] = [means] if means else []
    errored = sum(1 for d in trials if d.get("exception_info"))
    return {
        "schema_version": 1,
        "id": job,
        "started_at": started_at,
        "updated_at": finished_at or started_at,
        "finished_at": finished_at,
        "n_total_trials": n_total,
        "stats": {
            "n_completed_trials": len(trials),
            "n_errored_trials": errored,
            "n_running_trials": 0,
            "n_pending_trials": max(n_total - len(trials), 0),
            "n_cancelled_trials": 0,
            "n_retries": 0,
            "evals": evals,
        },
    }
