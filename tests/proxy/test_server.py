"""The proxy's own endpoints, routing refusals and the server's life cycle."""

from __future__ import annotations

import asyncio

import anthropic
import httpx
import openai
import pytest

from proxy.registry import Attempt
from proxy.server import ProxyServer
from tests.proxy.conftest import anthropic_client, openai_client

MSGS = [{"role": "user", "content": "hello"}]


async def test_claude_codes_probe_is_answered(proxy: ProxyServer) -> None:
    async with httpx.AsyncClient() as http:
        assert (await http.head(proxy.url + "/")).status_code == 200
        assert (await http.get(proxy.url + "/")).status_code == 200
        r = await http.get(proxy.url + "/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def test_an_unknown_path_is_answered_in_the_clients_own_error_format(proxy, register) -> None:
    key, _ = register("anthropic/claude-sonnet-4-6")
    # an Anthropic client (x-api-key) gets Anthropic's shape, which its SDK reads
    with pytest.raises(anthropic.NotFoundError) as err:
        await anthropic_client(proxy, key).messages.batches.list()
    assert err.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "no route for GET /v1/messages/batches"},
    }
    # an OpenAI client gets OpenAI's
    async with httpx.AsyncClient() as http:
        r = await http.get(proxy.url + "/v1/nothing", headers={"authorization": f"Bearer {key}"})
    assert r.json()["error"] == {
        "message": "no route for GET /v1/nothing",
        "type": "not_found_error",
        "param": None,
        "code": "not_found",
    }


async def test_models_lists_the_attempts_model_for_both_sdks(proxy, register) -> None:
    key, _ = register("anthropic/claude-sonnet-4-6")
    page = await openai_client(proxy, key).models.list()
    assert [m.id for m in page.data] == ["claude-sonnet-4-6"]
    apage = await anthropic_client(proxy, key).models.list()
    assert [m.id for m in apage.data] == ["claude-sonnet-4-6"]
    with pytest.raises(openai.AuthenticationError):
        await openai_client(proxy, "bf-wrong").models.list()


async def test_a_protocol_the_provider_does_not_serve_is_refused(proxy, register, upstream) -> None:
    key, _ = register("anthropic/claude-sonnet-4-6")
    with pytest.raises(openai.BadRequestError, match="protocol_not_served"):
        await openai_client(proxy, key).chat.completions.create(model="x", messages=MSGS)
    assert upstream.seen == [] and proxy.registry.usage(key).turns == 0


async def test_a_body_that_is_not_json_gets_400(proxy, register) -> None:
    key, _ = register("mock/echo")
    async with httpx.AsyncClient() as http:
        r = await http.post(
            proxy.url + "/v1/messages", content=b"{not json", headers={"x-api-key": key}
        )
    assert r.status_code == 400 and r.json()["type"] == "error"


async def test_a_key_without_a_model_routes_each_request_by_prefix(proxy, register) -> None:
    key, _ = register(None)
    client = openai_client(proxy, key)
    r = await client.chat.completions.create(model="mock/echo", messages=MSGS)
    assert r.choices[0].message.content == "echo: hello"
    with pytest.raises(openai.BadRequestError, match="did you mean 'mock'"):
        await client.chat.completions.create(model="mokc/echo", messages=MSGS)
    with pytest.raises(anthropic.BadRequestError, match="export XIAOMI_API_KEY"):
        await anthropic_client(proxy, key).messages.create(
            model="xiaomi/mimo-v2.6-flash", max_tokens=5, messages=MSGS
        )
    u = proxy.registry.usage(key)
    assert (u.turns, u.refused_calls) == (1, 0)  # unroutable calls are not turns
    assert u.cost_usd == pytest.approx(u.input_tokens * 1e-6 + u.output_tokens * 5e-6)


async def test_start_binds_a_free_port_and_stop_releases_it(tmp_path) -> None:
    server = ProxyServer(env={})
    port = await server.start("127.0.0.1", 0)
    assert port > 0 and server.port == port and server.url == f"http://127.0.0.1:{port}"
    key = server.registry.register(Attempt("a", "mock/echo", tmp_path / "log.jsonl"))
    r = await openai_client(server, key).chat.completions.create(model="m", messages=MSGS)
    assert r.choices[0].message.content == "echo: hello"
    await server.stop()
    assert (tmp_path / "log.jsonl").read_text().count("\n") == 1  # stop flushed the log
    again = ProxyServer(env={})
    assert await again.start("127.0.0.1", port) == port
    await again.stop()


async def test_count_tokens_is_answered_and_is_not_a_turn(proxy, register) -> None:
    key, _ = register("mock/oracle", turn_budget=0)
    page = await anthropic_client(proxy, key).messages.count_tokens(
        model="claude-sonnet-4-6", messages=MSGS
    )
    assert page.input_tokens > 0
    u = proxy.registry.usage(key)
    assert (u.turns, u.refused_calls) == (0, 0)


async def test_standalone_proxy_prints_its_url_and_key_and_stops_on_ctrl_c() -> None:
    import signal
    import sys

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from proxy.server import run_standalone; "
        "run_standalone('127.0.0.1', 0, ['my-own-key-123'])",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        assert line.startswith("BenchFlow model proxy on http://127.0.0.1:")
        url, key = line.split()[4], line.split()[-1]
        assert key == "my-own-key-123"
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
        r = await client.chat.completions.create(model="mock/echo", messages=MSGS)
        assert r.choices[0].message.content == "echo: hello"
    finally:
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
