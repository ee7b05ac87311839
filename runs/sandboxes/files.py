"""Files for a sandbox: a host folder refilled for a mount, or a tar of files put into the container."""

from __future__ import annotations

import io
import os
import tarfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


def populate(folder: Path, sources: list[Path]) -> None:
    """Empty a host folder mounted into a sandbox, then copy `sources` into it (later ones win).

    Whatever the agent left in the mounted folder is gone before the verifier's files arrive.
    """
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(folder):  # the folder itself stays: it is the mount's inode
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    os.chmod(folder, 0o777)
    for src in sources:
        shutil.copytree(src, folder, symlinks=False, dirs_exist_ok=True)


@dataclass
class FileEntry:
    data: bytes
    mode: int = 0o644
    link: str = ""  # a symbolic link to this path instead of a file


def make_tar(files: dict[str, FileEntry], dirs: Iterable[str] = ()) -> bytes:
    """A tar of `files` (paths relative to /) and empty world-writable `dirs`."""
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in dirs:
            info = tarfile.TarInfo(d.strip("/"))
            info.type = tarfile.DIRTYPE
            info.mode = 0o777
            info.mtime = now
            tar.addfile(info)
        for path, entry in files.items():
            info = tarfile.TarInfo(path.strip("/"))
            info.mtime = now
            if entry.link:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.link, 0o777
                tar.addfile(info)
                continue
            info.size = len(entry.data)
            info.mode = entry.mode
            tar.addfile(info, io.BytesIO(entry.data))
    return buf.getvalue()


def tree_files(src: Path, dest: str) -> dict[str, FileEntry]:
    """Every regular file under `src`, placed under `dest` with its mode kept."""
    files: dict[str, FileEntry] = {}
    for root, _dirs, names in os.walk(src):
        for name in names:
            path = Path(root) / name
            if path.is_symlink() or not path.is_file():
                continue
            rel = path.relative_to(src).as_posix()
            files[f"{dest.rstrip('/')}/{rel}"] = FileEntry(
                path.read_bytes(), path.stat().st_mode & 0o777 | 0o444
            )
    return files
