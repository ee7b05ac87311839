"""The official SDKs as clients of the proxy, in front of a fake provider with fixed usage."""

from __future__ import annotations

import json

import httpx
import pytest

from proxy.server import ProxyServer
from proxy.trajectory import stream_events, stream_text
from tests.proxy.conftest import (
    ANTHROPIC_UPSTREAM_KEY,
    OPENAI_UPSTREAM_KEY,
    anthropic_client,
    openai_client,
    read_log,
)
from tests.proxy.fake_upstream import FakeUpstream

CHAT = {
    "input_tokens": 1000,
    "output_tokens": 50,
    "cache_read_tokens": 800,
    "cache_creation_tokens": 0,
    "total_tokens": 1050,
}
RESPONSES = {
    "input_tokens": 900,
    "output_tokens": 40,
    "cache_read_tokens": 600,
    "cache_creation_tokens": 0,
    "total_tokens": 940,
}
MESSAGES = {
    "input_tokens": 1000,
    "output_tokens": 30,
    "cache_read_tokens": 700,
    "cache_creation_tokens": 200,
    "total_tokens": 1030,
}
MSGS = [{"role": "user", "content": "hello"}]


def counted(proxy: ProxyServer, key: str) -> dict[str, int]:
    u = proxy.registry.usage(key)
    return {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_creation_tokens": u.cache_creation_tokens,
        "total_tokens": u.total_tokens,
    }


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_counts_exact_tokens(proxy, register, upstream, stream: bool) -> None:
    key, log = register("openai/gpt-4o")
    client = openai_client(proxy, key)
    if stream:
        chunks = [
            c
            async for c in await client.chat.completions.create(
                model="gpt-4o", messages=MSGS, stream=True
            )
        ]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        resp = await client.chat.completions.create(model="gpt-4o", messages=MSGS)
        text = resp.choices[0].message.content or ""
        assert resp.usage is not None and resp.usage.total_tokens == 1050
    assert text == "Hi from upstream."
    assert counted(proxy, key) == CHAT
    u = proxy.registry.usage(key)
    # gpt-4o: 200 fresh input at $2.50, 800 cached at $1.25, 50 output at $10 per 1M
    assert u.cost_usd == pytest.approx(0.002)
    assert (u.calls, u.turns, u.price_source) == (1, 1, "benchflow-price-table")
    [line] = read_log(proxy, log)
    assert line["usage"] == CHAT and line["status"] == 200 and line["stream"] is stream
    assert line["cost_usd"] == pytest.approx(0.002)
    assert line["request"]["messages"] == MSGS
    if stream:
        events = stream_events(line["response_sse"].encode())
        assert stream_text(events) == "Hi from upstream."
        assert events[-1] == {"data": "[DONE]"}
    else:
        assert line["response"]["choices"][0]["message"]["content"] == "Hi from upstream."


async def test_chat_stream_usage_is_requested_for_the_client(proxy, register, upstream) -> None:
    key, _ = register("openai/gpt-4o")
    client = openai_client(proxy, key)
    chunks = [
        c
        async for c in await client.chat.completions.create(
            model="gpt-4o", messages=MSGS, stream=True
        )
    ]
    assert upstream.seen[0].body["stream_options"] == {"include_usage": True}
    # the tradeoff: the client also sees the usage chunk it did not ask for
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 1050


async def test_a_body_with_nothing_to_change_is_forwarded_byte_for_byte(
    proxy, register, upstream
) -> None:
    key, _ = register("openai/gpt-4o")
    body = (
        b'{"model":  "gpt-4o", "stream": true,\n "stream_options": {"include_usage": true},'
        b' "messages": [{"role": "user", "content": "hi \\u00e9"}]}'
    )
    async with httpx.AsyncClient() as http:
        r = await http.post(
            proxy.url + "/v1/chat/completions",
            content=body,
            headers={"authorization": f"Bearer {key}"},
        )
    assert r.status_code == 200
    assert upstream.seen[0].raw == body


