"""Upstream errors, broken clients, unreachable providers and secrets in the log."""

from __future__ import annotations

import asyncio
import json

import anthropic
import httpx
import openai
import orjson
import pytest

from proxy.registry import Attempt
from proxy.server import ProxyServer
from tests.proxy.conftest import (
    ANTHROPIC_UPSTREAM_KEY,
    OPENAI_UPSTREAM_KEY,
    anthropic_client,
    openai_client,
    read_log,
)
from tests.proxy.fake_upstream import FakeUpstream, sse

MSGS = [{"role": "user", "content": "hello"}]
RATE = {
    "error": {
        "message": "Rate limit reached for gpt-4o",
        "type": "requests",
        "code": "rate_limit_exceeded",
    }
}
BOOM = {"error": {"message": "The server had an error", "type": "server_error"}}


@pytest.mark.parametrize(
    ("status", "body", "exc", "cls"),
    [
        (429, RATE, openai.RateLimitError, "provider_rate_limit"),
        (500, BOOM, openai.InternalServerError, "api_error"),
        (503, BOOM, openai.InternalServerError, "api_error"),
        (
            401,
            {"error": {"message": "Incorrect API key", "code": "invalid_api_key"}},
            openai.AuthenticationError,
            "provider_auth",
        ),
        (403, {"error": {"message": "Forbidden"}}, openai.PermissionDeniedError, "provider_auth"),
    ],
)
async def test_upstream_errors_reach_the_agent_and_are_recorded(
    proxy, register, upstream: FakeUpstream, status, body, exc, cls
) -> None:
    key, log = register("openai/gpt-4o")
    upstream.fail_next.append((status, body))
    with pytest.raises(exc) as err:
        await openai_client(proxy, key).chat.completions.create(model="gpt-4o", messages=MSGS)
    assert err.value.status_code == status
    assert err.value.body == body["error"]
    u = proxy.registry.usage(key)
    assert u.errors == {cls: 1} and u.turns == 1 and u.total_tokens == 0
    assert u.last_error is not None and body["error"]["message"] in u.last_error
    [line] = read_log(proxy, log)
    assert (line["status"], line["error_class"], line["response"]) == (status, cls, body)


async def test_an_upstream_key_quoted_in_an_error_reaches_neither_the_agent_nor_the_record(
    proxy, register, upstream
) -> None:
    # given a provider that quotes the key it was sent in its rate-limit error
    key, log = register("openai/gpt-4o")
    quoted = {
        "error": {
            "message": f"Rate limit reached for key {OPENAI_UPSTREAM_KEY}",
            "type": "requests",
        }
    }
    upstream.fail_next.append((429, quoted))
    # when the agent's call gets that answer
    with pytest.raises(openai.RateLimitError) as err:
        await openai_client(proxy, key).chat.completions.create(model="gpt-4o", messages=MSGS)
    # then the agent sees the error without the key, and so do the usage record and the log
    assert OPENAI_UPSTREAM_KEY not in json.dumps(err.value.body)
    assert "Rate limit reached for key [REDACTED]" in err.value.body["message"]
    u = proxy.registry.usage(key)
    assert u.errors == {"provider_rate_limit": 1}
    assert "Rate limit reached for key" in (u.last_error or "") and OPENAI_UPSTREAM_KEY not in (
        u.last_error or ""
    )
    [line] = read_log(proxy, log)
    assert OPENAI_UPSTREAM_KEY not in json.dumps(line)


async def test_a_request_with_nan_still_makes_a_strict_json_log_line(
    proxy, register, upstream
) -> None:
    # given a request body that Python's json accepts but JSON does not (NaN), sent unchanged
    key, log = register("openai/gpt-4o")
    body = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"temperature":NaN}'
    # when it goes through the proxy
    async with httpx.AsyncClient() as http:
        r = await http.post(
            proxy.url + "/v1/chat/completions",
            content=body,
            headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
        )
    assert r.status_code == 200
    assert upstream.seen[-1].raw == body  # passed on unchanged
    # then the log line is strict JSON, the request in it re-serialised (NaN as null)
    proxy.writer.flush()
    [line] = log.read_bytes().splitlines()
    doc = orjson.loads(line)
    assert doc["request"]["temperature"] is None and doc["request"]["model"] == "gpt-4o"


