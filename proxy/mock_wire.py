"""The mock provider's replies written out in each wire format, whole or as SSE frames."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from proxy import jsonio
from proxy.usage import Usage


@dataclass
class Reply:
    """What the mock model says: text, one tool call, or a provider error."""

    text: str | None = None
    tool_name: str | None = None
    tool_args: dict[str, Any] = field(default_factory=dict)
    call_id: str = "call_bf_0"
    error_status: int | None = None
    error_body: Any = None
    # the message's (response's) own id: new for every reply, as a provider's, so that an agent's
    # log of its calls (Claude Code's keys each call by it) tells two replies apart
    reply_id: str = field(default_factory=lambda: "bf" + uuid.uuid4().hex[:22])

    def payload(self) -> str:
        if self.tool_name is None:
            return self.text or ""
        return jsonio.dumps(self.tool_args).decode()


@dataclass
class Rendered:
    status: int
    content_type: bytes
    frames: list[bytes]  # one body part per ASGI send; a stream is several SSE frames


def _pieces(text: str, n: int = 3) -> list[str]:
    """Split into up to n non-empty parts, as a provider streams deltas."""
    if len(text) <= n:
        return [text] if text else []
    step = -(-len(text) // n)
    return [text[i : i + step] for i in range(0, len(text), step)]


def _sse(obj: Any, event: str | None = None) -> bytes:
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + jsonio.dumps(obj) + b"\n\n"


def wire_usage(protocol: str, u: Usage) -> dict[str, Any]:
    if protocol == "chat":
        return {
            "prompt_tokens": u.input_tokens,
            "completion_tokens": u.output_tokens,
            "total_tokens": u.total_tokens,
            "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens},
        }
    if protocol == "responses":
        return {
            "input_tokens": u.input_tokens,
            "input_tokens_details": {"cached_tokens": u.cache_read_tokens},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.total_tokens,
        }
    return {
        "input_tokens": u.input_tokens - u.cache_read_tokens - u.cache_creation_tokens,
        "output_tokens": u.output_tokens,
        "cache_creation_input_tokens": u.cache_creation_tokens,
        "cache_read_input_tokens": u.cache_read_tokens,
    }


def error_body(
    protocol: str, status: int, message: str, kind: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """An error in the API's own format."""
    if kind is None:
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            403: "permission_error",
            404: "not_found_error",
            429: "rate_limit_error",
        }.get(status, "api_error")
    if protocol == "messages":
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def render(
    protocol: str, reply: Reply, model: str, stream: bool, usage: Usage, include_usage: bool = True
) -> Rendered:
    if reply.error_status is not None:
        body = reply.error_body
        if body is None:
            body = error_body(protocol, reply.error_status, "mock provider error")
        return Rendered(reply.error_status, b"application/json", [jsonio.dumps(body)])
    if protocol == "chat":
        frames = (
            _chat_stream(reply, model, usage, include_usage)
            if stream
            else [jsonio.dumps(_chat(reply, model, usage))]
        )
    elif protocol == "responses":
        frames = (
            _responses_stream(reply, model, usage)
            if stream
            else [jsonio.dumps(_response(reply, model, usage, "completed"))]
        )
    else:
        frames = (
            _messages_stream(reply, model, usage)
            if stream
            else [jsonio.dumps(_message(reply, model, usage))]
        )
    ctype = b"text/event-stream" if stream else b"application/json"
    return Rendered(200, ctype, frames)


# -- Chat Completions -------------------------------------------------------------------


def _chat(reply: Reply, model: str, usage: Usage) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_name is not None:
        msg["tool_calls"] = [
            {
                "id": reply.call_id,
                "type": "function",
                "function": {"name": reply.tool_name, "arguments": reply.payload()},
            }
        ]
    return {
        "id": "chatcmpl-" + reply.reply_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": msg,
                "logprobs": None,
                "finish_reason": "stop" if reply.tool_name is None else "tool_calls",
            }
        ],
        "usage": wire_usage("chat", usage),
    }


def _chat_stream(reply: Reply, model: str, usage: Usage, include_usage: bool) -> list[bytes]:
    base = {
        "id": "chatcmpl-" + reply.reply_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse(
            {
                **base,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
        )

    if reply.tool_name is None:
        frames = [chunk({"role": "assistant", "content": ""})]
        frames += [chunk({"content": p}) for p in _pieces(reply.text or "")]
        frames.append(chunk({}, "stop"))
    else:
        frames = [
            chunk(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": reply.call_id,
                            "type": "function",
                            "function": {"name": reply.tool_name, "arguments": ""},
                        }
                    ],
                }
            )
        ]
        frames += [
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
            for p in _pieces(reply.payload())
        ]
        frames.append(chunk({}, "tool_calls"))
    if include_usage:
        frames.append(_sse({**base, "choices": [], "usage": wire_usage("chat", usage)}))
    frames.append(b"data: [DONE]\n\n")
    return frames


