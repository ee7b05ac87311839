"""An offline stand-in for `ghcr.io/astral-sh/uv:<version>`, the image tasks `COPY --from` to get
uv (`COPY --from=ghcr.io/astral-sh/uv:0.8.15 /uv /uvx /bin/`). No registry answers here, but
PyPI does, and uv's wheel there carries the same two static binaries the image holds at /uv and
/uvx: the stand-in is those, from the wheel of exactly that version, in an image FROM scratch,
tagged only with the version it holds. `bench doctor --fix --uv VERSION` builds it.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from docker import DockerClient

from runs.sandboxes.engine import Log
from runs.sandboxes.rootfs import LABEL, VERSION_LABEL, labels_of

UV_REPO = "ghcr.io/astral-sh/uv"
UV_VERSION_LABEL = "benchflow.base.uv"
UV_STAND_IN_VERSION = 1  # bump when the recipe changes
_VERSION = re.compile(r"\d+\.\d+\.\d+")
_WHEEL_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


class UvImageError(Exception):
    """The stand-in could not be made (a version PyPI has no wheel of, no PyPI, ...)."""


def uv_tag(version: str) -> str:
    return f"{UV_REPO}:{version}"


def uv_version_of(image: str) -> str | None:
    """The version a `ghcr.io/astral-sh/uv:<version>` reference names (None for another image,
    or a tag that names no exact version, as `latest` or `0.8`)."""
    repo, _, tag = image.rpartition(":")
    return tag if repo == UV_REPO and _VERSION.fullmatch(tag) else None


def build_uv_image(client: DockerClient, version: str, log: Log = print) -> str:
    """Build (or keep, when current) the stand-in for uv `version`; its tag. Raises UvImageError."""
    if not _VERSION.fullmatch(version):
        raise UvImageError(f"{version!r} is not a uv version (write one such as 0.8.15)")
    tag = uv_tag(version)
    labels = labels_of(client, tag)
    if labels is not None and LABEL not in labels:
        log(f"keeping {tag}: it is a real image, not a stand-in")
        return tag
    if labels and labels.get(VERSION_LABEL) == str(UV_STAND_IN_VERSION):
        return tag
    arch = _WHEEL_ARCH.get(str(client.info().get("Architecture", "x86_64")))
    if arch is None:
        raise UvImageError("no uv wheel is published for this engine's architecture")
    with tempfile.TemporaryDirectory(prefix="benchflow-uv-") as folder:
        wheel = _download(version, arch, Path(folder))
        binaries = _binaries(wheel, version)
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        dockerfile = (
            f"FROM scratch\nCOPY uv uvx /\nLABEL {LABEL}=1 {VERSION_LABEL}={UV_STAND_IN_VERSION} "
            f'{UV_VERSION_LABEL}={version} benchflow.base.note="uv {version} from its PyPI wheel"\n'
        ).encode()
        for name, data, mode in (("Dockerfile", dockerfile, 0o644), *binaries):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    log(f"building {tag} from uv {version}'s wheel on PyPI")
    for chunk in client.api.build(
        fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True, decode=True
    ):
        if "error" in chunk:
            raise UvImageError(f"building {tag} failed: {chunk['error'].strip()}")
    return tag


def _download(version: str, arch: str, folder: Path) -> Path:
    """uv's manylinux wheel of `version`, by pip (which checks the index's sha256 of it)."""
    cmd = [sys.executable, "-m", "pip", "download", f"uv=={version}", "--no-deps"]
    cmd += ["--only-binary=:all:", "--platform", f"manylinux_2_17_{arch}", "-d", str(folder), "-q"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    found = sorted(folder.glob(f"uv-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        said = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise UvImageError(f"could not download uv {version}'s wheel from PyPI: {said[0]}")
    return found[0]


def _binaries(wheel: Path, version: str) -> list[tuple[str, bytes, int]]:
    """uv and uvx out of the wheel, each checked against the wheel's RECORD."""
    out = []
    with zipfile.ZipFile(wheel) as zf:
        record = zf.read(f"uv-{version}.dist-info/RECORD").decode()
        sums = {row[0]: row[1] for row in csv.reader(record.splitlines()) if len(row) >= 2}
        for name in ("uv", "uvx"):
            member = f"uv-{version}.data/scripts/{name}"
            data = zf.read(member)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            if sums.get(member) != f"sha256={digest.decode()}":
                raise UvImageError(f"{member} in {wheel.name} does not match the wheel's RECORD")
            out.append((name, data, 0o755))
    return out
