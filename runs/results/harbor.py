"""Harbor's job folders (Harbor 0.2x), both ways: its documents read as ours, ours written as its.

Harbor writes a folder per trial, `<task>__<7 random>`, holding result.json (its `TrialResult`),
config.json (`TrialConfig`) and lock.json (`TrialLock`); the job folder holds config.json
(`JobConfig`), result.json (`JobResult`: progress and per-eval stats), lock.json and job.log.
Harbor retries a trial by deleting its folder, so each folder is one trial of one attempt, and it
records no trial index: its trials of a task are numbered oldest first as they are read
(runs/results/attempt_folder.py). A reward counts
as Harbor counts it (`reward_valid`: no exception whose policy voids it).

Field names are Harbor's (github.com/harbor-framework/harbor, `harbor/models/`); no Harbor code is
imported (it needs Python 3.12). `bench export --format harbor` writes the other way
(runs/export.py walks the folders; the documents are made here).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from runs import errors
from runs.jobfolder import finite
from runs.results.trial_result import AgentUsage, AttemptTiming, StepRecord, TrialResult

# Harbor's exception type -> (our error class, whether a reward beside it still counts): Harbor's
# error policy table (models/trial/error_policy.py), its `has_valid_reward` column.
EXCEPTIONS: dict[str, tuple[str, bool]] = {
    "AgentTimeoutError": ("timeout", True),
    "NonZeroAgentExitCodeError": ("pipe_closed", True),
    "ContextWindowExceededError": ("provider_rejected", True),
    "ContextLengthExceededError": ("provider_rejected", True),
    "OutputTokenExceededError": ("provider_rejected", True),
    "OutputLengthExceededError": ("provider_rejected", True),
    "AgentSafetyRefusalError": ("provider_rejected", True),
    "ContentPolicyViolationError": ("provider_rejected", True),
    "BadRequestError": ("provider_rejected", False),
    "UnprocessableEntityError": ("provider_rejected", False),
    "UnsupportedModelParametersError": ("provider_rejected", False),
    "UnsupportedParamsError": ("provider_rejected", False),
    "VerifierTimeoutError": ("verifier_timeout", False),
    "RewardFileNotFoundError": ("verifier_no_reward", False),
    "RewardFileEmptyError": ("verifier_no_reward", False),
    "VerifierOutputParseError": ("verifier_bad_reward", False),
    "AddTestsDirError": ("verifier_infra", False),
    "DownloadVerifierDirError": ("verifier_infra", False),
    "EnvironmentStartTimeoutError": ("sandbox_setup", False),
    "HealthcheckError": ("sandbox_setup", False),
    "SandboxBuildFailedError": ("image_build", False),
    "AgentSetupTimeoutError": ("install_failure", False),
    "SandboxLikelyOutOfMemoryError": ("infra_failure", False),
    "MemoryLimitExceededError": ("infra_failure", False),
    "RuntimeRequestError": ("infra_failure", False),
    "AgentAuthenticationError": ("provider_auth", False),
    "AuthenticationError": ("provider_auth", False),
    "PermissionDeniedError": ("provider_auth", False),
    "RateLimitError": ("provider_rate_limit", False),
    "ApiRateLimitError": ("provider_rate_limit", False),
    "ApiUsageLimitError": ("usage_limit", False),
    "ApiError": ("api_error", False),
    "APIError": ("api_error", False),
    "ApiInternalServerError": ("api_error", False),
    "InternalServerError": ("api_error", False),
    "ApiOverloadedError": ("api_error", False),
    "ServiceUnavailableError": ("api_error", False),
    "ApiConnectionError": ("api_error", False),
    "APIConnectionError": ("api_error", False),
    "ApiConnectionClosedError": ("api_error", False),
    "ApiResponseStalledError": ("api_error", False),
    "UnknownApiError": ("api_error", False),
    "NetworkConnectionError": ("api_error", False),
    "BudgetExceededError": ("trial_budget", False),
    "CancelledError": ("interrupted", False),
}
VERIFIER_CLASSES = frozenset(c for c, _ in EXCEPTIONS.values() if c.startswith("verifier_"))
# our agent names where Harbor's differ (`-a claude` is Harbor's claude-code)
AGENT_NAMES = {"claude": "claude-code"}


def is_trial_result(doc: Mapping[str, Any]) -> bool:
    """A Harbor trial's result.json (ours never has these keys)."""
    return "agent_info" in doc or "verifier_result" in doc or "trial_uri" in doc