# -- Responses --------------------------------------------------------------------------


def _item(reply: Reply, done: bool) -> dict[str, Any]:
    status = "completed" if done else "in_progress"
    if reply.tool_name is not None:
        # a tool of a namespace the request offers (Codex's multi_agent_v1), named "namespace.tool"
        # by the mock: function names cannot hold a dot
        namespace, _, name = reply.tool_name.rpartition(".")
        item = {
            "type": "function_call",
            "id": "fc_" + reply.call_id,
            "call_id": reply.call_id,
            "name": name,
            "arguments": reply.payload() if done else "",
            "status": status,
        }
        return {**item, "namespace": namespace} if namespace else item
    content = [{"type": "output_text", "text": reply.text or "", "annotations": []}]
    return {
        "type": "message",
        "id": "msg_" + reply.reply_id,
        "status": status,
        "role": "assistant",
        "content": content if done else [],
    }


def _response(reply: Reply, model: str, usage: Usage | None, status: str) -> dict[str, Any]:
    return {
        "id": "resp_" + reply.reply_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": [_item(reply, True)] if status == "completed" else [],
        "usage": wire_usage("responses", usage) if usage else None,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
    }


def _responses_stream(reply: Reply, model: str, usage: Usage) -> list[bytes]:
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response(reply, model, None, "in_progress")},
        {"type": "response.in_progress", "response": _response(reply, model, None, "in_progress")},
        {"type": "response.output_item.added", "output_index": 0, "item": _item(reply, False)},
    ]
    item_id = _item(reply, False)["id"]
    if reply.tool_name is not None:
        events += [
            {
                "type": "response.function_call_arguments.delta",
                "item_id": item_id,
                "output_index": 0,
                "delta": p,
            }
            for p in _pieces(reply.payload())
        ]
        events.append(
            {
                "type": "response.function_call_arguments.done",
                "item_id": item_id,
                "output_index": 0,
                "arguments": reply.payload(),
            }
        )
    else:
        text = reply.text or ""
        part = {"type": "output_text", "text": "", "annotations": []}
        loc = {"item_id": item_id, "output_index": 0, "content_index": 0}
        events.append({"type": "response.content_part.added", **loc, "part": part})
        events += [
            {"type": "response.output_text.delta", **loc, "delta": p, "logprobs": []}
            for p in _pieces(text)
        ]
        events.append({"type": "response.output_text.done", **loc, "text": text, "logprobs": []})
        events.append({"type": "response.content_part.done", **loc, "part": {**part, "text": text}})
    events.append(
        {"type": "response.output_item.done", "output_index": 0, "item": _item(reply, True)}
    )
    events.append(
        {"type": "response.completed", "response": _response(reply, model, usage, "completed")}
    )
    for n, ev in enumerate(events):
        ev["sequence_number"] = n
    return [_sse(ev, ev["type"]) for ev in events]


# -- Anthropic Messages -----------------------------------------------------------------


def _message(reply: Reply, model: str, usage: Usage) -> dict[str, Any]:
    if reply.tool_name is None:
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text or ""}]
    else:
        content = [
            {
                "type": "tool_use",
                "id": reply.call_id,
                "name": reply.tool_name,
                "input": reply.tool_args,
            }
        ]
    return {
        "id": "msg_" + reply.reply_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "end_turn" if reply.tool_name is None else "tool_use",
        "stop_sequence": None,
        "usage": wire_usage("messages", usage),
    }


def _messages_stream(reply: Reply, model: str, usage: Usage) -> list[bytes]:
    start_usage = {**wire_usage("messages", usage), "output_tokens": 1}
    message = {
        **_message(reply, model, usage),
        "content": [],
        "stop_reason": None,
        "usage": start_usage,
    }
    frames = [_sse({"type": "message_start", "message": message}, "message_start")]
    if reply.tool_name is None:
        block: dict[str, Any] = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in _pieces(reply.text or "")]
    else:
        block = {"type": "tool_use", "id": reply.call_id, "name": reply.tool_name, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(reply.payload())]
    frames.append(
        _sse(
            {"type": "content_block_start", "index": 0, "content_block": block},
            "content_block_start",
        )
    )
    frames.append(_sse({"type": "ping"}, "ping"))
    frames += [
        _sse({"type": "content_block_delta", "index": 0, "delta": d}, "content_block_delta")
        for d in deltas
    ]
    frames.append(_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
    stop = "end_turn" if reply.tool_name is None else "tool_use"
    frames.append(
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": usage.output_tokens},
            },
            "message_delta",
        )
    )
    frames.append(_sse({"type": "message_stop"}, "message_stop"))
    return frames
