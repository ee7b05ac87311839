"""Judges through the proxy: a verifier that needs a model gets the proxy's URL and a token of its
own, scoped to one verification, never a provider's key.

A task asks for it by naming a provider's key in its [verifier] env (`JUDGE_KEY =
"${OPENAI_API_KEY}"`, as LLM-judged tasks do): the reference is kept when the task loads
(runs/tasks/checker.py) and filled here with the token. OPENAI_BASE_URL and ANTHROPIC_BASE_URL
point the official SDKs at the proxy, which the verifier reaches on its sandbox's own
127.0.0.1:PORT (runs/sandboxes/netns.py). The token is registered for the verification only:
its calls are counted apart from the agent's (result.json's `verifier_usage`, as BenchFlow counts
a reviewer's), logged in trajectory/verifier_llm_trajectory.jsonl, and it is refused once the
verification ends. The verifier runs in the container the agent had root in, so the agent can
read what the verifier is given: the token is worth nothing after the verification.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from runs.gateway import CALLS_SETTLE_S, ModelGateway, calls_settled
from runs.results.trial_result import AgentUsage
from runs.sandboxes.docker import Sandbox
from runs.sandboxes.netns import listen_in_netns
from runs.secrets import MODEL_KEY_VARS
from runs.tasks.config import VerifierConfig
from runs.tasks.load import Task

_KEY_REF = re.compile(r"\$\{(" + "|".join(sorted(MODEL_KEY_VARS)) + r")(?::-[^}]*)?\}")
JUDGE_LOG = "verifier_llm_trajectory.jsonl"  # under trajectory/, beside the agent's


def judge_vars(verifier: VerifierConfig) -> list[str]:
    """The provider keys the verifier's env names: the verification needs a model when any."""
    return sorted({m[1] for value in verifier.env.values() for m in _KEY_REF.finditer(value)})


def needs_judge(task: Task) -> bool:
    """Whether a verification of the task (or of one of its steps) asks for a model."""
    return any(judge_vars(v) for v in (task.verifier, *(s.verifier for s in task.steps)))


@dataclass
class JudgeAccess:
    """One verification's way to the proxy: its token, the URL its sandbox reaches it by."""

    verification_id: str
    key: str
    url: str
    stop_serving: Callable[[], Awaitable[None]]


def judge_env(env: Mapping[str, str], access: JudgeAccess | None) -> dict[str, str]:
    """The verifier's env: each provider key reference replaced by the verification's token
    (emptied without one: a regrade run with no model proxy), and the SDKs' base URLs
    pointed at the proxy when a model is asked for."""
    token = access.key if access is not None else ""
    out = {name: _KEY_REF.sub(lambda _m: token, value) for name, value in env.items()}
    if access is not None and any(_KEY_REF.search(value) for value in env.values()):
        out["OPENAI_BASE_URL"] = f"{access.url}/v1"
        out["ANTHROPIC_BASE_URL"] = access.url
    return out


async def open_judge(
    gateway: ModelGateway,
    *,
    sandbox: Sandbox,
    attempt_dir: Path,
    key_vars: list[str],
    secrets: list[str],
) -> JudgeAccess:
    """A token for this verification, and the proxy served on the sandbox's own loopback."""
    loop = asyncio.get_running_loop()
    (attempt_dir / "trajectory").mkdir(exist_ok=True)
    verification_id = f"{attempt_dir.name}:verifier"
    key = gateway.register_judge(
        verification_id=verification_id,
        key_vars=key_vars,
        log_path=attempt_dir / "trajectory" / JUDGE_LOG,
        secrets=secrets,
    )
    try:
        pid = await loop.run_in_executor(None, sandbox.pid)
        sock = await loop.run_in_executor(None, listen_in_netns, pid, gateway.port)
        try:
            stop_serving = await gateway.serve(sock)
        except BaseException:
            sock.close()
            raise
    except BaseException:
        gateway.unregister(key)
        raise
    return JudgeAccess(verification_id, key, f"http://127.0.0.1:{gateway.port}", stop_serving)


async def close_judge(gateway: ModelGateway, access: JudgeAccess) -> Any:
    """Stop serving, wait for its calls in flight to be counted, refuse the token from now on;
    returns what the proxy counted (proxy.registry.AttemptUsage)."""
    await access.stop_serving()
    await calls_settled(gateway, access.verification_id, CALLS_SETTLE_S)
    return gateway.unregister(access.key)


class JudgeUse(Protocol):
    """Where a verification's judge use is added up: a trial's result, or a regrade's record."""

    verifier_usage: AgentUsage | None


@dataclass
class RegradeJudgeUse:
    """A regrade's judge use (its regrade.json block keeps it apart from the run's)."""

    verifier_usage: AgentUsage | None = None


@contextlib.asynccontextmanager
async def judged(
    gateway: ModelGateway | None,
    *,
    sandbox: Sandbox,
    attempt_dir: Path,
    verifier: VerifierConfig,
    secrets: list[str],
    result: JudgeUse,
) -> AsyncIterator[JudgeAccess | None]:
    """Around one verification: its judge's access when its env asks for a model (else None),
    and what the judge used added to `result.verifier_usage` after it."""
    key_vars = judge_vars(verifier)
    if gateway is None or not key_vars:
        yield None
        return
    access = await open_judge(
        gateway, sandbox=sandbox, attempt_dir=attempt_dir, key_vars=key_vars, secrets=secrets
    )
    try:
        yield access
    finally:
        usage = await close_judge(gateway, access)
        if usage is not None:
            result.verifier_usage = result.verifier_usage or AgentUsage()
            result.verifier_usage.add_counted(usage)
