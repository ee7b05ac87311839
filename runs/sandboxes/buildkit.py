"""Task images built by BuildKit, through the docker CLI.

Why the CLI and not the docker SDK: the SDK's `images.build` speaks the engine's classic builder,
which has no Dockerfile heredocs (`RUN <<EOF`) and no `RUN --mount=type=cache`; real task sets
use both. `docker build` with buildx is BuildKit, and its built-in Dockerfile frontend has them,
offline. A `# syntax=` line would make BuildKit pull that frontend image from a registry, which
cannot be reached here: it is turned into a plain comment (the line count stays, so the line
numbers in an error are the task's own). The context is sent as a tar on stdin, never as a
folder (runs/sandboxes/build_context.py says why).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache

from runs.sandboxes.build_context import BuildContext

_SYNTAX = re.compile(r"^\s*#\s*syntax\s*=", re.IGNORECASE)
_DIRECTIVE = re.compile(r"^\s*#\s*\w+\s*=")
_HEREDOC = re.compile(r"^\s*(RUN|COPY|ADD)\b.*(?<!<)<<(?!<)-?\s*[\"']?[A-Za-z_]", re.IGNORECASE)
_MOUNT = re.compile(r"^\s*RUN\b.*--mount=", re.IGNORECASE)


@dataclass(frozen=True)
class BuildOutcome:
    error: str | None  # None: built
    line: int | None  # the Dockerfile line the error is at, when BuildKit says
    log: str  # BuildKit's whole output


def without_syntax_line(text: str) -> tuple[str, bool]:
    """The Dockerfile with a `# syntax=` parser directive made a comment; whether there was one."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if not _DIRECTIVE.match(line):
            break  # parser directives come first, before any other line
        if _SYNTAX.match(line):
            lines[i] = "# (syntax directive dropped: the built-in frontend builds this offline)\n"
            return "".join(lines), True
    return text, False


def buildkit_only_line(text: str) -> tuple[int, str] | None:
    """The first line using a feature only BuildKit has (a heredoc, RUN --mount): (number, what)."""
    for number, line in enumerate(text.splitlines(), 1):
        if _HEREDOC.match(line):
            return number, "a heredoc (<<EOF)"
        if _MOUNT.match(line):
            return number, "RUN --mount"
    return None


@cache
def available() -> bool:
    """Whether `docker build` here is BuildKit (the docker CLI with its buildx plugin)."""
    if shutil.which("docker") is None:
        return False
    try:
        proc = subprocess.run(
            ["docker", "buildx", "version"], capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def build(
    context: BuildContext,
    tag: str,
    labels: dict[str, str],
    timeout: float,
    options: tuple[str, ...] = (),
) -> BuildOutcome:
    """Build `context` (its Dockerfile in it) tagged `tag`; `options` are further `docker build`
    flags (--build-arg, --target). The context goes on stdin as a tar: see build_context.py."""
    cmd = ["docker", "build", "--progress=plain", "-f", context.dockerfile, "-t", tag, *options]
    for key, value in labels.items():
        cmd += ["--label", f"{key}={value}"]
    env = {**os.environ, "DOCKER_BUILDKIT": "1", "BUILDX_NO_DEFAULT_ATTESTATIONS": "1"}
    with tempfile.TemporaryFile(prefix="benchflow-context-") as tar:
        context.write_tar(tar)
        tar.seek(0)
        try:
            proc = subprocess.run(
                [*cmd, "-"],
                stdin=tar,
                capture_output=True,
                timeout=timeout,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
            return BuildOutcome(
                f"the build took longer than build_timeout_sec={timeout:g}", None, out
            )
    log = (proc.stdout + proc.stderr).decode(errors="replace")
    if proc.returncode == 0:
        return BuildOutcome(None, None, log)
    return BuildOutcome(_error_of(log, proc.returncode), _line_of(log, context.dockerfile), log)


# curl's exit codes for a host it could not reach (it is often run with -s: no message of its own)
_CURL_UNREACHABLE = {6: "could not resolve the host", 7: "could not connect to the host"}
_CURL_EXIT = re.compile(r'process "[^"]*\bcurl\b.*did not complete successfully: exit code: (\d+)')


def _error_of(log: str, code: int) -> str:
    errors = [line for line in log.splitlines() if line.startswith("ERROR:")]
    if not errors:
        return f"docker build exited {code}"
    error = errors[-1].removeprefix("ERROR:").strip().removeprefix("failed to solve:").strip()
    curl = _CURL_EXIT.search(error)
    if curl and (why := _CURL_UNREACHABLE.get(int(curl.group(1)))):
        error += (
            f" (curl {why}: the Dockerfile fetches from a host this machine cannot reach; "
            "bake the file into the task, or build where that host answers)"
        )
    return error


def _line_of(log: str, dockerfile: str = "Dockerfile") -> int | None:
    """The Dockerfile line BuildKit's error is at ("<dockerfile>:N" on a line of its own)."""
    at = re.compile(rf"^{re.escape(dockerfile)}:(\d+)$")
    found = [int(m.group(1)) for m in map(at.match, log.splitlines()) if m]
    return found[-1] if found else None
