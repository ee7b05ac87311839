"""Exactly what one image build sees: its context's files (.dockerignore honoured) and its
Dockerfile, named by a digest of their contents, and sent to BuildKit as one tar.

Why a tar and not the folder: BuildKit's sync of a local context keeps, per builder, the files it
was sent last under the context folder's *name*, and sends again only those whose path, size or
mtime changed (rsync's rule; docker/buildx#3232, moby/buildkit#4950). Every task's context is a
folder named `environment`, and task sets copied with `git archive` give every file one mtime:
two tasks whose data.txt differ only in content then build the second with the first's file. A
tar on stdin is uploaded whole for each build and BuildKit keys it by its contents, so no build
can see another's files, whatever the names, sizes and mtimes.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from docker.utils.build import PatternMatcher

_READ = 1 << 20


def dockerignore_patterns(context: Path) -> list[str]:
    """The context's .dockerignore lines (comments and blanks dropped), as Docker reads them."""
    try:
        text = (context / ".dockerignore").read_text(errors="replace")
    except OSError:
        return []
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


@dataclass(frozen=True)
class BuildContext:
    """A build context folder as one build sees it.

    `dockerfile` is where the Dockerfile goes in the context (a path relative to it) and
    `dockerfile_text` what it holds: the file there, if any, is replaced by it. `extra` is what
    else decides the image (build args, a target), so it is part of the digest.
    """

    root: Path
    dockerfile_text: str
    dockerfile: str = "Dockerfile"
    extra: tuple[str, ...] = ()
    members: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        # Docker's own rules (the docker SDK's port of them): a pattern may be negated with !,
        # a folder left out is not walked unless a ! names something in it.
        matcher = PatternMatcher(dockerignore_patterns(self.root))
        found = {p.replace(os.sep, "/") for p in matcher.walk(str(self.root))}
        found.discard(self.dockerfile)
        object.__setattr__(self, "members", tuple(sorted(found)))

    def digest(self) -> str:
        """sha256 over every member's path, kind, mode and contents (or link target), and the
        Dockerfile and extra: equal digests, equal builds. Mtimes are left out on purpose, so two
        copies of one context made at different times share an image."""
        h = hashlib.sha256()

        def add(*parts: bytes) -> None:
            for part in parts:
                h.update(len(part).to_bytes(8, "big") + part)

        for rel in self.members:
            path = self.root / rel
            st = path.lstat()
            mode = oct(stat.S_IMODE(st.st_mode)).encode()
            if stat.S_ISLNK(st.st_mode):
                add(b"link", rel.encode(), os.readlink(path).encode())
            elif stat.S_ISDIR(st.st_mode):
                add(b"dir", rel.encode(), mode)
            elif stat.S_ISREG(st.st_mode):
                add(b"file", rel.encode(), mode, _file_sha256(path))
        add(b"dockerfile", self.dockerfile.encode(), self.dockerfile_text.encode())
        for item in self.extra:
            add(b"extra", item.encode())
        return f"sha256:{h.hexdigest()}"

    def write_tar(self, out: BinaryIO) -> None:
        """The context as a tar (owner root, as BuildKit makes a local context's files), the
        Dockerfile at its place; sockets and other special files are left out, as Docker does.

        The Dockerfile comes first and no member has a pax header: the docker CLI takes stdin
        for a tar only if its first 1024 bytes parse as one (else for a Dockerfile)."""
        with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
            data = self.dockerfile_text.encode()
            info = tarfile.TarInfo(self.dockerfile)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
            for rel in self.members:
                path = self.root / rel
                member = _tarinfo(path, rel)
                if member is None:
                    continue
                if member.isfile():
                    with open(path, "rb") as fh:
                        tar.addfile(member, fh)
                else:
                    tar.addfile(member)


def _tarinfo(path: Path, rel: str) -> tarfile.TarInfo | None:
    """A member for a file, folder or symlink, owned by root (a hard link goes in whole)."""
    st = path.lstat()
    info = tarfile.TarInfo(rel)
    info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
    if stat.S_ISREG(st.st_mode):
        info.size = st.st_size
    elif stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
    else:
        return None
    return info


def _file_sha256(path: Path) -> bytes:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_READ):
            digest.update(block)
    return digest.digest()
