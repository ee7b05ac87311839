"""Hole 4's fix, on our side of the sandbox: a verifier that asks for a model gets the proxy's URL
and a token of its own verification, never the provider's key; its calls are counted apart from
the agent's (result.json's verifier_usage, the index) and the token is refused once it ends. The
proxy is the real one, its client the official openai SDK; the sandbox half is in
test_judge_docker.py."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from benchflow_site.gateway import ProxyGateway
from runs.index.rows import attempt_fields
from runs.results.trial_result import AgentUsage
from runs.tasks.config import VerifierConfig
from runs.trials.judge import JudgeAccess, judge_env, judge_vars
from tests.conftest import trial_result

HOST_KEY = "sk-host-openai-0123456789abcdef0123456789"


async def _noop() -> None:
    return None


def test_the_verifiers_env_gets_the_token_and_the_proxys_url_never_the_key():
    verifier = VerifierConfig(env={"JUDGE_KEY": "${OPENAI_API_KEY}", "MODE": "strict"})
    assert judge_vars(verifier) == ["OPENAI_API_KEY"]
    access = JudgeAccess("t__1:verifier", "bf-verification-token", "http://127.0.0.1:4111", _noop)
    env = judge_env(verifier.env, access)
    assert env == {
        "JUDGE_KEY": "bf-verification-token",
        "MODE": "strict",
        "OPENAI_BASE_URL": "http://127.0.0.1:4111/v1",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:4111",
    }
    # without a gateway (a regrade): the reference is emptied, never filled from this machine
    assert judge_env(verifier.env, None) == {"JUDGE_KEY": "", "MODE": "strict"}
    assert judge_vars(VerifierConfig(env={"MODE": "x"})) == []


async def test_a_verifications_token_is_counted_apart_and_refused_once_it_ends(
    tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", HOST_KEY)
    gateway = ProxyGateway()
    port = await gateway.start()
    try:
        agent_key = gateway.register(
            attempt_id="t__1",
            model="mock/echo",
            log_path=tmp_path / "trajectory" / "llm_trajectory.jsonl",
            token_budget=None,
            turn_budget=None,
            solution_text=None,
            on_budget_spent=lambda _id: None,
        )
        judge_key = gateway.register_judge(
            verification_id="t__1:verifier",
            key_vars=["OPENAI_API_KEY"],
            log_path=tmp_path / "trajectory" / "verifier_llm_trajectory.jsonl",
        )
        assert HOST_KEY not in (agent_key, judge_key)
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=judge_key)
        reply = await client.chat.completions.create(
            model="mock/echo", messages=[{"role": "user", "content": "grade this"}]
        )
        assert reply.choices[0].message.content
        # the judge's call is the verification's, not the agent's
        assert gateway.usage("t__1:verifier").turns == 1
        assert gateway.usage("t__1").turns == 0
        usage = gateway.unregister(judge_key)
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(
                model="mock/echo", messages=[{"role": "user", "content": "again"}]
            )
        await client.close()
        # what it used becomes result.json's verifier_usage and the index's
        result = trial_result("t")
        result.verifier_usage = AgentUsage()
        result.verifier_usage.add_counted(usage)
        doc = result.to_json()
        assert doc["verifier_usage"]["n_calls"] == 1
        assert doc["agent_result"] == trial_result("t").to_json()["agent_result"]
        assert attempt_fields(doc)["verifier_usage"]["n_calls"] == 1
        gateway.unregister(agent_key)
    finally:
        await gateway.stop()


def test_a_judges_bare_model_name_goes_to_the_provider_whose_key_it_asked_for():
    from proxy.registry import Attempt, Registry

    registry = Registry(env={"OPENAI_API_KEY": HOST_KEY, "ANTHROPIC_API_KEY": "sk-ant-x" * 3})
    key = registry.register(Attempt("v", None, provider="openai"))
    state = registry.lookup(key)
    assert state is not None
    assert registry.route_for(state, "gpt-4o-mini")[0].requested == "openai/gpt-4o-mini"
    assert registry.route_for(state, "claude-haiku-4-5")[0].provider == "anthropic"
