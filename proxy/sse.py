"""Server-sent events: split a byte stream into frames, however the transport chunked it."""

from __future__ import annotations

from typing import NamedTuple


class Frame(NamedTuple):
    event: str | None
    data: bytes


def parse_frame(raw: bytes) -> Frame | None:
    """One frame's lines (already newline-normalised) -> Frame; None for a comment-only frame."""
    event: str | None = None
    data: list[bytes] = []
    for line in raw.split(b"\n"):
        if not line or line[0] == 0x3A:  # ":" starts a comment (keep-alive pings)
            continue
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event = value.decode("utf-8", "replace")
    if event is None and not data:
        return None
    return Frame(event, b"\n".join(data))


def split_frames(buffer: bytes) -> tuple[list[Frame], bytes]:
    """Complete frames in `buffer` and the incomplete rest; `buffer` uses "\n" line ends only."""
    parts = buffer.split(b"\n\n")
    rest = parts.pop()
    frames = [f for f in map(parse_frame, parts) if f is not None]
    return frames, rest


class SSESplitter:
    """Feed transport chunks, get whole frames; handles LF, CRLF and CR line ends."""

    __slots__ = ("_buf", "_held_cr")

    def __init__(self) -> None:
        self._buf = b""
        self._held_cr = False

    def feed(self, chunk: bytes) -> list[Frame]:
        if self._held_cr:
            chunk = b"\r" + chunk
            self._held_cr = False
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                # A CR at a chunk's end may be the first half of a CRLF: wait for the next byte.
                chunk = chunk[:-1]
                self._held_cr = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + chunk if self._buf else chunk
        if b"\n\n" not in buf:
            self._buf = buf
            return []
        frames, self._buf = split_frames(buf)
        return frames

    def close(self) -> list[Frame]:
        """Frames left when the stream ends without a final blank line."""
        rest = self._buf + (b"\n" if self._held_cr else b"")
        self._buf, self._held_cr = b"", False
        frame = parse_frame(rest.strip(b"\n")) if rest.strip() else None
        return [frame] if frame else []
