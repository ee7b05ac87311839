from __future__ import annotations

from typing import Any

import pytest

from proxy.usage import StreamTap, Usage, usage_from_anthropic, usage_from_body, usage_from_openai
from tests.proxy import fake_upstream as up


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        # Chat: cached tokens are already inside prompt_tokens
        (
            {
                "prompt_tokens": 1000,
                "completion_tokens": 50,
                "total_tokens": 1050,
                "prompt_tokens_details": {"cached_tokens": 800},
            },
            Usage(1000, 50, 800, 0, 1050),
        ),
        # Responses: same rule, other names
        (
            {
                "input_tokens": 900,
                "input_tokens_details": {"cached_tokens": 600},
                "output_tokens": 40,
                "total_tokens": 940,
            },
            Usage(900, 40, 600, 0, 940),
        ),
        # no total: input + output
        ({"prompt_tokens": 10, "completion_tokens": 5}, Usage(10, 5, 0, 0, 15)),
        # a provider total wins over the sum (e.g. reasoning tokens billed apart)
        ({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 20}, Usage(10, 5, 0, 0, 20)),
        # DeepSeek reports cache hits in its own field
        (
            {"prompt_tokens": 100, "completion_tokens": 1, "prompt_cache_hit_tokens": 64},
            Usage(100, 1, 64, 0, 101),
        ),
        # nulls and junk count as zero
        (
            {"prompt_tokens": None, "completion_tokens": 3, "prompt_tokens_details": None},
            Usage(0, 3, 0, 0, 3),
        ),
    ],
)
def test_openai_usage(raw: dict[str, Any], want: Usage) -> None:
    assert usage_from_openai(raw) == want


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        # Anthropic: cache reads and writes are beside input_tokens, so they are added
        (
            {
                "input_tokens": 100,
                "cache_read_input_tokens": 700,
                "cache_creation_input_tokens": 200,
                "output_tokens": 30,
            },
            Usage(1000, 30, 700, 200, 1030),
        ),
        ({"input_tokens": 12, "output_tokens": 3}, Usage(12, 3, 0, 0, 15)),
        (
            {"input_tokens": 12, "cache_read_input_tokens": None, "output_tokens": 3},
            Usage(12, 3, 0, 0, 15),
        ),
    ],
)
def test_anthropic_usage(raw: dict[str, Any], want: Usage) -> None:
    assert usage_from_anthropic(raw) == want


@pytest.mark.parametrize(
    ("protocol", "body", "want"),
    [
        ("chat", up.chat_body("m"), Usage(1000, 50, 800, 0, 1050)),
        ("responses", up.response_body("m"), Usage(900, 40, 600, 0, 940)),
        ("messages", up.message_body("m"), Usage(1000, 30, 700, 200, 1030)),
        ("chat", {"choices": []}, None),
        ("chat", [1, 2], None),
    ],
)
def test_usage_from_body(protocol: str, body: Any, want: Usage | None) -> None:
    assert usage_from_body(protocol, body) == want


def tap(protocol: str, frames: list[bytes], size: int = 0) -> StreamTap:
    t = StreamTap(protocol)
    raw = b"".join(frames)
    chunks = [raw[i : i + size] for i in range(0, len(raw), size)] if size else frames
    for chunk in chunks:
        t.feed(chunk)
    t.close()
    return t


@pytest.mark.parametrize("size", [0, 1, 7, 100])
@pytest.mark.parametrize(
    ("protocol", "frames", "want"),
    [
        ("chat", up.chat_frames("m", include_usage=True), Usage(1000, 50, 800, 0, 1050)),
        ("chat", up.chat_frames("m", include_usage=False), None),
        ("responses", up.responses_frames("m"), Usage(900, 40, 600, 0, 940)),
        # message_delta's output count replaces message_start's placeholder of 1
        ("messages", up.messages_frames("m"), Usage(1000, 30, 700, 200, 1030)),
    ],
)
def test_stream_usage(protocol: str, frames: list[bytes], want: Usage | None, size: int) -> None:
    t = tap(protocol, frames, size)
    assert t.usage() == want
    assert t.error is None
    assert t.raw() == b"".join(frames)


def test_message_delta_may_repeat_input_counts() -> None:
    frames = up.messages_frames("m")
    frames[-2] = up.sse(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"input_tokens": 150, "cache_read_input_tokens": 700, "output_tokens": 31},
        },
        "message_delta",
    )
    assert tap("messages", frames).usage() == Usage(1050, 31, 700, 200, 1081)


@pytest.mark.parametrize(
    ("protocol", "frame"),
    [
        (
            "messages",
            up.sse(
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                "error",
            ),
        ),
        ("chat", up.sse({"error": {"message": "Overloaded", "type": "server_error"}})),
        (
            "responses",
            up.sse({"type": "error", "message": "Overloaded", "code": "server_error"}, "error"),
        ),
    ],
)
def test_an_in_band_error_event_is_seen(protocol: str, frame: bytes) -> None:
    assert tap(protocol, [frame]).error