async def test_the_model_is_rewritten_to_the_attempts_model(proxy, register, upstream) -> None:
    key, log = register("openai/gpt-4o")
    await openai_client(proxy, key).chat.completions.create(model="anything", messages=MSGS)
    assert upstream.seen[0].body["model"] == "gpt-4o"
    assert read_log(proxy, log)[0]["requested_model"] == "anything"


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_counts_exact_tokens(proxy, register, stream: bool) -> None:
    key, log = register("openai/gpt-5")
    client = openai_client(proxy, key)
    if stream:
        events = [
            e
            async for e in await client.responses.create(model="gpt-5", input="hello", stream=True)
        ]
        assert events[-1].type == "response.completed"
        assert events[-1].response.usage.total_tokens == 940
    else:
        resp = await client.responses.create(model="gpt-5", input="hello")
        assert resp.output_text == "Hi from upstream."
    assert counted(proxy, key) == RESPONSES
    [line] = read_log(proxy, log)
    assert line["usage"] == RESPONSES and line["protocol"] == "responses"


@pytest.mark.parametrize("stream", [False, True])
async def test_messages_counts_exact_tokens(proxy, register, upstream, stream: bool) -> None:
    key, log = register("anthropic/claude-sonnet-4-6")
    client = anthropic_client(proxy, key)
    if stream:
        async with client.messages.stream(
            model="claude-sonnet-4-6", max_tokens=64, messages=MSGS
        ) as s:
            msg = await s.get_final_message()
    else:
        msg = await client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=MSGS)
    assert msg.content[0].text == "Hi from upstream."
    assert msg.usage.output_tokens == 30
    assert counted(proxy, key) == MESSAGES
    u = proxy.registry.usage(key)
    # sonnet: 100 fresh at $3, 700 cache reads at $0.30, 200 cache writes at $3.75, 30 out at $15
    assert u.cost_usd == pytest.approx((100 * 3 + 700 * 0.3 + 200 * 3.75 + 30 * 15) / 1e6)
    [line] = read_log(proxy, log)
    assert line["usage"] == MESSAGES
    seen = upstream.seen[0]
    assert seen.headers["x-api-key"] == ANTHROPIC_UPSTREAM_KEY
    assert "authorization" not in seen.headers
    assert seen.headers["anthropic-version"]  # the SDK's own version, passed on


async def test_claude_code_style_bearer_and_beta_query(proxy, register, upstream) -> None:
    key, _ = register("anthropic/claude-sonnet-4-6")
    body = json.dumps(
        {"model": "claude-sonnet-4-6", "max_tokens": 5, "stream": True, "messages": MSGS}
    ).encode()
    headers = {
        "authorization": f"Bearer {key}",
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
    }
    async with httpx.AsyncClient() as http:
        r = await http.post(proxy.url + "/v1/messages?beta=true", content=body, headers=headers)
    assert r.status_code == 200
    seen = upstream.seen[0]
    assert seen.query == b"beta=true"
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.headers["anthropic-beta"] == headers["anthropic-beta"]
    assert seen.headers["x-api-key"] == ANTHROPIC_UPSTREAM_KEY


@pytest.mark.parametrize(
    ("path", "model", "body"),
    [
        ("/v1/chat/completions", "openai/gpt-4o", {"messages": MSGS}),
        (
            "/v1/chat/completions",
            "openai/gpt-4o",
            {"messages": MSGS, "stream": True, "stream_options": {"include_usage": True}},
        ),
        ("/v1/responses", "openai/gpt-5", {"input": "hi"}),
        ("/v1/responses", "openai/gpt-5", {"input": "hi", "stream": True}),
        ("/v1/messages", "anthropic/claude-sonnet-4-6", {"messages": MSGS, "max_tokens": 9}),
        (
            "/v1/messages",
            "anthropic/claude-sonnet-4-6",
            {"messages": MSGS, "max_tokens": 9, "stream": True},
        ),
    ],
)
async def test_response_bytes_pass_through_unchanged(
    proxy, register, upstream: FakeUpstream, path: str, model: str, body: dict
) -> None:
    key, _ = register(model)
    payload = json.dumps({"model": model.split("/")[1], **body}).encode()
    async with httpx.AsyncClient() as http:
        r = await http.post(
            proxy.url + path, content=payload, headers={"authorization": f"Bearer {key}"}
        )
    assert r.status_code == 200
    assert r.content == upstream.sent[-1]
    assert r.headers["x-request-id"] == "req_up_1"
    assert key not in json.dumps(upstream.seen[-1].headers)


async def test_upstream_gets_its_key_from_the_host_never_the_client(
    proxy, register, upstream
) -> None:
    key, _ = register("openai/gpt-4o")
    await openai_client(proxy, key).chat.completions.create(model="gpt-4o", messages=MSGS)
    assert upstream.seen[0].headers["authorization"] == f"Bearer {OPENAI_UPSTREAM_KEY}"
    assert key not in json.dumps(upstream.seen[0].headers)