def is_trial_config(doc: Mapping[str, Any]) -> bool:
    """A Harbor trial's config.json (ours names the task with `task_name`, not a `task` block)."""
    return isinstance(doc.get("task"), Mapping) and "trials_dir" in doc


def is_job_config(doc: Mapping[str, Any]) -> bool:
    return "agents" in doc and ("datasets" in doc or "tasks" in doc)


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def _seconds(phase: Any) -> float | None:
    start, end = _time(_map(phase).get("started_at")), _time(_map(phase).get("finished_at"))
    if start is None or end is None or (start.tzinfo is None) != (end.tzinfo is None):
        return None
    return round((end - start).total_seconds(), 3)


def model_name(agent_info: Mapping[str, Any]) -> str | None:
    """`provider/name` as `-m` takes it, from agent_info's model_info."""
    info = _map(agent_info.get("model_info"))
    name = info.get("name")
    if not name:
        return None
    return f"{info['provider']}/{name}" if info.get("provider") else str(name)


def _rewards(verifier_result: Any) -> dict[str, float] | None:
    rewards = _map(verifier_result).get("rewards")
    if not isinstance(rewards, Mapping):
        return None
    kept = {str(k): v for k, v in rewards.items() if finite(v) is not None}
    return kept or None


def _usage(contexts: Iterable[Any]) -> AgentUsage:
    """Harbor's agent-reported usage summed over the trial's AgentContexts (input counts cache)."""
    usage = AgentUsage()
    for context in contexts:
        ctx = _map(context)
        for ours, theirs in (
            ("n_input_tokens", "n_input_tokens"),
            ("n_cache_read_tokens", "n_cache_tokens"),
            ("n_output_tokens", "n_output_tokens"),
        ):
            if (value := finite(ctx.get(theirs))) is not None:
                setattr(usage, ours, (getattr(usage, ours) or 0) + int(value))
        if (cost := finite(ctx.get("cost_usd"))) is not None:
            usage.cost_usd = (usage.cost_usd or 0.0) + cost
    if usage.n_input_tokens is not None or usage.n_output_tokens is not None:
        usage.total_tokens = (usage.n_input_tokens or 0) + (usage.n_output_tokens or 0)
    if any(v is not None for v in (usage.total_tokens, usage.cost_usd)):
        usage.usage_source = "harbor"  # what the agent reported to Harbor
    return usage


def error_class(info: Mapping[str, Any]) -> tuple[str, str, bool]:
    """(our error class, `Type: message`, whether a reward beside it counts) of an exception_info."""
    kind = str(info.get("exception_type") or "Exception")
    text = f"{kind}: {info.get('exception_message') or ''}".rstrip(": ")
    known = EXCEPTIONS.get(kind)
    if known is None:  # Harbor's policy for a type it does not list keeps the reward
        return errors.classify(text), text, True
    override = _map(info.get("policy_override")).get("has_valid_reward")
    return known[0], text, override if isinstance(override, bool) else known[1]


def _step(step: Mapping[str, Any]) -> StepRecord:
    rewards = _rewards(step.get("verifier_result"))
    info = _map(step.get("exception_info"))
    name, text, _ = error_class(info) if info else ("", "", True)
    return StepRecord(
        name=str(step.get("step_name") or ""),
        ran=True,
        rewards=rewards,
        reward=finite(rewards.get("reward")) if rewards else None,
        verifier_error=text if name in VERIFIER_CLASSES else None,
        agent_timed_out=info.get("exception_type") == "AgentTimeoutError",
        timing={
            "agent_execution": _seconds(step.get("agent_execution")),
            "verifier": _seconds(step.get("verifier")),
        },
    )


def _timing(doc: Mapping[str, Any], steps: Sequence[StepRecord]) -> AttemptTiming:
    timing = AttemptTiming(
        environment_setup=_seconds(doc.get("environment_setup")),
        agent_setup=_seconds(doc.get("agent_setup")),
        agent_execution=_seconds(doc.get("agent_execution")),
        verifier=_seconds(doc.get("verifier")),
        total=_seconds(doc),
    )
    for step in steps:  # a multi-step trial times its agent and verifier per step
        for phase in ("agent_execution", "verifier"):
            if (value := step.timing.get(phase)) is not None:
                timing.add(phase, value)
    return timing


