"""The error table's rules: classify an error, retry or not, name its cause, explain a class.

Retries, the Outcomes block, `bench explain CLASS` and the dashboard all read the one table,
`ERROR_CLASSES` (data, in runs/error_table.py). Classification matches BenchFlow's marker texts
(case-insensitive), checked in `step` order.
"""

from __future__ import annotations

import difflib
import os
import re
import textwrap
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runs.error_table import ERROR_CLASSES, FAULT_WORDS, ErrorClass, Fault, Kind, Marker
from runs.jobfolder import finite

__all__ = [
    "ERROR_CLASSES",
    "FAULT_WORDS",
    "Cause",
    "CircuitBreaker",
    "ErrorClass",
    "Marker",
    "api_error_is_transient",
    "backoff_seconds",
    "cause_of",
    "classify",
    "classify_verifier",
    "error_category",
    "explain_text",
    "is_retried",
    "lookup",
    "provider_fingerprint",
    "should_retry",
    "suggest",
    "verifier_category",
]


@dataclass(frozen=True)
class Cause:
    """Why one trial has no score (or stopped early): a label, whose problem, what next."""

    key: str
    label: str
    fault: Fault
    next: str

    def headline(self) -> str:
        return f"{self.label} ({FAULT_WORDS[self.fault]})"


_BY_NAME: dict[str, ErrorClass] = {c.name: c for c in ERROR_CLASSES}


def _ordered(kind: Kind) -> tuple[tuple[Marker, str], ...]:
    pairs = [(m, c.name) for c in ERROR_CLASSES if c.kind == kind for m in c.markers]
    return tuple(sorted(pairs, key=lambda p: p[0].step))


_AGENT_ORDER = _ordered("agent")
_VERIFIER_ORDER = _ordered("verifier")


def _first_match(message: str, order: tuple[tuple[Marker, str], ...], default: str) -> str:
    lower = message.lower()
    for marker, name in order:
        if all(t in lower for t in marker.all_of):
            return name
    return default


def classify(message: str | None) -> str:
    """The category of an agent/infrastructure error message ("other" when nothing matches)."""
    return _first_match(message or "", _AGENT_ORDER, "other")


def classify_verifier(message: str | None) -> str:
    """The category of a verifier error message ("verifier_other" when nothing matches)."""
    return _first_match(message or "", _VERIFIER_ORDER, "verifier_other")


def api_error_is_transient(message: str | None) -> bool:
    """`provider api error [<kind>/transient] ...` is retried; `/permanent]` is not."""
    return bool(message) and "/transient]" in str(message).lower()


def _normal(name: str) -> str:
    return name.strip().lower().replace("-", "_").replace(" ", "_")


def lookup(name: str) -> ErrorClass | None:
    return _BY_NAME.get(_normal(name))


def suggest(name: str) -> list[str]:
    """Known class names close to `name`, best first (for "did you mean")."""
    return difflib.get_close_matches(_normal(name), list(_BY_NAME), n=3, cutoff=0.5)


def backoff_seconds(attempt: int) -> float:
    return float(min(2 ** max(attempt, 0), 30))


def _reward(result: Mapping[str, Any]) -> float | None:
    rewards = result.get("rewards")
    return finite(rewards.get("reward")) if isinstance(rewards, Mapping) else None


def error_category(result: Mapping[str, Any]) -> str | None:
    """The stored error_category, else the classified error, else None (no error)."""
    error = result.get("error")
    if not error:
        return None
    stored = result.get("error_category")
    return str(stored) if stored in _BY_NAME else classify(str(error))


def verifier_category(result: Mapping[str, Any]) -> str | None:
    error = result.get("verifier_error")
    if not error:
        return None
    stored = result.get("verifier_error_category")
    return str(stored) if stored in _BY_NAME else classify_verifier(str(error))


def is_retried(name: str, message: str | None = None) -> bool:
    """Whether a category is retried; api_error depends on its transient/permanent marker."""
    if name == "api_error":
        return api_error_is_transient(message)
    cls = _BY_NAME.get(name)
    return bool(cls and cls.retried)


