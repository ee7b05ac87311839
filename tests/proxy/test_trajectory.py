from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import pytest

from proxy.trajectory import (
    KEY_PATTERN,
    REDACTED,
    TrajectoryWriter,
    record_line,
    redact,
    redact_shapes,
    stream_events,
    stream_text,
)
from tests.proxy import fake_upstream as up


def rec(**fields: object) -> dict[str, object]:
    return {
        "attempt_id": "a",
        "status": 200,
        "stream": False,
        "started_at": 1_790_000_000.5,
        "ended_at": 1_790_000_001.25,
        **fields,
    }


def test_json_bodies_are_spliced_in_as_received() -> None:
    req = b'{"model":"m","messages":[{"role":"user","content":"hi \\u00e9"}]}'
    resp = b'{"id":"x","usage":{"total_tokens":3}}'
    line = record_line(rec(request_raw=req, response_raw=resp, response_json=True))
    assert req in line and resp in line
    doc = json.loads(line)
    assert doc["request"]["messages"][0]["content"] == "hi é"
    assert doc["response"]["usage"] == {"total_tokens": 3}
    assert (doc["started_at"], doc["ended_at"]) == (
        "2026-09-21T14:13:20.500Z",
        "2026-09-21T14:13:21.250Z",
    )


@pytest.mark.parametrize(
    ("req", "want"),
    [
        (b'{\n  "model": "m"\n}', {"model": "m"}),  # pretty-printed: re-serialised
        (b"not json", "not json"),  # kept as text
        (None, None),
    ],
)
def test_other_bodies_still_make_one_valid_line(req: bytes | None, want: object) -> None:
    line = record_line(rec(request_raw=req, response_raw=b"<html>Bad gateway</html>", status=502))
    assert b"\n" not in line
    doc = json.loads(line)
    assert doc["request"] == want and doc["response"] == "<html>Bad gateway</html>"


@pytest.mark.parametrize(
    ("frames", "text"),
    [
        (up.chat_frames("m", True), "Hi from upstream."),
        (up.responses_frames("m"), "Hi from upstream."),
        (up.messages_frames("m"), "Hi from upstream."),
    ],
)
def test_streams_are_logged_as_received_and_readers_can_split_them(
    frames: list[bytes], text: str
) -> None:
    raw = b"".join(frames)
    doc = json.loads(record_line(rec(stream=True, request_raw=b"{}", response_raw=raw)))
    assert doc["response"] is None
    assert doc["response_sse"].encode() == raw
    assert stream_text(stream_events(doc["response_sse"].encode())) == text


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("key sk-proj-abcdefghijklmnopqrstuvwxyz", True),
        ("line\\nsk-abcdefghijklmnopqrstuvwx", True),  # right after an escaped newline
        ("Authorization: Bearer abcdefghijklmnop.qrstuvwx", True),
        ("proxy key bf-" + "x" * 43, True),
        ("bearer abcdefghijklmnop.qrstuvwx", True),
        ("task-benchmark-long-identifier-name", False),  # "sk-" inside a word
        ("the desk-lamp is on", False),
        ("a short sk-abc", False),
    ],
)
def test_key_looking_strings_are_redacted(text: str, redacted: bool) -> None:
    line = json.dumps({"t": text}).encode()
    out = redact(line, [])
    assert (b"[REDACTED]" in out) is redacted
    json.loads(out)


# Pieces that make keys, near-keys and word edges when strung together at random.
PIECES = [
    b"sk-",
    b"bf-",
    b"Bearer ",
    b"bearer\t",
    b"earer",
    b"\\n",
    b"\\t",
    b"\\x",
    b"ta",
    b"de",
    b"-",
    b"_",
    b".",
    b"/",
    b"=",
    b" ",
    b'"',
    b"abcdefgh",
    b"0123",
    b"XYZ",
    b"sk-proj-",
    b"\n",
]


def test_redact_shapes_gives_what_the_pattern_substitution_gives() -> None:
    # given many strings made of key-like pieces, keys running into each other among them
    rng = random.Random(7)
    lines = [b"".join(rng.choice(PIECES) for _ in range(rng.randint(1, 40))) for _ in range(20000)]
    changed = 0
    for line in lines:
        # then trying the pattern only where a hint stands matches running it everywhere
        expected = KEY_PATTERN.sub(REDACTED, line)
        assert redact_shapes(line) == expected, line
        changed += expected != line
    assert changed > 2000  # the strings do hold keys, so the comparison means something


def test_known_secrets_are_redacted_whatever_their_shape() -> None:
    assert redact(b'{"a":"xx-SECRET-VALUE-yy"}', [b"SECRET-VALUE"]) == b'{"a":"xx-[REDACTED]-yy"}'


@pytest.mark.parametrize(
    ("line", "secrets", "expected"),
    [
        # a key-shaped secret in a line that has the shape: found (and the shape also matches)
        (
            b'{"a":"k=sk-up_1234567890abcdefgh!"}',
            [b"sk-up_1234567890abcdefgh"],
            b'{"a":"k=[REDACTED]!"}',
        ),
        # one too short for the shape pattern is still found as a known value
        (b'{"a":"sk-short1"}', [b"sk-short1"], b'{"a":"[REDACTED]"}'),
        # a plain secret beside a shaped one: both searched once the line has a shape
        (
            b'{"a":"PLAIN-SECRET-1 bf-x sk-tiny123"}',
            [b"PLAIN-SECRET-1", b"sk-tiny123"],
            b'{"a":"[REDACTED] bf-x [REDACTED]"}',
        ),
        # no shape in the line: a shaped secret cannot be there, a plain one still is
        (
            b'{"a":"PLAIN-SECRET-1 only"}',
            [b"sk-tiny123", b"PLAIN-SECRET-1"],
            b'{"a":"[REDACTED] only"}',
        ),
    ],
)
def test_secrets_with_and_without_a_keys_shape(
    line: bytes, secrets: list[bytes], expected: bytes
) -> None:
    assert redact(line, secrets) == expected


