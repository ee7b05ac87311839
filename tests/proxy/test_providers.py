from __future__ import annotations

import pytest

from proxy.providers import ProviderError, resolve_model

KEYS = {
    "ANTHROPIC_API_KEY": "a",
    "OPENAI_API_KEY": "o",
    "DEEPSEEK_API_KEY": "d",
    "XIAOMI_API_KEY": "x",
    "XIAOMI_BASE_URL": "https://mimo.example/v1",
    "OPENROUTER_API_KEY": "r",
    "BENCHFLOW_PROVIDER_API_KEY": "p",
    "BENCHFLOW_PROVIDER_BASE_URL": "http://127.0.0.1:9000/v1",
}


@pytest.mark.parametrize(
    ("model", "provider", "upstream", "endpoints"),
    [
        (
            "anthropic/claude-sonnet-4-6",
            "anthropic",
            "claude-sonnet-4-6",
            {"messages": "https://api.anthropic.com/v1/messages"},
        ),
        (
            "sonnet",
            "anthropic",
            "claude-sonnet-4-6",
            {"messages": "https://api.anthropic.com/v1/messages"},
        ),
        (
            "claude-opus-4-5-20251101",
            "anthropic",
            "claude-opus-4-5-20251101",
            {"messages": "https://api.anthropic.com/v1/messages"},
        ),
        (
            "openai/gpt-5",
            "openai",
            "gpt-5",
            {
                "chat": "https://api.openai.com/v1/chat/completions",
                "responses": "https://api.openai.com/v1/responses",
            },
        ),
        (
            "deepseek/deepseek-v4-flash",
            "deepseek",
            "deepseek-v4-flash",
            {
                "chat": "https://api.deepseek.com/chat/completions",
                "messages": "https://api.deepseek.com/anthropic/v1/messages",
            },
        ),
        (
            "xiaomi/mimo-v2.6-flash",
            "xiaomi",
            "mimo-v2.6-flash",
            {"chat": "https://mimo.example/v1/chat/completions"},
        ),
        (
            "mimo/mimo-v2.6-flash",
            "xiaomi",
            "mimo-v2.6-flash",
            {"chat": "https://mimo.example/v1/chat/completions"},
        ),
        (
            "openrouter/anthropic/claude-sonnet-4.5",
            "openrouter",
            "anthropic/claude-sonnet-4.5",
            {"chat": "https://openrouter.ai/api/v1/chat/completions"},
        ),
        (
            "openai-compatible/qwen3-coder",
            "openai-compatible",
            "qwen3-coder",
            {
                "chat": "http://127.0.0.1:9000/v1/chat/completions",
                "responses": "http://127.0.0.1:9000/v1/responses",
            },
        ),
    ],
)
def test_routes(model: str, provider: str, upstream: str, endpoints: dict[str, str]) -> None:
    route = resolve_model(model, KEYS)
    assert (route.provider, route.model, dict(route.endpoints)) == (provider, upstream, endpoints)
    assert route.protocols == frozenset(endpoints)


def test_anthropic_uses_x_api_key_and_others_bearer() -> None:
    assert resolve_model("sonnet", KEYS).auth["messages"] == "x-api-key"
    assert resolve_model("deepseek/deepseek-v4-flash", KEYS).auth["messages"] == "bearer"
    assert resolve_model("openai/gpt-5", KEYS).auth["chat"] == "bearer"


def test_xiaomi_serves_messages_when_its_anthropic_url_is_set() -> None:
    env = {**KEYS, "XIAOMI_ANTHROPIC_BASE_URL": "https://mimo.example/anthropic"}
    route = resolve_model("xiaomi/mimo-v2.6-flash", env)
    assert route.endpoints["messages"] == "https://mimo.example/anthropic/v1/messages"


def test_upstream_base_urls_can_be_overridden() -> None:
    env = {
        **KEYS,
        "BENCHFLOW_UPSTREAM_OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
        "BENCHFLOW_UPSTREAM_ANTHROPIC_BASE_URL": "http://127.0.0.1:2",
        "BENCHFLOW_UPSTREAM_DEEPSEEK_ANTHROPIC_BASE_URL": "http://127.0.0.1:3/anthropic",
    }
    assert (
        resolve_model("openai/gpt-5", env).endpoints["chat"]
        == "http://127.0.0.1:1/v1/chat/completions"
    )
    assert resolve_model("haiku", env).endpoints["messages"] == "http://127.0.0.1:2/v1/messages"
    assert (
        resolve_model("deepseek/deepseek-v4-pro", env).endpoints["messages"]
        == "http://127.0.0.1:3/anthropic/v1/messages"
    )


@pytest.mark.parametrize(
    ("model", "env", "needle"),
    [
        ("anthropic/claude-sonnet-4-6", {}, "export ANTHROPIC_API_KEY"),
        ("sonnet", {}, "export ANTHROPIC_API_KEY"),
        ("openai/gpt-5", {}, "export OPENAI_API_KEY"),
        ("deepseek/deepseek-v4-flash", {}, "export DEEPSEEK_API_KEY"),
        ("xiaomi/mimo-v2.6-flash", {"XIAOMI_API_KEY": "x"}, "export XIAOMI_BASE_URL"),
        (
            "openai-compatible/m",
            {"BENCHFLOW_PROVIDER_API_KEY": "p"},
            "export BENCHFLOW_PROVIDER_BASE_URL",
        ),
        ("openrouter/x/y", {}, "export OPENROUTER_API_KEY"),
        ("deepseak/deepseek-v4-flash", KEYS, "did you mean 'deepseek'"),
        ("nosuch/model", KEYS, "known prefixes: anthropic, deepseek"),
        ("gpt-5", KEYS, "no provider prefix"),
        ("mock/nonsense", KEYS, "mock/oracle"),
    ],
)
def test_resolution_errors_say_what_to_do(model: str, env: dict[str, str], needle: str) -> None:
    with pytest.raises(ProviderError, match=None) as err:
        resolve_model(model, env)
    assert needle in str(err.value)


def test_mock_serves_every_protocol_without_keys() -> None:
    route = resolve_model("mock/oracle", {})
    assert route.is_mock and route.protocols == {"chat", "responses", "messages"}
    assert resolve_model("mock/script:/tmp/x.json", {}).model == "script:/tmp/x.json"


def test_every_providers_key_variable_is_one_the_runner_keeps_out_of_sandboxes():
    from proxy.providers import upstream_key_vars
    from runs.secrets import MODEL_KEY_VARS

    assert upstream_key_vars() <= MODEL_KEY_VARS