# A hung or dropped lane may still be graded; that fallback reward must not hide the failure.
_RETRY_DESPITE_REWARD = frozenset({"idle_timeout", "pipe_closed", "infra_failure"})


def should_retry(result: Mapping[str, Any]) -> bool:
    """Whether another attempt could fix this attempt's result (the caller caps the count).

    Any reward means no retry, except a non-passing fallback reward after an idle timeout, a
    closed pipe or an infrastructure failure. Without a reward the agent error decides, else
    the verifier error (only BenchFlow's own verifier failures are retried).
    """
    category = error_category(result)
    reward = _reward(result)
    if reward is not None:
        return category in _RETRY_DESPITE_REWARD and reward != 1.0
    if category is not None:
        return is_retried(category, str(result.get("error")))
    vcat = verifier_category(result)
    return vcat is not None and is_retried(vcat)


def _fill(text: str, job: str | None, task: str | None) -> str:
    """The next step with {job} (the job folder), {task} (the task folder) and {name} (the task's
    name, as its builds/ log is named) filled in where known."""
    name = task.rstrip("/").rsplit("/", 1)[-1] if task else "<task>"
    return (
        text.replace("{job}", job or "<job dir>")
        .replace("{task}", task or "<task>")
        .replace("{name}", name)
    )


def _integration_cause(result: Mapping[str, Any]) -> str | None:
    info = result.get("integration_failure_info")
    if isinstance(info, Mapping) and info.get("cause"):
        return str(info["cause"])
    found = re.search(r"agent integration failure \[(\w+)\]", str(result.get("error") or ""), re.I)
    return found.group(1).lower() if found else None


_INTEGRATION: dict[str, tuple[str, Fault, str]] = {
    "agent_auth": ("its login or billing failed", "setup", "`bench doctor`"),
    "agent_model": (
        "it does not offer the model",
        "setup",
        "pick a model the agent lists in the error",
    ),
    "agent_install": (
        "its install or runtime is broken",
        "infrastructure",
        "`bench doctor`; delete the agent's folder in ~/.cache/benchflow-site/agents to "
        "reinstall it",
    ),
    "agent_budget": (
        "its model calls bypass the proxy, so its budget cannot be enforced",
        "setup",
        "give the agent an API key instead of a login",
    ),
}


