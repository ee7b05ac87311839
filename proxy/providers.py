"""Model prefixes -> upstream endpoints and keys from the host's environment."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

CHAT, RESPONSES, MESSAGES = "chat", "responses", "messages"

# Bare Claude aliases, as agents accept them; `claude-*` ids route to Anthropic unchanged.
CLAUDE_ALIASES = {
    "sonnet": "claude-sonnet-4-6",
    "opus": "claude-opus-4-6",
    "haiku": "claude-haiku-4-5",
}


class ProviderError(ValueError):
    """A model the proxy cannot route: unknown prefix, or a missing key or base URL."""


@dataclass(frozen=True, slots=True)
class Route:
    """Where one model's calls go: per wire protocol, the endpoint URL; plus the upstream key."""

    provider: str
    model: str  # the id sent upstream (prefix removed)
    requested: str  # what the user asked for, e.g. "deepseek/deepseek-v4-flash"
    endpoints: Mapping[str, str] = field(default_factory=dict)  # protocol -> full URL
    api_key: str = ""
    auth: Mapping[str, str] = field(default_factory=dict)  # protocol -> "bearer" | "x-api-key"

    @property
    def protocols(self) -> frozenset[str]:
        return frozenset(self.endpoints)

    def serves(self, protocol: str) -> bool:
        return protocol in self.endpoints

    @property
    def is_mock(self) -> bool:
        return self.provider == "mock"


@dataclass(frozen=True, slots=True)
class _Provider:
    key_var: str | None  # env var holding the upstream key
    openai_base: str | None  # default base of the OpenAI-style API ("/v1" included)
    openai_protocols: tuple[str, ...] = (CHAT,)
    anthropic_base: str | None = None  # default base of the Messages API ("/v1" excluded)
    openai_base_var: str | None = None  # env var that supplies (or replaces) openai_base
    anthropic_base_var: str | None = None
    messages_auth: str = "bearer"


PROVIDERS: dict[str, _Provider] = {
    "anthropic": _Provider(
        "ANTHROPIC_API_KEY", None, (), "https://api.anthropic.com", messages_auth="x-api-key"
    ),
    "openai": _Provider("OPENAI_API_KEY", "https://api.openai.com/v1", (CHAT, RESPONSES)),
    "deepseek": _Provider(
        "DEEPSEEK_API_KEY",
        "https://api.deepseek.com",
        (CHAT,),
        "https://api.deepseek.com/anthropic",
    ),
    "xiaomi": _Provider(
        "XIAOMI_API_KEY", None, (CHAT,), None, "XIAOMI_BASE_URL", "XIAOMI_ANTHROPIC_BASE_URL"
    ),
    "openrouter": _Provider("OPENROUTER_API_KEY", "https://openrouter.ai/api/v1", (CHAT,)),
    "openai-compatible": _Provider(
        "BENCHFLOW_PROVIDER_API_KEY", None, (CHAT, RESPONSES), None, "BENCHFLOW_PROVIDER_BASE_URL"
    ),
}
PROVIDERS["mimo"] = PROVIDERS["xiaomi"]
KNOWN_PREFIXES = sorted([*PROVIDERS, "mock"])
MOCK_MODELS = ("oracle", "script:FILE", "echo")


def override_var(provider: str, anthropic: bool = False) -> str:
    """The env var that points a provider at another upstream (tests, local mirrors)."""
    name = provider.upper().replace("-", "_")
    return f"BENCHFLOW_UPSTREAM_{name}_{'ANTHROPIC_' if anthropic else ''}BASE_URL"


def upstream_key_vars() -> set[str]:
    """Every env var that may hold an upstream secret (for redaction)."""
    return {p.key_var for p in PROVIDERS.values() if p.key_var}


def provider_of_key(key_var: str) -> str | None:
    """The provider whose key `key_var` holds (ANTHROPIC_AUTH_TOKEN counts as Anthropic's)."""
    if key_var == "ANTHROPIC_AUTH_TOKEN":
        return "anthropic"
    return next((name for name, p in PROVIDERS.items() if p.key_var == key_var), None)


def is_claude_name(model: str) -> bool:
    """A bare Claude alias or id, which routes to Anthropic with no prefix."""
    return model in CLAUDE_ALIASES or model.startswith("claude-")


def split_model(model: str) -> tuple[str, str]:
    """(provider, upstream model) by prefix; bare Claude ids and aliases mean Anthropic."""
    model = model.strip()
    if model in CLAUDE_ALIASES:
        return "anthropic", CLAUDE_ALIASES[model]
    if model.startswith("claude-"):
        return "anthropic", model
    prefix, sep, rest = model.partition("/")
    if not sep or not rest:
        raise ProviderError(
            f"model {model!r} has no provider prefix: use PROVIDER/MODEL with one of "
            f"{', '.join(KNOWN_PREFIXES)} (or a Claude alias: sonnet, opus, haiku, claude-*)"
        )
    return prefix, rest


def resolve_model(model: str, env: Mapping[str, str] = os.environ) -> Route:
    """Route for `model`, or ProviderError naming what to export or the prefixes known."""
    prefix, upstream = split_model(model)
    if prefix == "mock":
        kind = upstream.split(":", 1)[0]
        if kind not in ("oracle", "script", "echo"):
            raise ProviderError(
                f"unknown mock model {model!r}: use mock/oracle, mock/script:FILE or mock/echo"
            )
        urls = {p: f"mock:{p}" for p in (CHAT, RESPONSES, MESSAGES)}
        return Route("mock", upstream, model, urls)
    spec = PROVIDERS.get(prefix)
    if spec is None:
        close = difflib.get_close_matches(prefix, KNOWN_PREFIXES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ProviderError(
            f"unknown provider prefix {prefix!r} in {model!r}{hint}; "
            f"known prefixes: {', '.join(KNOWN_PREFIXES)}"
        )
    key = env.get(spec.key_var, "") if spec.key_var else ""
    if not key:
        raise ProviderError(f"model {model!r} needs an API key: export {spec.key_var}")
    name = "xiaomi" if prefix == "mimo" else prefix
    openai_base = (
        env.get(override_var(name))
        or (env.get(spec.openai_base_var) if spec.openai_base_var else None)
        or spec.openai_base
    )
    anthropic_base = (
        env.get(override_var(name, anthropic=True))
        or (env.get(spec.anthropic_base_var) if spec.anthropic_base_var else None)
        or spec.anthropic_base
    )
    if name == "anthropic":
        anthropic_base = env.get(override_var(name)) or anthropic_base
    if spec.openai_protocols and not openai_base and not anthropic_base:
        raise ProviderError(f"model {model!r} needs a base URL: export {spec.openai_base_var}")
    endpoints: dict[str, str] = {}
    auth: dict[str, str] = {}
    if openai_base:
        base = openai_base.rstrip("/")
        for proto in spec.openai_protocols:
            endpoints[proto] = base + ("/chat/completions" if proto == CHAT else "/responses")
            auth[proto] = "bearer"
    if anthropic_base:
        endpoints[MESSAGES] = anthropic_base.rstrip("/") + "/v1/messages"
        auth[MESSAGES] = spec.messages_auth
    return Route(name, upstream, model, endpoints, key, auth)
