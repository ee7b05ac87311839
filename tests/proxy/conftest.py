"""Fixtures for the proxy's tests: a fake upstream, a ProxyServer, official SDK clients."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from proxy.registry import Attempt
from proxy.server import ProxyServer
from tests.proxy.fake_upstream import FakeUpstream

OPENAI_UPSTREAM_KEY = "sk-upstream-openai-SECRET-0123456789"
ANTHROPIC_UPSTREAM_KEY = "sk-ant-upstream-SECRET-0123456789"


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    fake = await FakeUpstream().start()
    yield fake
    await fake.stop()


@pytest.fixture
def env(upstream: FakeUpstream) -> dict[str, str]:
    return {
        "OPENAI_API_KEY": OPENAI_UPSTREAM_KEY,
        "BENCHFLOW_UPSTREAM_OPENAI_BASE_URL": upstream.url + "/v1",
        "ANTHROPIC_API_KEY": ANTHROPIC_UPSTREAM_KEY,
        "BENCHFLOW_UPSTREAM_ANTHROPIC_BASE_URL": upstream.url,
        "BENCHFLOW_PRICES": "/nonexistent/prices.json",
    }


@pytest.fixture(params=["fast", "asgi"])
async def proxy(
    request: pytest.FixtureRequest, env: dict[str, str], upstream: FakeUpstream
) -> AsyncIterator[ProxyServer]:
    """Each test twice: with a connection to the upstream idle in the pool, so that a plain
    call takes the fast lane (proxy/fastlane.py), and with the fast lane off."""
    server = ProxyServer(env=env)
    await server.start("127.0.0.1", 0)
    assert server.app is not None and server._client is not None
    if request.param == "fast":
        await server._client.connect_ahead(upstream.url, 2)
    else:
        server.app.fast_lane = False
    yield server
    await server.stop()


@pytest.fixture
def register(proxy: ProxyServer, tmp_path: Path) -> Callable[..., tuple[str, Path]]:
    """register(model, **fields) -> (key, llm_trajectory.jsonl path)."""
    count = 0

    def _register(model: str | None, **fields: Any) -> tuple[str, Path]:
        nonlocal count
        count += 1
        log = tmp_path / f"attempt{count}" / "trajectory" / "llm_trajectory.jsonl"
        attempt = Attempt(attempt_id=f"attempt-{count}", model=model, log_path=log, **fields)
        return proxy.registry.register(attempt), log

    return _register


def openai_client(proxy: ProxyServer, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0)


def anthropic_client(proxy: ProxyServer, key: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=proxy.url, api_key=key, max_retries=0)


def read_log(proxy: ProxyServer, path: Path) -> list[dict[str, Any]]:
    proxy.writer.flush()
    return [json.loads(line) for line in path.read_text().splitlines()]
