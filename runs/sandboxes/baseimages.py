"""Offline stand-ins for the base images benchmarks use (no registry here): build and check them.

Debian bookworm is debootstrapped from the host's mirror, imported, and tagged under the FROM
names tasks use most that it can honestly carry: debian:bookworm[-slim], debian:12[-slim], and
python:3.11[-slim][-bookworm] (bookworm's Python is 3.11). A stand-in carries the version its tag
names: none is made for python:3.12 or 3.13, Ubuntu or Alpine, and a build that needs one says why.
"""

from __future__ import annotations

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
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker import DockerClient

from runs.sandboxes.engine import SETUP_HINT, Log

# Bump when any recipe below changes: images at an older version get rebuilt.
BASE_VERSION = 1
ROOTFS_TAG = "benchflow/rootfs:bookworm"
BASE_TAG = "benchflow/base:bookworm"
DEBIAN_TAGS = ("debian:bookworm", "debian:bookworm-slim", "debian:12", "debian:12-slim")
PYTHON_TAGS = (
    "python:3.11-slim",
    "python:3.11-slim-bookworm",
    "python:3.11",
    "python:3.11-bookworm",
)
BOOKWORM_PYTHON = "3.11"
STAND_INS = (BASE_TAG, *DEBIAN_TAGS, *PYTHON_TAGS)
LABEL, VERSION_LABEL, CA_LABEL = "benchflow.base", "benchflow.base.version", "benchflow.base.ca"
FROM_LABEL = "benchflow.base.from"

HOST_CA_GLOB = "/usr/local/share/ca-certificates/*.crt"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SECURITY_MIRROR = "http://deb.debian.org/debian-security"
# Kept out of the rootfs tarball: Docker provides /dev, /proc, /sys; caches only add size.
_EXCLUDED = "dev/* proc/* sys/* tmp/* debootstrap debootstrap/* var/cache/apt/*.bin var/cache/apt/archives/*.deb var/lib/apt/lists/*_*".split()
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PHASE = re.compile(r"I: (Retrieving|Validating|Extracting|Unpacking|Configuring) ")


# --- host facts -------------------------------------------------------------------------------


def host_ca_files() -> list[Path]:
    return [Path(p) for p in sorted(glob.glob(HOST_CA_GLOB))]


def _ca_digest(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16] if files else "none"


def apt_mirrors() -> tuple[str, str]:
    """The host's Debian mirror and security mirror for bookworm, from its apt sources."""
    main, security = DEFAULT_MIRROR, DEFAULT_SECURITY_MIRROR
    found: list[tuple[str, list[str]]] = []
    files = ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*"))]
    for name in files:
        try:
            text = Path(name).read_text()
        except OSError:
            continue
        if name.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                for uri in fields.get("URIs", "").split():
                    found.append((uri, fields.get("Suites", "").split()))
        elif name.endswith(".list"):
            for m in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", text, re.M):
                found.append((m.group(1), [m.group(2)]))
    for uri, suites in reversed(found):  # first match wins
        if "bookworm" in suites:
            main = uri.rstrip("/")
        if "bookworm-security" in suites:
            security = uri.rstrip("/")
    return main, security


# --- building ---------------------------------------------------------------------------------


def _labels(client: DockerClient, tag: str) -> dict[str, str] | None:
    try:
        return client.images.get(tag).labels or {}
    except docker.errors.ImageNotFound:
        return None


def _is_current(labels: dict[str, str] | None, ca: str | None = None) -> bool:
    if not labels or labels.get(VERSION_LABEL) != str(BASE_VERSION):
        return False
    return ca is None or labels.get(CA_LABEL) == ca


def _is_foreign(labels: dict[str, str] | None) -> bool:
    """A real image (pulled or loaded by someone) that we must not overwrite."""
    return labels is not None and LABEL not in labels


