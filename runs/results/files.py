"""An attempt folder's files as the dashboard shows them: listed without following symlinks, read
in pieces (never whole), and only by a path that is one of the folder's own files.

A path from a URL is looked up component by component from the attempt folder, each opened with
O_NOFOLLOW, so `..`, absolute paths and symlinks (to anywhere, inside the folder or not) are never
opened, even when the agent swaps a folder for a link while the page is read. A file with another
hard link is refused too: its other name may be anywhere on the host's filesystem, and nothing
shows it belongs to the attempt. The agent writes these folders, so their size is its to choose:
a listing stops after SCAN_MAX entries, and readers take a head or stream with a bounded buffer.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

HEAD_BYTES = 64 * 1024  # of a file shown inline on the trial page; the rest is a link away
MAX_LISTED = 10_000  # files listed per attempt (artifacts/ and evidence/ can hold many)
SCAN_MAX = 50_000  # folder entries looked at per listing, whatever they are
CHUNK = 64 * 1024  # a raw file is streamed this much at a time

# What the trial page shows, in this order; anything else is listed under "other files".
SECTIONS = (
    ("agent", "agent/"),
    ("verifier", "verifier/"),
    ("trajectory", "trajectory/"),
    ("artifacts", "artifacts/"),
    ("evidence", "evidence/"),
    ("regrade", "regrade/"),
    ("steps", "steps/"),
)


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the attempt folder, with '/'
    size: int

    @property
    def section(self) -> str:
        for name, prefix in SECTIONS:
            if self.path.startswith(prefix):
                return name
        return "other"


@dataclass(frozen=True)
class Listing:
    entries: list[FileEntry]
    complete: bool  # False: the folder holds more than was looked at


def _own_file(info: os.stat_result) -> bool:
    """A regular file with no other name (a hard link's other name may be outside the folder)."""
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1


def scan_files(folder: Path, limit: int = MAX_LISTED, scan_max: int = SCAN_MAX) -> Listing:
    """The folder's own files (symlinks neither followed nor listed, hard links left out), each
    folder's files before its subfolders, by name; at most `limit` files and `scan_max` entries
    looked at (a folder of a million files is not read whole)."""
    found: list[FileEntry] = []
    scanned = 0
    stack = [""]
    root = os.fspath(folder)
    while stack:
        rel = stack.pop()
        names: list[tuple[str, bool]] = []
        try:
            with os.scandir(os.path.join(root, rel) if rel else root) as entries:
                for entry in entries:
                    scanned += 1
                    if scanned > scan_max:
                        break
                    if entry.is_symlink():
                        continue
                    names.append((entry.name, entry.is_dir(follow_symlinks=False)))
        except OSError:
            continue
        subfolders = []
        for name, is_dir in sorted(names):
            path = f"{rel}/{name}" if rel else name
            if is_dir:
                subfolders.append(path)
                continue
            try:
                info = os.lstat(os.path.join(root, path))
            except OSError:
                continue
            if _own_file(info):
                found.append(FileEntry(path, info.st_size))
                if len(found) >= limit:
                    return Listing(found, False)
        stack.extend(reversed(subfolders))
        if scanned > scan_max:
            return Listing(found, False)
    return Listing(found, True)


def list_files(folder: Path, limit: int = MAX_LISTED) -> list[FileEntry]:
    return scan_files(folder, limit).entries


def _parts(rel: str) -> list[str] | None:
    if not rel or rel.startswith("/") or "\x00" in rel:
        return None
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    return parts


def open_file(folder: Path, rel: str) -> BinaryIO | None:
    """The attempt's file `rel`, open for reading, or None when it is not one of its own regular
    files (a path that leaves the folder, a symlink anywhere on the way, a folder, a FIFO, a file
    with another hard link, a missing file)."""
    parts = _parts(rel)
    if parts is None:
        return None
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        at = os.open(folder, flags | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            inner = os.open(part, flags | os.O_DIRECTORY, dir_fd=at)
            os.close(at)
            at = inner
        # O_NONBLOCK: a FIFO put in the file's place must not hang the server's thread
        fd = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=at)
    except OSError:
        return None
    finally:
        os.close(at)
    if not _own_file(os.fstat(fd)):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def safe_file(folder: Path, rel: str) -> Path | None:
    """The path of the attempt's file `rel` when it is one of its own regular files (as
    `open_file` decides), else None. Read it through `open_file`: a path checked is not a file
    opened."""
    fh = open_file(folder, rel)
    if fh is None:
        return None
    fh.close()
    return folder.joinpath(*rel.split("/"))


@dataclass(frozen=True)
class Head:
    text: str
    size: int
    cut: bool
    binary: bool


def read_head(fh: BinaryIO, limit: int = HEAD_BYTES) -> Head:
    """The first `limit` bytes as text (a 150 MB log is never read whole); closes the file."""
    with fh:
        data = fh.read(limit)
        size = os.fstat(fh.fileno()).st_size
    binary = b"\x00" in data[:8192]
    return Head(data.decode("utf-8", "replace"), size, size > len(data), binary)


def head_of(folder: Path, rel: str, limit: int = HEAD_BYTES) -> Head | None:
    fh = open_file(folder, rel)
    return None if fh is None else read_head(fh, limit)


def size_of(fh: BinaryIO) -> int:
    return os.fstat(fh.fileno()).st_size


def stream(fh: BinaryIO, chunk: int = CHUNK) -> Iterator[bytes]:
    """A whole file in chunks, for the raw view (a WSGI server, the test client): as large as it
    was when opened (an agent may still be writing it)."""
    left = size_of(fh)
    with fh:
        while left > 0 and (block := fh.read(min(chunk, left))):
            left -= len(block)
            yield block


async def astream(fh: BinaryIO, chunk: int = CHUNK) -> AsyncIterator[bytes]:
    """The same for an ASGI server: each chunk is read in a thread and handed on only when the
    server asks for the next (Django consumes a synchronous iterator whole before sending it)."""
    left = size_of(fh)
    try:
        while left > 0 and (block := await asyncio.to_thread(fh.read, min(chunk, left))):
            left -= len(block)
            yield block
    finally:
        fh.close()
