"""What an exec in a sandbox gives back: its exit, and its output streamed to files with a cap
(and secrets replaced), and the engine's archive chunks read as a file."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runs.secrets import StreamRedactor

OUTPUT_CAP_BYTES = 8 * 1024 * 1024  # per stream of one exec; the rest is counted, not kept


@dataclass
class ExecResult:
    exit_code: int | None
    timed_out: bool = False
    dropped_bytes: int = 0
    duration_s: float = 0.0


class CappedWriter:
    """Writes at most `cap` bytes to a file and counts the rest."""

    def __init__(self, path: Path | None, cap: int, secrets: list[str] | None = None):
        self.fh = open(path, "ab") if path else None
        self.left = cap
        self.dropped = 0
        self.redactor = StreamRedactor(secrets) if secrets else None

    def write(self, chunk: bytes | None) -> None:
        if chunk and self.redactor is not None:
            chunk = self.redactor.feed(chunk)
        if not chunk:
            return
        if self.left > 0 and self.fh:
            part = chunk[: self.left]
            self.fh.write(part)
            self.left -= len(part)
            self.dropped += len(chunk) - len(part)
        else:
            self.dropped += len(chunk)

    def close(self) -> None:
        if self.redactor is not None:
            redactor, self.redactor = self.redactor, None
            self.write(redactor.close())
        if self.fh:
            if self.dropped:
                self.fh.write(
                    f"\n[benchflow: {self.dropped} more bytes of output were not kept]\n".encode()
                )
            self.fh.close()


class StreamReader(io.RawIOBase):
    """A file-like view of the docker SDK's chunk generator, for tarfile's stream mode."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        while not self._buf:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n