def trial_result(doc: Mapping[str, Any], folder: str) -> TrialResult:
    """A Harbor trial's result.json as ours. Its trial is numbered later (`number_trials`): until
    then it is the task's first."""
    agent = _map(doc.get("agent_info"))
    config = _map(doc.get("config"))
    task = str(doc.get("task_name") or folder.rsplit("__", 1)[0])
    steps = [_step(s) for s in doc.get("step_results") or () if isinstance(s, Mapping)]
    rewards = _rewards(doc.get("verifier_result"))
    for step in steps:  # each step's reward beside the trial's, as ours records them
        if step.reward is not None and step.name and step.name not in (rewards or {}):
            rewards = {**(rewards or {}), step.name: step.reward}
    exceptions = [_map(doc.get("exception_info"))] + [
        _map(s.get("exception_info"))
        for s in doc.get("step_results") or ()
        if isinstance(s, Mapping)
    ]
    classes = [error_class(info) for info in exceptions if info]
    valid = doc.get("reward_valid")
    if not isinstance(valid, bool):
        valid = all(keeps for _, _, keeps in classes)
    result = TrialResult(
        task_name=task,
        rollout_name=folder,
        trial_name=task,
        trial_index=0,
        attempt=1,
        agent=str(agent.get("name") or _map(config.get("agent")).get("name") or ""),
        agent_name=str(agent.get("name") or ""),
        agent_version=str(agent["version"]) if agent.get("version") else None,
        model=model_name(agent) or _map(config.get("agent")).get("model_name"),
        started_at=str(doc.get("started_at") or ""),
        finished_at=str(doc["finished_at"]) if doc.get("finished_at") else None,
        rewards=rewards if valid else None,
        agent_result=_usage(
            [doc["agent_result"]]
            if doc.get("agent_result") is not None
            else [
                s.get("agent_result")
                for s in doc.get("step_results") or ()
                if isinstance(s, Mapping)
            ]
        ),
        steps=steps or None,
    )
    for name, text, _ in classes:  # the trial's own exception first, then the steps' in order
        if name in VERIFIER_CLASSES:
            if result.verifier_error is None:
                result.verifier_error, result.verifier_error_category = text, name
        else:
            result.fail(text, name)
    result.timing = _timing(doc, steps)
    return result


def task_of_config(config: Mapping[str, Any]) -> str | None:
    """The task a Harbor trial's config.json names (its package name, else its folder's name)."""
    task = _map(config.get("task"))
    name = task.get("name") or (str(task["path"]).rstrip("/") if task.get("path") else "")
    return str(name).rsplit("/", 1)[-1] or None


def job_settings(config: Mapping[str, Any], result: Mapping[str, Any]) -> dict[str, Any]:
    """A Harbor job's config.json and result.json in evaluation.json's names (what pages show)."""
    agents = [a for a in config.get("agents") or () if isinstance(a, Mapping)]
    datasets = [d for d in config.get("datasets") or () if isinstance(d, Mapping)]
    tasks_dir = next((d.get("path") or d.get("name") for d in datasets if d), None)
    retry = _map(config.get("retry"))
    return {
        "format": "harbor",
        "job_name": config.get("job_name"),
        "agent": str(agents[0].get("name") or agents[0].get("import_path") or "") if agents else "",
        "model": agents[0].get("model_name") if agents else None,
        "tasks_dir": str(tasks_dir) if tasks_dir else None,
        "trials": config.get("n_attempts") if isinstance(config.get("n_attempts"), int) else 1,
        "concurrency": config.get("n_concurrent_trials"),
        "retry_attempts": retry.get("max_retries"),
        "created_at": result.get("started_at"),
    }


def job_progress(result: Mapping[str, Any]) -> tuple[int | None, str | None, str | None]:
    """(trials planned, started_at, finished_at) from a Harbor job's result.json."""
    total = result.get("n_total_trials")
    finished = result.get("finished_at")
    return (
        total if type(total) is int else None,
        str(result["started_at"]) if result.get("started_at") else None,
        str(finished) if finished else None,
    )


# --- ours as Harbor's (bench export --format harbor) -----------------------------------------


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
    start = _time(result.started_at)
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
    error = _exception(
        result.error, result.error_category, result.finished_at, result.reward is not None
    )
    verifier = _exception(
        result.verifier_error, result.verifier_error_category, result.finished_at, False
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
