"""A fast fake model provider for the proxy benchmark: fixed small bodies, raw ASGI."""

from __future__ import annotations

import json
import sys
from typing import Any, cast

USAGE_CHAT = {
    "prompt_tokens": 120,
    "completion_tokens": 12,
    "total_tokens": 132,
    "prompt_tokens_details": {"cached_tokens": 100},
}


def _sse(obj: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n").encode()


CHAT_JSON = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello there, bench."},
                "finish_reason": "stop",
            }
        ],
        "usage": USAGE_CHAT,
    }
).encode()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return _sse(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "bench-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


CHAT_SSE = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"content": "Hello "}),
    _chunk({"content": "there, "}),
    _chunk({"content": "bench."}),
    _chunk({}, "stop"),
    _sse(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "bench-model",
            "choices": [],
            "usage": USAGE_CHAT,
        }
    ),
    b"data: [DONE]\n\n",
]
_RESP = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "model": "bench-model",
    "status": "in_progress",
    "output": [],
    "usage": None,
}
_ITEM = {
    "type": "message",
    "id": "msg_1",
    "status": "completed",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "Hello there, bench.", "annotations": []}],
}
RESPONSES_SSE = [
    _sse(e, str(e["type"]))
    for e in [
        {"type": "response.created", "sequence_number": 0, "response": _RESP},
        {"type": "response.in_progress", "sequence_number": 1, "response": _RESP},
        {
            "type": "response.output_item.added",
            "sequence_number": 2,
            "output_index": 0,
            "item": {**_ITEM, "status": "in_progress", "content": []},
        },
        {
            "type": "response.output_text.delta",
            "sequence_number": 3,
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "Hello there, ",
        },
        {
            "type": "response.output_text.delta",
            "sequence_number": 4,
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "bench.",
        },
        {
            "type": "response.output_item.done",
            "sequence_number": 5,
            "output_index": 0,
            "item": _ITEM,
        },
        {
            "type": "response.completed",
            "sequence_number": 6,
            "response": {
                **_RESP,
                "status": "completed",
                "output": [_ITEM],
                "usage": {
                    "input_tokens": 120,
                    "input_tokens_details": {"cached_tokens": 100},
                    "output_tokens": 12,
                    "total_tokens": 132,
                },
            },
        },
    ]
]
MESSAGES_SSE = [
    _sse(e, str(e["type"]))
    for e in cast(
        "list[dict[str, Any]]",
        [
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-5",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": 20,
                        "cache_read_input_tokens": 100,
                        "cache_creation_input_tokens": 0,
                        "output_tokens": 1,
                    },
                },
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hello there, "},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "bench."},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 12},
            },
            {"type": "message_stop"},
        ],
    )
]
JSON_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(CHAT_JSON)).encode()),
]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    more = True
    while more:
        msg = await receive()
        body += msg.get("body", b"")
        more = msg.get("more_body", False)
    path = scope["path"]
    if path.endswith("/responses"):
        frames = RESPONSES_SSE
    elif path.endswith("/messages"):
        frames = MESSAGES_SSE
    elif b'"stream":true' in body or b'"stream": true' in body:
        frames = CHAT_SSE
    else:
        await send({"type": "http.response.start", "status": 200, "headers": JSON_HEADERS})
        await send({"type": "http.response.body", "body": CHAT_JSON})
        return
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    for frame in frames:
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        http="httptools",
        loop="uvloop",
        lifespan="off",
        access_log=False,
        log_level="warning",
        backlog=2048,
    )
