"""A ripgrep for OpenCode's grep and glob tools, which run `rg`.

OpenCode takes `rg` from the PATH or from its cache folder, and otherwise downloads it from
GitHub at the first grep or glob, which a sandbox cannot reach: every such call failed with
"ripgrep execution failed". Codex's npm package carries a static ripgrep (musl, runs on any
x86-64 Linux image); that one binary is taken from it (from the Codex install when there is
one, else from its package fetched with `npm pack`) and shipped beside OpenCode's own.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from runs.agents.base import AgentError
from runs.events import Event, RipgrepFetching

RG_IN_CODEX = (
    "vendor/x86_64-unknown-linux-musl/codex-path/rg"  # inside @openai/codex's linux-x64 package
)


def ensure_ripgrep(
    target: Path, codex_package_dir: Path, codex_version: str, emit: Callable[[Event], None]
) -> Path:
    """`target` (the rg OpenCode's folder ships), copied from Codex's package on first use."""
    if target.is_file():
        return target
    installed = codex_package_dir / RG_IN_CODEX
    if installed.is_file():
        _place(installed.read_bytes(), target)
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise AgentError(
            "install failed: OpenCode's ripgrep comes from an npm package, and this machine "
            "has no npm; fix: apt-get install -y npm (scripts/setup.sh does it)"
        )
    package = f"@openai/codex@{codex_version}-linux-x64"
    emit(RipgrepFetching(package))
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [npm, "pack", "--silent", "--pack-destination", tmp, package],
            capture_output=True,
            text=True,
            timeout=900,
        )
        tarballs = list(Path(tmp).glob("*.tgz"))
        if proc.returncode != 0 or not tarballs:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise AgentError(
                f"install failed: npm could not fetch {package} for its ripgrep: "
                + " / ".join(tail)
            )
        with tarfile.open(tarballs[0]) as tar:
            try:
                member = tar.extractfile(f"package/{RG_IN_CODEX}")
            except KeyError:
                member = None
            if member is None:
                raise AgentError(f"install failed: {package} holds no {RG_IN_CODEX}")
            _place(member.read(), target)
    return target


def _place(data: bytes, target: Path) -> None:
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(data)
    partial.chmod(0o755)
    partial.replace(target)
