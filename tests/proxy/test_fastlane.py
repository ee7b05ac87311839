"""The fast lane (proxy/fastlane.py): what it does that the ASGI path does for it otherwise.

A raw TCP upstream, scripted per connection, makes the failures a pooled connection meets:
closed before answering, broken mid-answer, silent. Every other behaviour is covered twice
by the whole proxy suite (the `proxy` fixture runs each test with and without the lane).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest

from proxy.registry import Attempt
from proxy.server import ProxyServer
from tests.proxy.conftest import openai_client, read_log
from tests.proxy.fake_upstream import CHAT_USAGE, chat_body, chat_frames
from tests.proxy.test_http11 import sandbox_listener

MSGS = [{"role": "user", "content": "hello"}]
ANSWER = json.dumps(chat_body("gpt-4o")).encode()


class ScriptedUpstream:
    """Each accepted connection plays the next behaviour of `script` ("ok" once the script is
    used up): ok (answers every request), close (reads a request, closes unanswered),
    partial (sends half an answer, closes), silent (reads, never answers), gated (answers
    once `gate` is set), sse (answers with an event stream)."""

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)
        self.requests = 0
        self.gate = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> ScriptedUpstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _read_request(self, reader: asyncio.StreamReader) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return False
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        await reader.readexactly(length)
        self.requests += 1
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        how = self.script.pop(0) if self.script else "ok"
        try:
            while await self._read_request(reader):
                if how == "close":
                    break
                if how == "partial":
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        b"content-length: 1000\r\n\r\n" + ANSWER[:20]
                    )
                    await writer.drain()
                    break
                if how == "silent":
                    await asyncio.sleep(3600)
                if how == "gated":
                    await self.gate.wait()
                if how == "sse":
                    body = b"".join(chat_frames("gpt-4o", include_usage=True))
                    ctype = b"text/event-stream"
                else:
                    body, ctype = ANSWER, b"application/json"
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
                    % (ctype, len(body), body)
                )
                await writer.drain()
        finally:
            writer.close()


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedUpstream]:
    up = await ScriptedUpstream([]).start()
    yield up
    await up.stop()


@pytest.fixture
async def server(scripted: ScriptedUpstream, tmp_path: Path) -> AsyncIterator[ProxyServer]:
    env = {
        "OPENAI_API_KEY": "sk-upstream-0123456789abcdef",
        "BENCHFLOW_UPSTREAM_OPENAI_BASE_URL": scripted.url + "/v1",
    }
    proxy = ProxyServer(env=env)
    await proxy.start("127.0.0.1", 0)
    yield proxy
    await proxy.stop()


def _register(proxy: ProxyServer, tmp_path: Path) -> tuple[str, Path]:
    log = tmp_path / "trajectory" / "llm_trajectory.jsonl"
    return proxy.registry.register(Attempt("a-1", "openai/gpt-4o", log)), log


async def _pooled(proxy: ProxyServer, up: ScriptedUpstream, script: list[str]) -> None:
    """One idle pooled connection per behaviour, in the order calls will take them."""
    up.script = list(script)
    assert proxy._client is not None
    for _ in script:
        await proxy._client.connect_ahead(up.url)
    await asyncio.sleep(0.05)  # each accepted, so each has its behaviour
    proxy._client._idle[proxy._client._parse(up.url)[0]].reverse()  # popped from the end


async def test_a_dead_pooled_connection_is_sent_again_on_a_new_one(
    server, scripted, tmp_path
) -> None:
    # given a pooled connection the upstream closes when a request arrives on it
    key, log = _register(server, tmp_path)
    await _pooled(server, scripted, ["close"])
    # when a call takes the fast lane on it
    reply = await openai_client(server, key).chat.completions.create(model="gpt-4o", messages=MSGS)
    # then the call went again on a new connection: answered, and counted once
    assert reply.choices[0].message.content == "Hi from upstream."
    assert server.app.fast_calls == 1 and scripted.requests == 2
    u = server.registry.usage(key)
    assert (u.turns, u.calls, u.in_flight, u.errors) == (1, 1, 0, {})
    assert u.input_tokens == CHAT_USAGE["prompt_tokens"]
    assert [line["status"] for line in read_log(server, log)] == [200]


async def test_an_answer_broken_midway_is_a_502_counted_once(server, scripted, tmp_path) -> None:
    # given a pooled connection whose upstream dies after sending part of its answer
    key, log = _register(server, tmp_path)
    await _pooled(server, scripted, ["partial"])
    # when a call takes it, then the agent gets a 502 in its API's format, not a resend
    with pytest.raises(openai.APIStatusError) as err:
        await openai_client(server, key).chat.completions.create(model="gpt-4o", messages=MSGS)
    assert err.value.status_code == 502 and "upstream read failed" in err.value.message
    assert server.app.fast_calls == 1 and scripted.requests == 1
    u = server.registry.usage(key)
    assert (u.turns, u.calls, u.in_flight, u.errors) == (1, 1, 0, {"infra_failure": 1})
    [line] = read_log(server, log)
    assert (line["status"], line["error_class"]) == (502, "infra_failure")


async def test_a_silent_upstream_times_out(server, scripted, tmp_path) -> None:
    # given an upstream that reads the call and never answers, and a short read timeout
    key, _ = _register(server, tmp_path)
    server._client.read_timeout = 0.3
    await _pooled(server, scripted, ["silent"])
    # when a call takes the fast lane, then the sweep fails it with a 502 within seconds
    with pytest.raises(openai.APIStatusError) as err:
        await asyncio.wait_for(
            openai_client(server, key).chat.completions.create(model="gpt-4o", messages=MSGS), 5
        )
    assert err.value.status_code == 502 and "upstream sent nothing" in err.value.message
    assert server.registry.usage(key).errors == {"infra_failure": 1}


async def test_a_stream_the_client_did_not_ask_for_is_passed_on_and_counted(
    server, scripted, tmp_path
) -> None:
    # given an upstream that answers a plain call with an event stream
    key, log = _register(server, tmp_path)
    await _pooled(server, scripted, ["sse"])
    async with httpx.AsyncClient() as http:
        resp = await http.post(
            server.url + "/v1/chat/completions",
            headers={"authorization": f"Bearer {key}"},
            json={"model": "gpt-4o", "messages": MSGS},
        )
    # then the client gets the stream as sent, and its usage is counted
    assert resp.status_code == 200 and resp.content == b"".join(chat_frames("gpt-4o", True))
    assert server.app.fast_calls == 1
    assert server.registry.usage(key).output_tokens == CHAT_USAGE["completion_tokens"]
    [line] = read_log(server, log)
    assert line["stream"] is True and "Hi " in line["response_sse"]


def _raw_request(key: str) -> bytes:
    body = json.dumps({"model": "gpt-4o", "messages": MSGS}).encode()
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer %s\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (key.encode(), len(body), body)
    )


async def test_pipelined_calls_are_answered_in_order(server, scripted, tmp_path) -> None:
    # given two calls sent back to back on one connection
    key, _ = _register(server, tmp_path)
    await _pooled(server, scripted, ["ok"])
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(_raw_request(key) * 2)
    # then both are answered, one after the other, each through the fast lane
    answers = []
    for _ in range(2):
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        answers.append((head.split(b" ")[1], await reader.readexactly(length)))
    writer.close()
    assert answers == [(b"200", ANSWER)] * 2
    assert server.app.fast_calls == 2 and server.registry.usage(key).calls == 2


async def test_a_call_whose_client_left_is_counted_when_the_upstream_answers(
    server, scripted, tmp_path
) -> None:
    # given a call held by the upstream, and a client that leaves before the answer
    key, log = _register(server, tmp_path)
    await _pooled(server, scripted, ["gated"])
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(_raw_request(key))
    await writer.drain()
    await asyncio.sleep(0.1)
    writer.close()
    await asyncio.sleep(0.1)
    # when the upstream answers, then the call is counted in full and the connection let go
    scripted.gate.set()
    for _ in range(50):
        if server.registry.usage(key).calls:
            break
        await asyncio.sleep(0.02)
    u = server.registry.usage(key)
    assert (u.calls, u.in_flight, u.output_tokens) == (1, 0, CHAT_USAGE["completion_tokens"])
    assert server._server is not None and not server._server.connections
    assert [line["status"] for line in read_log(server, log)] == [200]


@pytest.mark.parametrize("answer", [True, False])
async def test_a_listener_stopped_mid_call_waits_then_cancels(
    server, scripted, tmp_path, answer
) -> None:
    # given a sandbox listener with a call in the fast lane that the upstream holds
    key, log = _register(server, tmp_path)
    await _pooled(server, scripted, ["gated"])
    assert server._server is not None
    port, close = await sandbox_listener(server._server)  # as ProxyServer.serve_socket does
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_raw_request(key))
    await writer.drain()
    await asyncio.sleep(0.1)
    assert server.app.fast_calls == 1
    # when the listener stops, giving calls 0.5 s, and the upstream answers in time (or not)
    if answer:
        asyncio.get_running_loop().call_later(0.1, scripted.gate.set)
    await asyncio.wait_for(close(0.5), 5)
    # then the call is counted either way: in full, or as the proxy's failure
    u = server.registry.usage(key)
    assert (u.calls, u.in_flight) == (1, 0)
    [line] = read_log(server, log)
    if answer:
        assert line["status"] == 200 and u.output_tokens == CHAT_USAGE["completion_tokens"]
    else:
        assert (line["status"], line["error_class"]) == (500, "proxy_error")
    writer.close()


async def test_a_fast_lane_that_cannot_send_leaves_the_call_to_the_asgi_way(
    server, scripted, tmp_path, monkeypatch
) -> None:
    # given a pooled connection, and a fast lane whose send fails unexpectedly
    key, log = _register(server, tmp_path)
    await _pooled(server, scripted, ["ok"])

    def broken(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(server._client, "start", broken)
    # when a call comes, then the ASGI way answers it, and its turn is counted once
    reply = await openai_client(server, key).chat.completions.create(model="gpt-4o", messages=MSGS)
    assert reply.choices[0].message.content == "Hi from upstream."
    u = server.registry.usage(key)
    assert (u.turns, u.calls, u.in_flight) == (1, 1, 0) and server.app.fast_calls == 0
    assert [line["status"] for line in read_log(server, log)] == [200]