def _excluded(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    name = info.name.removeprefix("./")
    return None if any(fnmatch.fnmatchcase(name, p) for p in _EXCLUDED) else info


def _debootstrap_rootfs(client: DockerClient, log: Log) -> None:
    if shutil.which("debootstrap") is None:
        raise RuntimeError(f"debootstrap is not installed: {SETUP_HINT}")
    mirror, security = apt_mirrors()
    work = Path(tempfile.mkdtemp(prefix="benchflow-rootfs-", dir="/var/tmp"))
    rootfs, tarball = work / "rootfs", work / "rootfs.tar"
    try:
        include = "--include=ca-certificates,procps,coreutils"
        cmd = ["debootstrap", "--variant=minbase", include, "bookworm", str(rootfs), mirror]
        log(f"$ {shlex.join(cmd)}")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        phases: set[str] = set()
        for line in proc.stdout:
            # One line per phase, not one per package (a few hundred lines otherwise).
            phase = _PHASE.match(line)
            if phase and phase.group(1) in phases:
                continue
            if phase:
                phases.add(phase.group(1))
                line = f"I: {phase.group(1).lower()} packages..."
            log(f"  {line.rstrip()}")
        if proc.wait() != 0:
            raise RuntimeError(f"debootstrap failed with code {proc.returncode} (mirror {mirror})")
        (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
        (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(
            f"Types: deb\nURIs: {mirror}\nSuites: bookworm bookworm-updates\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
            f"Types: deb\nURIs: {security}\nSuites: bookworm-security\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        )
        (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(
            'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb || true"; };\n'
            'Acquire::Languages "none";\n'
        )
        log(f"packing {rootfs} into {tarball}")
        with tarfile.open(tarball, "w") as tar:
            tar.add(rootfs, arcname=".", filter=_excluded)
        log(f"importing {tarball.stat().st_size // 2**20} MB as {ROOTFS_TAG}")
        repo, tag = ROOTFS_TAG.split(":")
        changes = [
            f"LABEL {LABEL}=1 {VERSION_LABEL}={BASE_VERSION}",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD ["bash"]',
        ]
        client.api.import_image_from_file(str(tarball), repository=repo, tag=tag, changes=changes)
    finally:
        _remove_tree(work, log)


def _remove_tree(path: Path, log: Log) -> None:
    # A debootstrap killed midway can leave /proc mounted inside; never rmtree through a mount.
    mounts = Path("/proc/mounts").read_text().split("\n") if Path("/proc/mounts").exists() else []
    if any(f" {path}/" in line for line in mounts):
        log(f"leaving {path} in place: something is still mounted under it")
        return
    shutil.rmtree(path, ignore_errors=True)


def _build(
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
    old = client.images.get(tag).id if _labels(client, tag) is not None else None
    # The low-level call streams progress as it happens; images.build only returns at the end.
    opts = dict(custom_context=True, rm=True, forcerm=True, pull=False, decode=True, timeout=1800)
    for chunk in client.api.build(fileobj=buf, tag=tag, **opts):
        if "error" in chunk:
            raise RuntimeError(f"building {tag} failed: {chunk['error'].strip()}")
        for line in _ANSI.sub("", str(chunk.get("stream", ""))).splitlines():
            if line.strip():
                log(f"  {line.rstrip()}")
    if old:
        _drop_if_untagged(client, old)


def _drop_if_untagged(client: DockerClient, image_id: str) -> None:
    """Remove the image a rebuild replaced, unless it is still tagged or in use."""
    try:
        if not client.images.get(image_id).tags:
            client.images.remove(image_id)
    except docker.errors.APIError:  # a container or a child image still uses it: keep it
        pass


def _base_dockerfile(ca_files: list[Path], ca: str) -> str:
    certs = "COPY ca/ /usr/local/share/ca-certificates/\nRUN update-ca-certificates\n"
    bundle = HOST_CA_BUNDLE
    return (
        f"FROM {ROOTFS_TAG}\n{certs if ca_files else ''}"
        f"ENV LANG=C.UTF-8 SSL_CERT_FILE={bundle} REQUESTS_CA_BUNDLE={bundle} "
        f"PIP_CERT={bundle} NODE_EXTRA_CA_CERTS={bundle}\n"
        f"LABEL {LABEL}=1 {VERSION_LABEL}={BASE_VERSION} {CA_LABEL}={ca} "
        f'benchflow.base.note="Debian bookworm minbase, debootstrapped offline"\n'
        'CMD ["bash"]\n'
    )


# {base_id} pins the python image to the base it was built on (see _build_locked).
PYTHON_DOCKERFILE = f"""FROM {BASE_TAG}
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      python3 python3-pip python3-venv \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \\
 && ln -sf /usr/bin/python3 /usr/local/bin/python \\
 && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED \\
 && pip --version
ENV PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
LABEL {FROM_LABEL}="{{base_id}}" benchflow.base.python="3.11" benchflow.base.note="Debian bookworm python3 (3.11), standing in for python:3.11 images"
CMD ["python3"]
"""


def build_base_images(client: DockerClient, *, force: bool = False, log: Log = print) -> list[str]:
    """Build (or refresh) the stand-in images; returns the tags that were (re)built or re-tagged."""
    lock_path = Path(tempfile.gettempdir()) / "benchflow-baseimages.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two `bench doctor --fix` at once must not race
        return _build_locked(client, force=force, log=log)


def _build_locked(client: DockerClient, *, force: bool, log: Log) -> list[str]:
    ca_files = host_ca_files()
    ca = _ca_digest(ca_files)
    built: list[str] = []
    if force or not _is_current(_labels(client, ROOTFS_TAG)):
        _debootstrap_rootfs(client, log)
        built.append(ROOTFS_TAG)
    if built or not _is_current(_labels(client, BASE_TAG), ca):
        files = {f"ca/{p.name}": p.read_bytes() for p in ca_files}
        _build(client, BASE_TAG, _base_dockerfile(ca_files, ca), files, log)
        built.append(BASE_TAG)
    base = client.images.get(BASE_TAG)
    for tag in DEBIAN_TAGS:
        built += _retag(client, base, tag, log)
    first, *others = PYTHON_TAGS
    labels = _labels(client, first)
    if _is_foreign(labels):
        log(f"keeping {first}: it is a real image, not a stand-in")
    elif not _is_current(labels, ca) or (labels or {}).get(FROM_LABEL) != base.id:
        _build(client, first, PYTHON_DOCKERFILE.format(base_id=base.id), {}, log)
        built.append(first)
    python = client.images.get(first)
    for tag in others:
        built += _retag(client, python, tag, log)
    for tag in UNTRUTHFUL_TAGS:
        _drop_untruthful(client, tag, log)
    log(f"base images: {'built ' + ', '.join(built) if built else 'all current, nothing built'}")
    return built


# Tags an older version of this module made that name another version than they hold.
UNTRUTHFUL_TAGS = ("python:3.12-slim",)


def _drop_untruthful(client: DockerClient, tag: str, log: Log) -> None:
    labels = _labels(client, tag)
    if labels is not None and (why := untruthful(tag, labels)):
        client.images.remove(tag, noprune=True)  # the tag only; the image stays under its others
        log(f"removed the tag {tag}: {why}")


def _retag(client: DockerClient, image: Any, tag: str, log: Log) -> list[str]:
    try:
        existing = client.images.get(tag)
    except docker.errors.ImageNotFound:
        existing = None
    if existing is not None and existing.id == image.id:
        return []
    if existing is not None and _is_foreign(existing.labels or {}):
        log(f"keeping {tag}: it is a real image, not a stand-in")
        return []
    repo, name = tag.rsplit(":", 1)
    image.tag(repo, name)
    log(f"tagged {tag}")
    return [tag]


def base_image_status(client: DockerClient) -> dict[str, str]:
    """Each stand-in tag -> "current", "stale", "missing" or "foreign" (a real image we keep)."""
    ca = _ca_digest(host_ca_files())
    status: dict[str, str] = {}
    for tag in STAND_INS:
        labels = _labels(client, tag)
        if labels is None:
            status[tag] = "missing"
        elif _is_foreign(labels):
            status[tag] = "foreign"
        else:
            status[tag] = "current" if _is_current(labels, ca) else "stale"
    return status


def local_base_images(client: DockerClient) -> list[str]:
    """The stand-in tags present locally (a real image under the same name counts)."""
    return [tag for tag, state in base_image_status(client).items() if state != "missing"]


_PYTHON_TAG = re.compile(r"(?:.*/)?python:(\d+\.\d+)")


def untruthful(tag: str, labels: dict[str, str] | None) -> str | None:
    """Why a local image under `tag` is a stand-in that does not carry the version its tag names
    (an older `bench doctor` tagged Debian's Python 3.11 as python:3.12-slim), else None."""
    if not labels or LABEL not in labels:
        return None  # a real image, loaded by someone: it is what it says
    named = _PYTHON_TAG.match(tag)
    held = labels.get("benchflow.base.python")
    if named and held and named.group(1) != held:
        return f"the local {tag} is a stand-in holding Python {held}, not {named.group(1)}, so it is not used"
    return None


def no_stand_in_reason(name: str) -> str:
    """Why no offline stand-in exists for the image `name`."""
    python = _PYTHON_TAG.match(name)
    if python and python.group(1) != BOOKWORM_PYTHON:
        return (
            f"No stand-in is made for {name}: Debian bookworm, the base built offline here, has "
            f"Python {BOOKWORM_PYTHON} only, and a stand-in must carry the version its tag names."
        )
    if "ubuntu" in name or "alpine" in name:
        return (
            f"No stand-in is made for {name}: only Debian's mirror serves base images here, and "
            "a Debian image tagged as another system would not be what the tag says."
        )
    return ""