async def test_writer_batches_and_flushes_from_another_thread(tmp_path: Path) -> None:
    writer = TrajectoryWriter(lambda: ["upstream-key-123456"], delay=60)
    path = tmp_path / "t" / "llm_trajectory.jsonl"
    for n in range(3):
        writer.submit(path, rec(n=n, request_raw=b'{"k":"upstream-key-123456"}'))
    assert not path.exists()  # held for the batch
    done = threading.Event()
    threading.Thread(target=lambda: (writer.flush(), done.set())).start()
    assert done.wait(5)
    lines = path.read_text().splitlines()
    assert [json.loads(x)["n"] for x in lines] == [0, 1, 2]
    assert "upstream-key-123456" not in path.read_text()
    writer.close()


async def test_a_full_batch_is_written_at_once_without_waiting_for_the_timer(
    tmp_path: Path,
) -> None:
    # given a writer whose timer would wait a minute
    writer = TrajectoryWriter(delay=60, batch=4)
    path = tmp_path / "llm_trajectory.jsonl"
    # when it is handed as many records as a batch holds
    for n in range(4):
        writer.submit(path, rec(n=n, request_raw=b"{}"))
    # then they are on disk already (the loop is never held by one long batch)
    assert [json.loads(x)["n"] for x in path.read_text().splitlines()] == [0, 1, 2, 3]
    writer.submit(path, rec(n=4, request_raw=b"{}"))
    assert len(path.read_text().splitlines()) == 4  # the next one waits for its batch
    writer.close()
    assert len(path.read_text().splitlines()) == 5


def test_metadata_orjson_refuses_still_makes_one_line_with_the_bodies_spliced() -> None:
    # given an integer beyond 64 bits in the metadata (the standard library serialises it)
    req = b'{"model":"m","n":1}'
    line = record_line(
        rec(tokens=2**70, request_raw=req, response_raw=b'{"ok":true}', response_json=True)
    )
    doc = json.loads(line)
    assert doc["tokens"] == 2**70
    assert doc["request"] == {"model": "m", "n": 1} and doc["response"] == {"ok": True}
    assert list(doc)[-2:] == ["request", "response"]


def _old_style(call, out, cost, duration, refused):  # the dict the app logged before Exchange
    return {
        "attempt_id": call.state.spec.attempt_id,
        "protocol": call.protocol,
        "provider": call.route.provider,
        "model": call.route.model,
        "requested_model": call.requested,
        "stream": out.stream,
        "started_at": call.started_at,
        "ended_at": call.started_at + duration,
        "duration_s": round(duration, 6),
        "status": out.status,
        "usage": out.usage.as_dict() if out.usage is not None else None,
        "cost_usd": cost,
        "price_source": call.price.source if cost is not None and call.price else None,
        "error_class": out.error_class,
        "error": out.error,
        "refused": refused,
        "client_disconnected": out.client_disconnected,
        "request_raw": call.sent,
        "request_json": call.strict or call.sent is not call.raw,
        "response_raw": out.raw,
        "response_json": out.parsed is not None,
    }


@pytest.mark.parametrize(
    "case", ["ok", "stream", "error", "refused", "nan_request", "unpriced", "no_usage", "odd_model"]
)
def test_an_exchange_makes_the_line_the_record_dict_makes(case: str) -> None:
    # given a call and its outcome, as the app has them when it logs
    from proxy.call import Call
    from proxy.exchange import Exchange
    from proxy.forward import Outcome
    from proxy.prices import Price
    from proxy.registry import Attempt, Registry
    from proxy.usage import Usage

    reg = Registry({})
    state = reg.lookup(reg.register(Attempt('att-"1"', "mock/echo")))
    assert state is not None
    price = None if case == "unpriced" else Price(3.0, 0.3, 3.75, 15.0, "builtin")
    raw = b'{"model":"m","messages":[{"role":"user","content":"caf\\u00e9 \\"q\\""}]}'
    if case == "nan_request":
        raw = b'{"model":"m","t":NaN}'
    requested = 'm\u00e9/"x"' if case == "odd_model" else "m"
    call = Call("chat", state, state.route, price, {"model": "m"}, raw, requested, [])
    call.strict = case != "nan_request"
    usage = None if case in ("no_usage", "refused") else Usage(120, 12, 100, 0, 132)
    out = Outcome(200, usage=usage, raw=b'{"id":"x","usage":{}}', parsed={"id": "x"})
    if case == "stream":
        out = Outcome(
            200,
            usage=usage,
            raw=b'data: {"a":1}\n\ndata: [DONE]\n\n',
            stream=True,
            client_disconnected=True,
        )
    elif case in ("error", "refused"):
        out = Outcome(
            429 if case == "error" else 400,
            raw=b"<html>slow down</html>",
            error_class="provider_rate_limit" if case == "error" else None,
            error='HTTP 429: slow \u2014 down "now"',
        )
    cost = None if usage is None or price is None else 0.000123456789
    # when both make a line, then they are the same document, keys in the same order
    new = json.loads(Exchange(call, out, cost, 0.0123456789, case == "refused").line())
    old = json.loads(record_line(_old_style(call, out, cost, 0.0123456789, case == "refused")))
    assert new == old and list(new) == list(old)
