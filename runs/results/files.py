"""An attempt folder's files as the dashboard shows them: listed without following symlinks, read
in pieces (never whole), and only by a path that is one of the folder's own files.

A path from a URL is looked up in the folder's listing, so `..`, absolute paths and symlinks
(to anywhere, inside the folder or not) are never opened.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HEAD_BYTES = 64 * 1024  # of a file shown inline on the trial page; the rest is a link away
MAX_LISTED = 2000  # files listed per attempt (artifacts/ and evidence/ can hold many)

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


def list_files(folder: Path, limit: int = MAX_LISTED) -> list[FileEntry]:
    """Regular files under the folder, symlinks neither followed nor listed, sorted by path."""
    found: list[FileEntry] = []
    root = os.fspath(folder)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            try:
                info = os.lstat(full)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            found.append(FileEntry(os.path.relpath(full, root).replace(os.sep, "/"), info.st_size))
            if len(found) >= limit:
                return found
    return found


def safe_file(folder: Path, rel: str) -> Path | None:
    """The attempt's file `rel`, or None when it is not one of its regular files (a path that
    leaves the folder, a symlink anywhere on the way, a folder, a missing file)."""
    if not rel or rel.startswith("/") or "\x00" in rel:
        return None
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    current = folder
    try:
        for part in parts:
            current = current / part
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return None
        info = os.lstat(current)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    real = os.path.realpath(current)
    if os.path.commonpath([real, os.path.realpath(folder)]) != os.path.realpath(folder):
        return None
    return current


@dataclass(frozen=True)
class Head:
    text: str
    size: int
    cut: bool
    binary: bool


def read_head(path: Path, limit: int = HEAD_BYTES) -> Head:
    """The first `limit` bytes as text (a 150 MB log is never read whole)."""
    with open(path, "rb") as fh:
        data = fh.read(limit)
        size = os.fstat(fh.fileno()).st_size
    binary = b"\x00" in data[:8192]
    return Head(data.decode("utf-8", "replace"), size, size > len(data), binary)


def stream(path: Path, chunk: int = 256 * 1024) -> Iterator[bytes]:
    """A whole file in chunks, for the raw view."""
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            yield block
