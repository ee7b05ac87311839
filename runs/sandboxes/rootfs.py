"""What every offline base image build shares: the host's CA files, the labels that mark a
stand-in (and its recipe version), packing a debootstrapped folder into an image, building a
small Dockerfile over it, and tagging."""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import glob
import hashlib
import io
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker import DockerClient

from runs.sandboxes.engine import Log

LABEL, VERSION_LABEL, CA_LABEL = "benchflow.base", "benchflow.base.version", "benchflow.base.ca"
FROM_LABEL = "benchflow.base.from"

HOST_CA_GLOB = "/usr/local/share/ca-certificates/*.crt"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"

# Kept out of the rootfs tarball: Docker provides /dev, /proc, /sys; caches only add size.
EXCLUDED = "dev/* proc/* sys/* tmp/* debootstrap debootstrap/* var/cache/apt/*.bin var/cache/apt/archives/*.deb var/lib/apt/lists/*_*".split()
# apt in an image keeps no downloaded .debs and fetches no translations (as Docker's official images)
DOCKER_CLEAN = (
    'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb || true"; };\n'
    'Acquire::Languages "none";\n'
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PHASE = re.compile(r"I: (Retrieving|Validating|Extracting|Unpacking|Configuring) ")


def host_ca_files() -> list[Path]:
    return [Path(p) for p in sorted(glob.glob(HOST_CA_GLOB))]


def ca_digest(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16] if files else "none"


def labels_of(client: DockerClient, tag: str) -> dict[str, str] | None:
    try:
        return client.images.get(tag).labels or {}
    except docker.errors.ImageNotFound:
        return None


def is_current(labels: dict[str, str] | None, version: int, ca: str | None = None) -> bool:
    """Made by the recipe at `version` (and with the host's CA files as they are now)."""
    if not labels or labels.get(VERSION_LABEL) != str(version):
        return False
    return ca is None or labels.get(CA_LABEL) == ca


def is_foreign(labels: dict[str, str] | None) -> bool:
    """A real image (pulled or loaded by someone) that we must not overwrite."""
    return labels is not None and LABEL not in labels


def excluded(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    name = info.name.removeprefix("./")
    return None if any(fnmatch.fnmatchcase(name, p) for p in EXCLUDED) else info


def remove_tree(path: Path, log: Log) -> None:
    # A debootstrap killed midway can leave /proc mounted inside; never rmtree through a mount.
    mounts = Path("/proc/mounts").read_text().split("\n") if Path("/proc/mounts").exists() else []
    if any(f" {path}/" in line for line in mounts):
        log(f"leaving {path} in place: something is still mounted under it")
        return
    shutil.rmtree(path, ignore_errors=True)


def build(
    client: DockerClient, tag: str, dockerfile: str, files: dict[str, bytes], log: Log
) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {"Dockerfile": dockerfile.encode(), **files}.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    log(f"building {tag}")
    old = client.images.get(tag).id if labels_of(client, tag) is not None else None
    # The low-level call streams progress as it happens; images.build only returns at the end.
    opts = dict(custom_context=True, rm=True, forcerm=True, pull=False, decode=True, timeout=1800)
    for chunk in client.api.build(fileobj=buf, tag=tag, **opts):
        if "error" in chunk:
            raise RuntimeError(f"building {tag} failed: {chunk['error'].strip()}")
        for line in _ANSI.sub("", str(chunk.get("stream", ""))).splitlines():
            if line.strip():
                log(f"  {line.rstrip()}")
    if old:
        drop_if_untagged(client, old)


def drop_if_untagged(client: DockerClient, image_id: str) -> None:
    """Remove the image a rebuild replaced, unless it is still tagged or in use."""
    try:
        if not client.images.get(image_id).tags:
            client.images.remove(image_id)
    except docker.errors.APIError:  # a container or a child image still uses it: keep it
        pass


def retag(client: DockerClient, image: Any, tag: str, log: Log) -> list[str]:
    try:
        existing = client.images.get(tag)
    except docker.errors.ImageNotFound:
        existing = None
    if existing is not None and existing.id == image.id:
        return []
    if existing is not None and is_foreign(existing.labels or {}):
        log(f"keeping {tag}: it is a real image, not a stand-in")
        return []
    repo, name = tag.rsplit(":", 1)
    image.tag(repo, name)
    log(f"tagged {tag}")
    return [tag]


def debootstrap(cmd: list[str], log: Log) -> None:
    """Run debootstrap, logging one line per phase (not one per package); raises on failure."""
    log(f"$ {shlex.join(cmd)}")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    phases: set[str] = set()
    tail: list[str] = []
    for line in proc.stdout:
        tail = [*tail[-5:], line.rstrip()]
        phase = _PHASE.match(line)
        if phase and phase.group(1) in phases:
            continue
        if phase:
            phases.add(phase.group(1))
            line = f"I: {phase.group(1).lower()} packages..."
        log(f"  {line.rstrip()}")
    if proc.wait() != 0:
        raise RuntimeError(f"debootstrap failed with code {proc.returncode}: {' | '.join(tail)}")


def import_rootfs(
    client: DockerClient, rootfs: Path, tarball: Path, tag: str, changes: list[str], log: Log
) -> None:
    """Pack a root folder (without what Docker provides) and import it as `tag`."""
    log(f"packing {rootfs} into {tarball}")
    with tarfile.open(tarball, "w") as tar:
        tar.add(rootfs, arcname=".", filter=excluded)
    log(f"importing {tarball.stat().st_size // 2**20} MB as {tag}")
    repo, name = tag.rsplit(":", 1)
    client.api.import_image_from_file(str(tarball), repository=repo, tag=name, changes=changes)


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Held while base images are built: two `bench doctor --fix` at once must not race."""
    with open(Path(tempfile.gettempdir()) / "benchflow-baseimages.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