def _short(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def cause_of(
    result: Mapping[str, Any] | None, *, job: str | None = None, task: str | None = None
) -> Cause | None:
    """The cause of an unscored or errored attempt (None when it has a reward).

    `result=None` is an attempt folder without result.json. `job` and `task` fill the next step.
    """
    if result is None:
        return _cause("interrupted", job, task)
    if _reward(result) is not None:
        return None
    category = error_category(result)
    if category is not None:
        return _errored_cause(result, category, job, task)
    vcat = verifier_category(result)
    return _cause(vcat or "no_verdict", job, task)


def _cause(name: str, job: str | None, task: str | None) -> Cause:
    cls = _BY_NAME[name]
    return Cause(name, cls.cause, cls.fault, _fill(cls.next, job, task))


def _errored_cause(
    result: Mapping[str, Any], category: str, job: str | None, task: str | None
) -> Cause:
    if category == "agent_integration":
        why = _integration_cause(result)
        label, fault, step = _INTEGRATION.get(
            why or "", ("it did nothing useful", "agent", "integration_failure_info in result.json")
        )
        return Cause(
            f"agent_integration:{why or 'unknown'}",
            f"the agent integration broke: {label}",
            fault,
            _fill(step, job, task),
        )
    if category == "pipe_closed":
        info = result.get("transport_error_info")
        code = info.get("process_exit_code") if isinstance(info, Mapping) else None
        if isinstance(code, int) and not isinstance(code, bool):
            return Cause(
                "pipe_closed:exit",
                f"the agent process exited with code {code}",
                "agent",
                _fill(
                    "the agent's log (agent/<agent>.txt) has its last words; "
                    "`bench eval resume {job}` reruns it",
                    job,
                    task,
                ),
            )
    if category == "usage_limit":
        info = result.get("usage_limit_info")
        info = info if isinstance(info, Mapping) else {}
        parts = ["usage limit" + (f" on login {info['login']}" if info.get("login") else "")]
        if info.get("window"):
            parts.append(f"{info['window']} window")
        if info.get("resets_at"):
            parts.append(f"resets {info['resets_at']}")
        cls = _BY_NAME["usage_limit"]
        return Cause("usage_limit", ", ".join(parts), "setup", _fill(cls.next, job, task))
    if category == "other":
        cls = _BY_NAME["other"]
        return Cause(
            "other",
            f"other error: {_short(str(result.get('error') or ''), 80)}",
            cls.fault,
            cls.next,
        )
    return _cause(category, job, task)


def explained(name: str) -> ErrorClass | None:
    """The class `bench explain NAME` explains: a class, or an agent_integration cause
    (agent_budget, agent_auth, ...), which explains its class."""
    return lookup(name) or (
        _BY_NAME["agent_integration"] if _normal(name) in _INTEGRATION else None
    )


def explain_text(name: str) -> str:
    """What `bench explain CLASS` prints; an unknown name gets a did-you-mean answer."""
    cls = explained(name)
    if cls is None:
        close = suggest(name)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        return (
            f"Unknown error class '{name}'.{hint}\n"
            f"Known classes: {', '.join(c.name for c in ERROR_CLASSES)}"
        )
    if cls.name == "api_error":
        retried = "only when transient (rate limits, 5xx); permanent provider errors are not"
    else:
        retried = "yes, in a new sandbox" if cls.retried else "no"
    graded = "yes: the verifier still grades what the agent left" if cls.graded else "no"
    body = textwrap.fill(cls.explain, width=88)
    return "\n".join(
        [
            f"{cls.name}: {cls.cause}",
            f"  Whose problem: {FAULT_WORDS[cls.fault]}",
            f"  Retried:       {retried}",
            f"  Graded:        {graded}",
            f"  Next:          {_fill(cls.next, None, None)}",
            "",
            body,
        ]
    )


def provider_fingerprint(message: str | None, category: str | None = None) -> str | None:
    """`<kind>:<status>` of a permanent provider failure, else None."""
    text = str(message or "")
    category = category or classify(text)
    status_match = re.search(r"http (\d{3})", text, re.I)
    status = status_match.group(1) if status_match else "?"
    if category == "api_error":
        if api_error_is_transient(text):
            return None
        kind = re.search(r"provider api error \[([\w.-]+)/", text, re.I)
        return f"{kind.group(1).lower() if kind else 'api_error'}:{status}"
    if category in ("provider_auth", "provider_rejected"):
        return f"{category}:{status}"
    if category == "agent_integration":
        why = _integration_cause({"error": text})
        return f"agent_integration:{why}" if why in ("agent_auth", "agent_install") else None
    return None


def breaker_threshold(env: Mapping[str, str] | None = None) -> int:
    raw = (os.environ if env is None else env).get("BENCHFLOW_API_ERROR_BREAKER_THRESHOLD", "5")
    try:
        return max(int(raw), 0)
    except ValueError:
        return 5


class CircuitBreaker:
    """Opens after `threshold` consecutive identical permanent provider failures (0 disables)."""

    def __init__(self, threshold: int | None = None) -> None:
        self.threshold = breaker_threshold() if threshold is None else max(threshold, 0)
        self.fingerprint: str | None = None
        self.count = 0
        self._open = False
        self._lock = threading.Lock()

    @property
    def is_open(self) -> bool:
        return self._open

    open = is_open

    def record(self, result: Mapping[str, Any]) -> bool:
        """Count one finished attempt's result; returns whether the breaker is now open."""
        fp = None
        if _reward(result) is None and result.get("error"):
            fp = provider_fingerprint(str(result["error"]), error_category(result))
        with self._lock:
            if self._open or self.threshold == 0:
                return self._open
            if fp is None:
                self.fingerprint, self.count = None, 0
            elif fp == self.fingerprint:
                self.count += 1
            else:
                self.fingerprint, self.count = fp, 1
            self._open = self.count >= self.threshold
            return self._open

    def skip_error(self) -> str:
        return (
            f"skipped: api-error circuit breaker open ([{self.fingerprint}] "
            f"x{self.count} consecutive)"
        )
