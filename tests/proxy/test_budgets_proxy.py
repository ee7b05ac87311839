"""Per-trial budgets enforced by the proxy, seen through the official SDKs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import anthropic
import openai
import pytest

from proxy.server import ProxyServer
from tests.proxy.conftest import anthropic_client, openai_client, read_log
from tests.proxy.fake_upstream import FakeUpstream

MSGS = [{"role": "user", "content": "hello"}]


async def until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_a_turn_budget_of_5_forwards_exactly_5_of_20_concurrent_calls(
    proxy: ProxyServer, register, upstream: FakeUpstream
) -> None:
    spent: list[str] = []
    key, _ = register("openai/gpt-4o", turn_budget=5, on_budget_spent=spent.append)
    client = openai_client(proxy, key)
    upstream.gate = asyncio.Event()  # hold every forwarded call until all 20 have started
    calls = [
        asyncio.create_task(client.chat.completions.create(model="gpt-4o", messages=MSGS))
        for _ in range(20)
    ]
    await until(lambda: proxy.registry.usage(key).refused_calls == 15 and upstream.in_flight == 5)
    upstream.gate.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    refused = [r for r in results if isinstance(r, openai.BadRequestError)]
    assert len(refused) == 15 and len(upstream.seen) == 5
    u = proxy.registry.usage(key)
    assert (u.turns, u.calls, u.refused_calls, u.stopped_by) == (5, 5, 15, "turns")
    assert u.stopped_at == {"tokens": 0, "turns": 5}
    assert u.total_tokens == 5 * 1050
    assert spent == ["attempt-1"]


async def test_a_token_budget_is_passed_only_by_calls_already_in_flight(
    proxy: ProxyServer, register, upstream: FakeUpstream
) -> None:
    key, _ = register("openai/gpt-4o", token_budget=1500)
    client = openai_client(proxy, key)
    upstream.gate = asyncio.Event()
    first = [
        asyncio.create_task(client.chat.completions.create(model="gpt-4o", messages=MSGS))
        for _ in range(3)
    ]
    await until(lambda: upstream.in_flight == 3)
    upstream.gate.set()
    await asyncio.gather(*first)
    assert proxy.registry.usage(key).total_tokens == 3 * 1050  # past 1,500, by in-flight calls
    with pytest.raises(openai.BadRequestError) as err:
        await client.chat.completions.create(model="gpt-4o", messages=MSGS)
    assert len(upstream.seen) == 3
    u = proxy.registry.usage(key)
    assert (u.stopped_by, u.stopped_at, u.refused_calls) == (
        "tokens",
        {"tokens": 3150, "turns": 3},
        1,
    )
    assert "the token budget of 1,500 is spent (3,150 tokens, 3 turns used)" in str(err.value)


async def test_sequential_calls_stop_once_the_token_budget_is_spent(
    proxy, register, upstream
) -> None:
    key, _ = register("openai/gpt-4o", token_budget=2000)
    client = openai_client(proxy, key)
    await client.chat.completions.create(model="gpt-4o", messages=MSGS)  # 1,050
    await client.chat.completions.create(model="gpt-4o", messages=MSGS)  # 2,100: over
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="gpt-4o", messages=MSGS)
    assert len(upstream.seen) == 2


async def test_refusal_in_openai_format(proxy, register) -> None:
    key, log = register("openai/gpt-5", turn_budget=0)
    client = openai_client(proxy, key)
    for call in (
        client.chat.completions.create(model="gpt-5", messages=MSGS),
        client.responses.create(model="gpt-5", input="hi", stream=True),
    ):
        with pytest.raises(openai.BadRequestError) as err:
            await call
        assert err.value.status_code == 400
        assert err.value.code == "trial_budget_spent"
        body = err.value.body
        assert isinstance(body, dict)
        assert body["type"] == "invalid_request_error"
        assert body["message"] == (
            "trial_budget_spent: the turn budget of 0 is spent (0 tokens, 0 turns used)"
        )
    lines = read_log(proxy, log)
    assert [(line["status"], line["refused"]) for line in lines] == [(400, True), (400, True)]


async def test_refusal_in_anthropic_format(proxy, register) -> None:
    key, _ = register("anthropic/claude-sonnet-4-6", turn_budget=0)
    client = anthropic_client(proxy, key)
    with pytest.raises(anthropic.BadRequestError) as err:
        await client.messages.create(model="claude-sonnet-4-6", max_tokens=5, messages=MSGS)
    assert err.value.status_code == 400
    assert err.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "trial_budget_spent: the turn budget of 0 is spent (0 tokens, 0 turns used)",
        },
    }
    assert "trial_budget_spent" in str(err.value)


async def test_one_attempts_key_never_spends_anothers_budget(proxy, register, upstream) -> None:
    key_a, _ = register("openai/gpt-4o", turn_budget=2)
    key_b, _ = register("openai/gpt-4o", turn_budget=2)
    a, b = openai_client(proxy, key_a), openai_client(proxy, key_b)
    for _ in range(2):
        await a.chat.completions.create(model="gpt-4o", messages=MSGS)
    with pytest.raises(openai.BadRequestError):
        await a.chat.completions.create(model="gpt-4o", messages=MSGS)
    assert proxy.registry.usage(key_b).turns == 0
    for _ in range(2):
        await b.chat.completions.create(model="gpt-4o", messages=MSGS)
    ua, ub = proxy.registry.usage(key_a), proxy.registry.usage(key_b)
    assert (ua.turns, ua.refused_calls, ub.turns, ub.refused_calls) == (2, 1, 2, 0)
    assert ua.total_tokens == ub.total_tokens == 2100


@pytest.mark.parametrize("key", ["bf-not-a-registered-key-000000000000000", ""])
async def test_an_unknown_key_gets_401_in_each_apis_format(proxy, upstream, key: str) -> None:
    with pytest.raises(openai.AuthenticationError) as oerr:
        await openai_client(proxy, key or "x").chat.completions.create(
            model="gpt-4o", messages=MSGS
        )
    assert oerr.value.status_code == 401 and oerr.value.code == "invalid_api_key"
    with pytest.raises(anthropic.AuthenticationError) as aerr:
        await anthropic_client(proxy, key or "x").messages.create(
            model="claude-sonnet-4-6", max_tokens=5, messages=MSGS
        )
    assert aerr.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    assert upstream.seen == []


async def test_an_unregistered_key_stops_working(proxy, register) -> None:
    key, log = register("mock/echo")
    client = openai_client(proxy, key)
    await client.chat.completions.create(model="mock/echo", messages=MSGS)
    final = proxy.registry.unregister(key)
    assert final is not None and final.calls == 1
    assert len(log.read_text().splitlines()) == 1  # unregister flushed the log
    with pytest.raises(openai.AuthenticationError):
        await client.chat.completions.create(model="mock/echo", messages=MSGS)