async def test_error_bodies_pass_through_byte_for_byte(proxy, register, upstream) -> None:
    key, _ = register("anthropic/claude-sonnet-4-6")
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    upstream.fail_next.append((529, overloaded))
    async with httpx.AsyncClient() as http:
        r = await http.post(
            proxy.url + "/v1/messages",
            headers={"x-api-key": key},
            json={"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": MSGS, "stream": True},
        )
    assert (r.status_code, r.content) == (529, upstream.sent[-1])
    assert proxy.registry.usage(key).errors == {"api_error": 1}


async def test_anthropic_sdk_sees_a_rate_limit(proxy, register, upstream) -> None:
    key, _ = register("anthropic/claude-sonnet-4-6")
    upstream.fail_next.append(
        (429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
    )
    with pytest.raises(anthropic.RateLimitError):
        await anthropic_client(proxy, key).messages.create(
            model="claude-sonnet-4-6", max_tokens=5, messages=MSGS
        )
    assert proxy.registry.usage(key).errors == {"provider_rate_limit": 1}


async def test_a_stream_the_upstream_breaks_reaches_the_agent_broken(
    proxy, register, upstream
) -> None:
    # given an upstream that dies after two frames of a stream
    key, log = register("openai/gpt-4o")
    upstream.break_after = 2
    # when the official SDK reads the stream through the proxy
    client = openai_client(proxy, key)
    got: list[str] = []
    with pytest.raises((openai.APIError, httpx.HTTPError)):
        stream = await client.chat.completions.create(model="gpt-4o", messages=MSGS, stream=True)
        async for chunk in stream:
            got += [c.delta.content or "" for c in chunk.choices]
    # then it saw the two frames and then an error, not a clean end of a cut-short answer
    assert got == ["Hi ", "from "]
    u = proxy.registry.usage(key)
    assert u.errors == {"api_error": 1} and "upstream stream broke" in (u.last_error or "")
    [line] = read_log(proxy, log)
    assert line["error_class"] == "api_error"


async def test_an_in_band_stream_error_is_recorded(proxy, register, upstream, monkeypatch) -> None:
    key, _ = register("anthropic/claude-sonnet-4-6")
    error_frame = sse(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error"
    )
    monkeypatch.setattr("tests.proxy.fake_upstream.messages_frames", lambda model: [error_frame])
    async with httpx.AsyncClient() as http:
        r = await http.post(
            proxy.url + "/v1/messages",
            headers={"x-api-key": key},
            json={"model": "m", "max_tokens": 5, "messages": MSGS, "stream": True},
        )
    assert r.status_code == 200 and r.content == error_frame
    u = proxy.registry.usage(key)
    assert u.errors == {"api_error": 1} and "Overloaded" in (u.last_error or "")


@pytest.mark.parametrize(
    ("path", "model", "body", "tokens"),
    [
        ("/v1/chat/completions", "openai/gpt-4o", {"messages": MSGS, "stream": True}, 1050),
        (
            "/v1/messages",
            "anthropic/claude-sonnet-4-6",
            {"messages": MSGS, "max_tokens": 9, "stream": True},
            1030,
        ),
    ],
)
async def test_a_client_that_disconnects_mid_stream_is_still_counted(
    proxy: ProxyServer, register, upstream: FakeUpstream, path, model, body, tokens
) -> None:
    key, log = register(model)
    upstream.frame_pause = 0.05
    async with httpx.AsyncClient() as http:
        async with http.stream(
            "POST", proxy.url + path, headers={"x-api-key": key}, json={"model": "m", **body}
        ) as r:
            async for _ in r.aiter_raw():
                break  # leave after the first bytes: the connection is closed
    await asyncio.wait_for(_finished(proxy, key), 10)
    u = proxy.registry.usage(key)
    assert (u.total_tokens, u.calls, u.in_flight) == (tokens, 1, 0)
    [line] = read_log(proxy, log)
    assert line["client_disconnected"] is True and line["usage"]["total_tokens"] == tokens


async def _finished(proxy: ProxyServer, key: str) -> None:
    while proxy.registry.usage(key).calls < 1:
        await asyncio.sleep(0.02)


async def test_secrets_never_reach_the_log(proxy, register, upstream: FakeUpstream) -> None:
    upstream.echo_auth = True  # the provider echoes the auth header it got into its reply
    key, log = register("openai/gpt-4o")
    leaked = "sk-proj-userpastedthiskey0123456789abcdef"
    resp = await openai_client(proxy, key).chat.completions.with_raw_response.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": f"my key is {leaked}"}],
        extra_headers={"x-api-key": key},
    )
    assert OPENAI_UPSTREAM_KEY in resp.http_response.text  # the client got it from upstream
    proxy.writer.flush()
    text = log.read_text()
    for secret in (OPENAI_UPSTREAM_KEY, ANTHROPIC_UPSTREAM_KEY, key, leaked):
        assert secret not in text
    assert "[REDACTED]" in text
    assert "authorization" not in json.loads(text)["request"]


