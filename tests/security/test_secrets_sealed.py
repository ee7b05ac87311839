"""Hole 1's carrier: a secret typed at launch reaches the workers sealed with the deployment's key,
in Redis with a time limit its coordinator renews, and gone when the job ends; a token of another
deployment, or one its coordinator stopped renewing, does not open."""

from __future__ import annotations

import time

import pytest

from runs.workers.sealed import Sealed, SealError, seal, sealed_key, ttl_s, unseal
from tests.security.leaks import found_in

TYPED = "sk-typed-at-launch-4b1d0c9e8f7a6b5c4d3e2f1a0b9c8d7e"
ALLOWED = "postgres://u:pw-allowed-0123456789@db/x"


def test_sealed_values_open_only_with_the_deployments_key_and_show_in_no_form():
    what = Sealed(agent_env={"OPENAI_API_KEY": TYPED}, host_env={"DATABASE_URL": ALLOWED})
    token = seal(what, "the-deployments-key")
    assert found_in(token, TYPED) == [] and found_in(token, ALLOWED) == []
    assert unseal(token, "the-deployments-key") == what
    with pytest.raises(SealError, match="BENCHFLOW_SECRET_KEY"):
        unseal(token, "another-deployments-key")


def test_a_token_older_than_its_limit_does_not_open(monkeypatch):
    token = seal(Sealed(agent_env={"K": TYPED}), "k")
    later = time.time() + 120
    monkeypatch.setattr(time, "time", lambda: later)
    with pytest.raises(SealError, match="resume the job"):
        unseal(token, "k", max_age_s=60)


async def test_the_coordinator_keeps_its_runs_secrets_in_redis_for_a_time_then_removes_them(
    monkeypatch, tmp_path, settings
):
    import redis

    from runs.workers import dispatch, leases
    from runs.workers.channel import Channel
    from tests.e2e.scaleout import shared_redis

    url = shared_redis()
    settings.SECRET_KEY = "a-test-deployment-key"
    runner = dispatch.RemoteRunner(
        tmp_path,
        lambda _: None,
        None,  # type: ignore[arg-type]
        Channel(url),
        "q",
        Sealed(agent_env={"OPENAI_API_KEY": TYPED}),
    )
    runner.dispatcher = 900_000 + int(time.time()) % 100_000
    key = sealed_key(runner.dispatcher)
    plain = redis.Redis.from_url(url)
    try:
        # when the coordinator says it is alive
        await runner._seal()
        # then Redis holds a sealed token with a time limit, and no form of the secret
        stored = plain.get(key)
        assert stored is not None and found_in(stored, TYPED) == []
        assert 0 < plain.ttl(key) <= ttl_s()
        assert unseal(stored, "a-test-deployment-key").agent_env == {"OPENAI_API_KEY": TYPED}
        # and when the job ends, it is gone
        monkeypatch.setattr(leases, "close_dispatcher", lambda dispatcher: [])
        monkeypatch.setattr(leases, "collected", lambda when: None)
        await runner.close()
        assert plain.get(key) is None
    finally:
        plain.delete(key)
        plain.close()
        runner._db.shutdown(wait=True)
