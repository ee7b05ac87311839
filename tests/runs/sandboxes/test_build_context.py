"""What one build sees (runs/sandboxes/build_context.py): .dockerignore, the digest, the tar."""

from __future__ import annotations

import io
import os
import socket
import tarfile
from pathlib import Path

from runs.sandboxes.build_context import BuildContext


def context(tmp_path: Path, files: dict[str, str], name: str = "environment") -> Path:
    root = tmp_path / name
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def tar_of(ctx: BuildContext) -> dict[str, tarfile.TarInfo]:
    out = io.BytesIO()
    ctx.write_tar(out)
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_dockerignore_is_honoured_with_its_exceptions(tmp_path: Path) -> None:
    root = context(
        tmp_path,
        {
            ".dockerignore": "# comment\n*.log\n!keep.log\ncache/\n",
            "Dockerfile": "FROM x\n",
            "a.log": "",
            "keep.log": "",
            "cache/big.bin": "",
            "src/app.py": "",
        },
    )
    members = BuildContext(root, "FROM x\n").members
    assert members == (".dockerignore", "keep.log", "src", "src/app.py")


def test_the_digest_follows_contents_and_not_mtimes(tmp_path: Path) -> None:
    one = context(tmp_path, {"data.txt": "AAAA"}, "one")
    two = context(tmp_path, {"data.txt": "BBBB"}, "two")
    same = context(tmp_path, {"data.txt": "AAAA"}, "three")
    for root in (one, two):
        os.utime(root / "data.txt", (1_700_000_000, 1_700_000_000))
    os.utime(same / "data.txt", (1_600_000_000, 1_600_000_000))
    digest = {root.name: BuildContext(root, "FROM x\n").digest() for root in (one, two, same)}
    assert digest["one"] != digest["two"]  # same name, size and mtime, other bytes
    assert digest["one"] == digest["three"]  # same bytes copied at another time
    assert BuildContext(one, "FROM y\n").digest() != digest["one"]
    assert BuildContext(one, "FROM x\n", extra=("--target=t",)).digest() != digest["one"]
    (one / "data.txt").chmod(0o755)
    assert BuildContext(one, "FROM x\n").digest() != digest["one"]


def test_the_tar_starts_with_the_given_dockerfile_and_holds_the_context(tmp_path: Path) -> None:
    root = context(tmp_path, {"Dockerfile": "# syntax=x\nFROM x\n", "d/数据.txt": "data"})
    (root / "link").symlink_to("d/数据.txt")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(root / "sock"))  # a special file: left out, as Docker leaves it out
    members = tar_of(BuildContext(root, "# (dropped)\nFROM x\n"))
    assert list(members)[0] == "Dockerfile"
    assert set(members) == {"Dockerfile", "d", "d/数据.txt", "link"}
    assert members["link"].issym() and members["link"].linkname == "d/数据.txt"
    assert all(m.uid == 0 and m.gid == 0 for m in members.values())
    out = io.BytesIO()
    BuildContext(root, "# (dropped)\nFROM x\n").write_tar(out)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        dockerfile = tar.extractfile("Dockerfile")
        assert dockerfile is not None and dockerfile.read() == b"# (dropped)\nFROM x\n"
        # no pax header: the docker CLI reads the first 1024 bytes as one tar header or not at all
        assert not any(m.pax_headers for m in tar.getmembers())
    server.close()
