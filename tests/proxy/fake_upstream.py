"""A scripted OpenAI/Anthropic look-alike on 127.0.0.1, for the proxy's tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from dataclasses import dataclass, field
from typing import Any

import uvicorn

CHAT_USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 50,
    "total_tokens": 1050,
    "prompt_tokens_details": {"cached_tokens": 800},
}
RESPONSES_USAGE = {
    "input_tokens": 900,
    "input_tokens_details": {"cached_tokens": 600},
    "output_tokens": 40,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 940,
}
MESSAGES_USAGE = {
    "input_tokens": 100,
    "cache_read_input_tokens": 700,
    "cache_creation_input_tokens": 200,
    "output_tokens": 30,
}


def sse(obj: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\r\n" if event else ""
    return (head + "data: " + json.dumps(obj) + "\r\n\r\n").encode()


def chat_body(model: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-up",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Hi from upstream."},
            }
        ],
        "usage": CHAT_USAGE,
        **(extra or {}),
    }


def chat_frames(model: str, include_usage: bool) -> list[bytes]:
    base = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": model}
    frames = [
        sse(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": p},
                        "finish_reason": None,
                    }
                ],
            }
        )
        for p in ("Hi ", "from ", "upstream.")
    ]
    frames.append(b": keep-alive comment\r\n\r\n")
    frames.append(sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    if include_usage:
        frames.append(sse({**base, "choices": [], "usage": CHAT_USAGE}))
    frames.append(b"data: [DONE]\r\n\r\n")
    return frames


def response_body(model: str, status: str = "completed") -> dict[str, Any]:
    item = {
        "type": "message",
        "id": "msg_up",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Hi from upstream.", "annotations": []}],
    }
    return {
        "id": "resp_up",
        "object": "response",
        "created_at": 1,
        "model": model,
        "status": status,
        "output": [item] if status == "completed" else [],
        "usage": RESPONSES_USAGE if status == "completed" else None,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def responses_frames(model: str) -> list[bytes]:
    done = response_body(model)
    events = [
        {"type": "response.created", "response": response_body(model, "in_progress")},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**done["output"][0], "status": "in_progress", "content": []},
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_up",
            "output_index": 0,
            "content_index": 0,
            "delta": "Hi from upstream.",
        },
        {"type": "response.output_item.done", "output_index": 0, "item": done["output"][0]},
        {"type": "response.completed", "response": done},
    ]
    return [sse({**e, "sequence_number": n}, e["type"]) for n, e in enumerate(events)]


def message_body(model: str) -> dict[str, Any]:
    return {
        "id": "msg_up",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": "Hi from upstream."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": MESSAGES_USAGE,
    }


def messages_frames(model: str) -> list[bytes]:
    start = {
        **message_body(model),
        "content": [],
        "stop_reason": None,
        "usage": {**MESSAGES_USAGE, "output_tokens": 1},
    }
    events = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Hi from upstream."},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 30},
        },
        {"type": "message_stop"},
    ]
    return [sse(e, e["type"]) for e in events]


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes
    query: bytes


@dataclass
class FakeUpstream:
    """Answers like the real APIs with fixed usage; records what it was sent."""

    seen: list[Seen] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)  # the body bytes of each answer
    fail_next: list[tuple[int, Any]] = field(default_factory=list)
    gate: asyncio.Event | None = None  # when set, each call waits for it before answering
    echo_auth: bool = False
    frame_pause: float = 0.0
    break_after: int | None = None  # frames sent before the upstream dies mid-response
    in_flight: int = 0
    peak_in_flight: int = 0
    finished: int = 0
    port: int = 0
    _server: uvicorn.Server | None = None
    _task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> FakeUpstream:
        config = uvicorn.Config(
            self, host="127.0.0.1", port=0, lifespan="off", log_level="warning", access_log=False
        )
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(256)
        await server.startup(sockets=[sock])
        self.port = sock.getsockname()[1]
        self._server, self._sock = server, sock
        self._task = asyncio.create_task(server.main_loop())
        return self

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            await self._server.shutdown(sockets=[self._sock])
            self._sock.close()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        more = True
        while more:
            msg = await receive()
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        req = json.loads(body)
        self.seen.append(Seen(scope["path"], headers, req, body, scope["query_string"]))
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            if self.gate is not None:
                await self.gate.wait()
            await self._answer(scope["path"], headers, req, send)
        finally:
            self.in_flight -= 1
            self.finished += 1

    async def _answer(
        self, path: str, headers: dict[str, str], req: dict[str, Any], send: Any
    ) -> None:
        if self.fail_next:
            status, err = self.fail_next.pop(0)
            data = json.dumps(err).encode()
            await self._send(send, status, b"application/json", [data])
            return
        model = req.get("model", "")
        stream = bool(req.get("stream"))
        if path.endswith("/chat/completions"):
            extra = {"x_seen_auth": headers.get("authorization")} if self.echo_auth else None
            include = bool((req.get("stream_options") or {}).get("include_usage"))
            frames = (
                chat_frames(model, include)
                if stream
                else [json.dumps(chat_body(model, extra)).encode()]
            )
        elif path.endswith("/responses"):
            frames = (
                responses_frames(model) if stream else [json.dumps(response_body(model)).encode()]
            )
        elif path.endswith("/v1/messages"):
            frames = (
                messages_frames(model) if stream else [json.dumps(message_body(model)).encode()]
            )
        else:
            await self._send(send, 404, b"application/json", [b'{"error": "no such path"}'])
            return
        ctype = b"text/event-stream" if stream else b"application/json"
        await self._send(send, 200, ctype, frames)

    async def _send(self, send: Any, status: int, ctype: bytes, frames: list[bytes]) -> None:
        self.sent.append(b"".join(frames))
        headers = [(b"content-type", ctype), (b"x-request-id", b"req_up_1")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        for n, frame in enumerate(frames):
            if self.break_after is not None and n >= self.break_after:
                raise ConnectionAbortedError("the fake upstream dies mid-response")
            await send({"type": "http.response.body", "body": frame, "more_body": True})
            if self.frame_pause:
                await asyncio.sleep(self.frame_pause)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
