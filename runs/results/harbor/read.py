"""Harbor's documents as ours: a trial's result.json and config.json, a job's config.json and
result.json (runs/results/harbor/__init__.py describes the layout)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from runs import errors
from runs.jobfolder import finite
from runs.results.harbor.policy import EXCEPTIONS, VERIFIER_CLASSES
from runs.results.trial_result import AgentUsage, AttemptTiming, StepRecord, TrialResult


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


def parse_time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def _seconds(phase: Any) -> float | None:
    start, end = (
        parse_time(_map(phase).get("started_at")),
        parse_time(_map(phase).get("finished_at")),
    )
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
    """A Harbor trial's result.json as ours. Its trial is numbered later
    (attempt_folder.number_trials): until then it is the task's first."""
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
