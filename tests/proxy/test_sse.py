from __future__ import annotations

import pytest

from proxy.sse import Frame, SSESplitter, parse_frame, split_frames

STREAM = b'event: a\ndata: {"x": 1}\n\n: comment\n\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n'
EXPECTED = [Frame("a", b'{"x": 1}'), Frame(None, b"line1\nline2"), Frame(None, b"[DONE]")]


def feed_all(chunks: list[bytes]) -> list[Frame]:
    split = SSESplitter()
    frames: list[Frame] = []
    for chunk in chunks:
        frames += split.feed(chunk)
    return frames + split.close()


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 11, 64, 1000])
def test_frames_survive_any_chunking(size: int) -> None:
    chunks = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert feed_all(chunks) == EXPECTED


@pytest.mark.parametrize("size", [1, 2, 3, 4, 9, 1000])
def test_crlf_line_ends_split_anywhere(size: int) -> None:
    crlf = STREAM.replace(b"\n", b"\r\n")
    chunks = [crlf[i : i + size] for i in range(0, len(crlf), size)]
    assert feed_all(chunks) == EXPECTED


def test_bare_cr_line_ends() -> None:
    assert feed_all([STREAM.replace(b"\n", b"\r")]) == EXPECTED


@pytest.mark.parametrize(
    ("raw", "frame"),
    [
        (b"data: x", Frame(None, b"x")),
        (b"data:x", Frame(None, b"x")),
        (b"data:  two spaces", Frame(None, b" two spaces")),
        (b"event: ping", Frame("ping", b"")),
        (b": only a comment", None),
        (b"id: 7\ndata: y", Frame(None, b"y")),
        (b"event: e\ndata: {}\nretry: 10", Frame("e", b"{}")),
    ],
)
def test_parse_frame(raw: bytes, frame: Frame | None) -> None:
    assert parse_frame(raw) == frame


def test_split_frames_keeps_the_incomplete_rest() -> None:
    frames, rest = split_frames(b"data: 1\n\ndata: 2\n\ndata: 3")
    assert frames == [Frame(None, b"1"), Frame(None, b"2")]
    assert rest == b"data: 3"


def test_a_stream_without_a_final_blank_line_still_yields_its_last_frame() -> None:
    assert feed_all([b"data: 1\n\ndata: 2"]) == [Frame(None, b"1"), Frame(None, b"2")]