async def test_the_secrets_an_agent_was_given_never_reach_its_log(proxy, register) -> None:
    # given an attempt whose agent was given a token no key pattern knows (a GitHub token)
    token = "ghp_" + "Zy9Xw8Vu7T" * 4
    key, log = register("mock/echo", secrets=[token])
    assert token in proxy.registry.secrets()
    # when the agent sends it to its model (it ran `env` and the output went into the conversation)
    await openai_client(proxy, key).chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"GITHUB_TOKEN={token}"}]
    )
    # then the line holds the call, not the token, and the value is forgotten with the attempt
    proxy.registry.unregister(key)
    text = log.read_text()
    assert token not in text and "GITHUB_TOKEN=[REDACTED]" in text
    assert token not in proxy.registry.secrets()


async def test_an_unreachable_upstream_is_a_502_in_the_apis_format(tmp_path) -> None:
    env = {"OPENAI_API_KEY": "sk-x", "BENCHFLOW_UPSTREAM_OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    server = ProxyServer(env=env)
    await server.start("127.0.0.1", 0)
    try:
        key = server.registry.register(Attempt("a", "openai/gpt-4o", tmp_path / "l.jsonl"))
        with pytest.raises(openai.APIStatusError) as err:
            await openai_client(server, key).chat.completions.create(model="gpt-4o", messages=MSGS)
        assert err.value.status_code == 502
        assert "upstream unreachable" in err.value.message
        u = server.registry.usage(key)
        assert u.errors == {"infra_failure": 1} and u.in_flight == 0
    finally:
        await server.stop()


async def test_a_body_over_the_servers_limit_reaches_both_sdks_with_its_reason(
    proxy, register, monkeypatch
) -> None:
    # given a proxy whose server takes bodies of at most 200 bytes
    from proxy import http11_conn

    monkeypatch.setattr(http11_conn, "MAX_BODY", 200)
    key, _ = register("mock/echo")
    long = [{"role": "user", "content": "x" * 500}]
    # when each SDK sends more, then it raises with the status and the server's reason
    with pytest.raises(openai.APIStatusError) as oe:
        await openai_client(proxy, key).chat.completions.create(model="m", messages=long)
    with pytest.raises(anthropic.APIStatusError) as ae:
        await anthropic_client(proxy, key).messages.create(model="m", max_tokens=5, messages=long)
    for err in (oe.value, ae.value):
        assert err.status_code == 413
        assert "Request body too large (over 200 bytes)" in str(err), str(err)
