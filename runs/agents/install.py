"""The agent CLIs' pinned npm packages, installed once per version on the host.

Each CLI ships a native binary in its npm package (no Node needed at run time). npm installs it
into a cache folder, under a lock, the first time a job needs it; the folder (or part of it) is
what goes into the sandbox (runs/sandboxes/layers.py builds the layer).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runs.agents.base import AgentError
from runs.agents.ripgrep import ensure_ripgrep
from runs.events import AgentInstalling, Event


def cache_root() -> Path:
    return Path(
        os.environ.get(
            "BENCHFLOW_AGENT_CACHE", Path.home() / ".cache" / "benchflow-site" / "agents"
        )
    )


@dataclass(frozen=True)
class CliSpec:
    name: str
    package: str
    version: str
    binary: str  # path of the native binary inside the npm prefix
    protocol: str  # the wire API it speaks: messages | chat | responses
    folder: str = ""  # the folder put into the sandbox, inside the npm prefix; "": the binary's own
    layout: int = 1  # raised when what goes into the sandbox changes for the same version
    ripgrep: bool = False  # ships an `rg` beside the binary (runs/agents/ripgrep.py)

    @property
    def shipped(self) -> str:
        return self.folder or str(Path(self.binary).parent)

    @property
    def binary_in_folder(self) -> str:
        return str(Path(self.binary).relative_to(self.shipped))

    @property
    def layer_name(self) -> str:
        """The agent's files image is cached by this name: a new version or layout gets a new one."""
        base = f"{self.name}-{self.version}"
        return base if self.layout == 1 else f"{base}-layout{self.layout}"


CODEX_PLATFORM_PACKAGE = "node_modules/@openai/codex-linux-x64"
CODEX_PACKAGE = f"{CODEX_PLATFORM_PACKAGE}/vendor/x86_64-unknown-linux-musl"
SPECS = {
    "claude": CliSpec(
        "claude",
        "@anthropic-ai/claude-code",
        "2.1.197",
        "node_modules/@anthropic-ai/claude-code-linux-x64/claude",
        "messages",
    ),
    # with an rg beside it, for its grep and glob tools; layout 1 had none
    "opencode": CliSpec(
        "opencode",
        "opencode-ai",
        "1.18.33",
        "node_modules/opencode-linux-x64/bin/opencode",
        "chat",
        layout=2,
        ripgrep=True,
    ),
    # the whole native package: beside bin/codex, codex-package.json tells Codex to put its bundled
    # ripgrep (codex-path/rg) on its shell's PATH; layout 1 shipped bin/ alone, without rg
    "codex": CliSpec(
        "codex",
        "@openai/codex",
        "0.171.0",
        f"{CODEX_PACKAGE}/bin/codex",
        "responses",
        folder=CODEX_PACKAGE,
        layout=2,
    ),
}


def installed_folder(spec: CliSpec) -> Path | None:
    """The agent's folder to put into the sandbox, when it is installed."""
    prefix = cache_root() / f"{spec.name}-{spec.version}"
    shipped = prefix / spec.shipped
    if (prefix / spec.binary).is_file() and (not spec.ripgrep or (shipped / "rg").is_file()):
        return shipped
    return None


def ensure_installed(spec: CliSpec, emit: Callable[[Event], None]) -> Path:
    """The agent's folder to put into the sandbox, installed with npm on first use (under a lock)."""
    if (folder := installed_folder(spec)) is not None:
        return folder
    prefix = cache_root() / f"{spec.name}-{spec.version}"
    binary = prefix / spec.binary
    shipped = prefix / spec.shipped
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(prefix.parent / f".{spec.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.is_file():
            npm = shutil.which("npm")
            if npm is None:
                raise AgentError(
                    f"install failed: -a {spec.name} needs npm on this machine to fetch {spec.package}; "
                    "fix: apt-get install -y npm (scripts/setup.sh does it)"
                )
            emit(AgentInstalling(spec.package, spec.version, str(prefix)))
            proc = subprocess.run(
                [
                    npm,
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--prefix",
                    str(prefix),
                    f"{spec.package}@{spec.version}",
                ],
                capture_output=True,
                text=True,
                timeout=900,
            )
            if proc.returncode != 0 or not binary.is_file():
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
                raise AgentError(
                    f"install failed: npm could not install {spec.package}@{spec.version}: "
                    + " / ".join(tail)
                )
        if spec.ripgrep:
            codex = SPECS["codex"]
            codex_package = cache_root() / f"{codex.name}-{codex.version}" / CODEX_PLATFORM_PACKAGE
            ensure_ripgrep(shipped / "rg", codex_package, codex.version, emit)
    return shipped


def mount_instead() -> bool:
    """BENCHFLOW_AGENT_MOUNT=1: mount the agent's folder rather than layer it into the image."""
    return os.environ.get("BENCHFLOW_AGENT_MOUNT", "") not in ("", "0")
