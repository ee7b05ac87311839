"""--save-outputs: the final workspace kept with a manifest (size, sha256, mode) for regrades."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from runs.jobfolder import write_json
from runs.sandboxes.docker import Sandbox

EVIDENCE = "evidence"
WORKSPACE = "workspace"
MANIFEST = "manifest.json"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def build_manifest(root: Path) -> list[dict[str, Any]]:
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            st = path.lstat()
            entries.append(
                {
                    "path": path.relative_to(root).as_posix(),
                    "size": st.st_size,
                    "sha256": file_sha256(path),
                    "mode": oct(st.st_mode & 0o7777),
                }
            )
    return entries


def save_workspace(sandbox: Sandbox, workdir: str, attempt_dir: Path) -> None:
    """Copy the sandbox's workdir into evidence/workspace and write evidence/manifest.json."""
    dest = attempt_dir / EVIDENCE / WORKSPACE
    dest.mkdir(parents=True, exist_ok=True)
    sandbox.copy_dir_to(workdir, dest)
    write_json(
        attempt_dir / EVIDENCE / MANIFEST, {"workdir": workdir, "files": build_manifest(dest)}
    )


def check_manifest(attempt_dir: Path) -> str | None:
    """None when evidence/workspace matches its manifest byte for byte, else what differs."""
    import json

    manifest_path = attempt_dir / EVIDENCE / MANIFEST
    if not manifest_path.is_file():
        return f"{attempt_dir.name} has no saved outputs (run with --save-outputs to keep them)"
    manifest = json.loads(manifest_path.read_text())
    root = attempt_dir / EVIDENCE / WORKSPACE
    for entry in manifest["files"]:
        path = root / entry["path"]
        if (
            not path.is_file()
            or path.stat().st_size != entry["size"]
            or file_sha256(path) != entry["sha256"]
        ):
            return f"{attempt_dir.name}: saved file {entry['path']} does not match its manifest"
    return None
