"""Offline stand-ins for ubuntu:24.04 (noble) and ubuntu:22.04 (jammy), debootstrapped from the
Ubuntu archive with its Release files verified.

No registry is reachable here, but the Ubuntu archive is. debootstrap checks the archive's
Release signatures against Ubuntu's archive keyring, which comes from the archive itself (the
`ubuntu-keyring` package) and is checked against SHA-256 sums pinned below before it is trusted.
The image is then upgraded from the release's -updates and -security pockets, as Docker's
official ubuntu images are rebuilt with them, gets the host's CA files, and is tagged only with
the names of the release it holds.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from docker import DockerClient

from runs.sandboxes.engine import SETUP_HINT, Log
from runs.sandboxes.rootfs import (
    CA_LABEL,
    DOCKER_CLEAN,
    FROM_LABEL,
    HOST_CA_BUNDLE,
    LABEL,
    VERSION_LABEL,
    build,
    ca_digest,
    debootstrap,
    host_ca_files,
    import_rootfs,
    is_current,
    is_foreign,
    labels_of,
    remove_tree,
    retag,
)

# Bump when a recipe below changes: images at an older version get rebuilt.
UBUNTU_VERSION = 1
MIRROR = "http://archive.ubuntu.com/ubuntu"
SECURITY_MIRROR = "http://security.ubuntu.com/ubuntu"
# Ubuntu's archive keyring, from the archive: the package's and the keyring's own sums, pinned.
# The keyring file is byte for byte the one in Debian trixie's ubuntu-keyring 2023.11.28.1-0.2,
# which Debian's own signed archive serves (checked when these sums were taken).
KEYRING_DEB = f"{MIRROR}/pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb"
KEYRING_DEB_SHA256 = "36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8"
KEYRING_PATH = "usr/share/keyrings/ubuntu-archive-keyring.gpg"
KEYRING_SHA256 = "80a36b0a6de2f69f49d2df75ef473ccde121e9e190b9ea01d20a4f63778d5c31"
RELEASE_LABEL = "benchflow.base.ubuntu"
CACHE = Path.home() / ".cache" / "benchflow-site" / "ubuntu-keyring"


@dataclass(frozen=True)
class Release:
    codename: str
    version: str  # what the image holds, and the only version its tags name
    deb822: bool  # noble keeps its sources in ubuntu.sources; jammy in sources.list
    default_user: bool  # noble's official image has an `ubuntu` user (uid 1000)

    @property
    def tags(self) -> tuple[str, ...]:
        return (f"ubuntu:{self.version}", f"ubuntu:{self.codename}")

    @property
    def rootfs_tag(self) -> str:
        return f"benchflow/rootfs:{self.codename}"


RELEASES = (Release("noble", "24.04", True, True), Release("jammy", "22.04", False, False))
# Python 3.12 is Ubuntu 24.04's own: the one base here that holds it. Tagged python:3.12[-slim]
# only (never -bookworm: Debian's own 3.12 is not this), labelled with the OS it runs on.
NOBLE_PYTHON = "3.12"
PYTHON_TAGS = ("python:3.12-slim", "python:3.12")
UBUNTU_TAGS = (*(tag for r in RELEASES for tag in r.tags), *PYTHON_TAGS)


class UbuntuArchiveError(RuntimeError):
    """The Ubuntu archive could not be reached, or what it served did not verify."""


def archive_unreachable(timeout: float = 15) -> str | None:
    """Why the Ubuntu archive cannot be used from here, or None when it answers."""
    try:
        with urllib.request.urlopen(f"{MIRROR}/dists/noble/Release", timeout=timeout) as reply:
            reply.read(64)
    except (urllib.error.URLError, OSError) as exc:
        return f"the Ubuntu archive ({MIRROR}) cannot be reached from this machine: {exc}"
    return None


def keyring(log: Log) -> Path:
    """Ubuntu's archive keyring, fetched once from the archive and checked against the pins."""
    target = CACHE / KEYRING_SHA256 / "ubuntu-archive-keyring.gpg"
    if target.is_file() and _sha256(target.read_bytes()) == KEYRING_SHA256:
        return target
    log(f"fetching {KEYRING_DEB}")
    try:
        with urllib.request.urlopen(KEYRING_DEB, timeout=60) as reply:
            deb = reply.read()
    except (urllib.error.URLError, OSError) as exc:
        raise UbuntuArchiveError(
            f"the Ubuntu archive ({MIRROR}) cannot be reached from this machine ({exc}), so "
            "its keyring and packages cannot be fetched"
        ) from None
    if (got := _sha256(deb)) != KEYRING_DEB_SHA256:
        raise UbuntuArchiveError(
            f"{KEYRING_DEB} has SHA-256 {got}, not the pinned {KEYRING_DEB_SHA256}: not trusted"
        )
    with tempfile.TemporaryDirectory(prefix="benchflow-keyring-") as folder:
        (Path(folder) / "k.deb").write_bytes(deb)
        subprocess.run(["dpkg-deb", "-x", "k.deb", "x"], cwd=folder, check=True)
        data = (Path(folder) / "x" / KEYRING_PATH).read_bytes()
    if (got := _sha256(data)) != KEYRING_SHA256:
        raise UbuntuArchiveError(
            f"the keyring in {KEYRING_DEB} has SHA-256 {got}, not the pinned {KEYRING_SHA256}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sources(release: Release) -> tuple[str, str]:
    """(path in the image, content): the release, -updates and -security, as the official image."""
    suites = f"{release.codename} {release.codename}-updates {release.codename}-backports"
    security = f"{release.codename}-security"
    components = "main restricted universe multiverse"
    if release.deb822:
        keyring_file = "/usr/share/keyrings/ubuntu-archive-keyring.gpg"
        return "etc/apt/sources.list.d/ubuntu.sources", (
            f"Types: deb\nURIs: {MIRROR}\nSuites: {suites}\nComponents: {components}\n"
            f"Signed-By: {keyring_file}\n\n"
            f"Types: deb\nURIs: {SECURITY_MIRROR}\nSuites: {security}\nComponents: {components}\n"
            f"Signed-By: {keyring_file}\n"
        )
    lines = [f"deb {MIRROR} {s} {components}" for s in suites.split()]
    return "etc/apt/sources.list", "\n".join(
        [*lines, f"deb {SECURITY_MIRROR} {security} {components}", ""]
    )


def _rootfs(client: DockerClient, release: Release, keyring_file: Path, log: Log) -> None:
    if shutil.which("debootstrap") is None:
        raise RuntimeError(f"debootstrap is not installed: {SETUP_HINT}")
    work = Path(tempfile.mkdtemp(prefix=f"benchflow-{release.codename}-", dir="/var/tmp"))
    rootfs, tarball = work / "rootfs", work / "rootfs.tar"
    # Debian 12's debootstrap predates noble: every Ubuntu release uses the same ("gutsy") script
    script = Path("/usr/share/debootstrap/scripts/gutsy")
    try:
        cmd = [
            "debootstrap",
            "--variant=minbase",
            f"--keyring={keyring_file}",
            "--include=ca-certificates",
            release.codename,
            str(rootfs),
            MIRROR,
        ]
        try:
            debootstrap([*cmd, str(script)] if script.is_file() else cmd, log)
        except RuntimeError as exc:
            raise UbuntuArchiveError(f"{exc} (archive {MIRROR})") from None
        path, text = _sources(release)
        (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
        (rootfs / path).write_text(text)
        (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(DOCKER_CLEAN)
        changes = [
            f"LABEL {LABEL}=1 {VERSION_LABEL}={UBUNTU_VERSION} {RELEASE_LABEL}={release.version}",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD ["/bin/bash"]',
        ]
        import_rootfs(client, rootfs, tarball, release.rootfs_tag, changes, log)
    finally:
        remove_tree(work, log)


def _dockerfile(release: Release, ca_files: list[Path], ca: str) -> str:
    certs = "COPY ca/ /usr/local/share/ca-certificates/\n" if ca_files else ""
    user = (
        " \\\n && useradd --create-home --uid 1000 --user-group --shell /bin/bash ubuntu"
        if release.default_user
        else ""
    )
    bundle = HOST_CA_BUNDLE
    return (
        f"FROM {release.rootfs_tag}\n{certs}"
        "RUN apt-get update \\\n"
        " && DEBIAN_FRONTEND=noninteractive apt-get upgrade -y \\\n"
        " && update-ca-certificates \\\n"
        f" && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin{user}\n"
        f"ENV SSL_CERT_FILE={bundle} REQUESTS_CA_BUNDLE={bundle} PIP_CERT={bundle} "
        f"NODE_EXTRA_CA_CERTS={bundle}\n"
        f"LABEL {LABEL}=1 {VERSION_LABEL}={UBUNTU_VERSION} {CA_LABEL}={ca} "
        f"{RELEASE_LABEL}={release.version} "
        f'benchflow.base.note="Ubuntu {release.version} ({release.codename}) minbase, '
        'debootstrapped from the Ubuntu archive with its Release files verified"\n'
        'CMD ["/bin/bash"]\n'
    )


PYTHON_DOCKERFILE = f"""FROM ubuntu:24.04
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      python3 python3-pip python3-venv \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \\
 && ln -sf /usr/bin/python3 /usr/local/bin/python \\
 && ln -sf /usr/bin/pip3 /usr/local/bin/pip \\
 && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED \\
 && userdel --remove ubuntu \\
 && python3 -c 'import sys; assert sys.version_info[:2] == (3, 12)' && pip --version
ENV PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 LANG=C.UTF-8
LABEL {FROM_LABEL}="{{base_id}}" benchflow.base.python="{NOBLE_PYTHON}" benchflow.base.note="Ubuntu 24.04's python3 ({NOBLE_PYTHON}), standing in for python:{NOBLE_PYTHON} images (which are Debian-based)"
CMD ["python3"]
"""


def build_ubuntu_images(
    client: DockerClient, *, force: bool = False, log: Log = print
) -> list[str]:
    """Build (or refresh) the Ubuntu stand-ins; returns the tags (re)built or re-tagged. Raises
    UbuntuArchiveError when the archive cannot be reached or does not verify."""
    ca_files = host_ca_files()
    ca = ca_digest(ca_files)
    built: list[str] = []
    wanted = [
        r
        for r in RELEASES
        if force or not all(_state(client, tag, ca) in ("current", "foreign") for tag in r.tags)
    ]
    if not wanted:
        return _python(client, ca, log)
    keyring_file = keyring(log)
    for release in wanted:
        fresh = force or not is_current(labels_of(client, release.rootfs_tag), UBUNTU_VERSION)
        if fresh:
            _rootfs(client, release, keyring_file, log)
            built.append(release.rootfs_tag)
        first, *others = release.tags
        labels = labels_of(client, first)
        if is_foreign(labels):
            log(f"keeping {first}: it is a real image, not a stand-in")
        elif fresh or not is_current(labels, UBUNTU_VERSION, ca):
            files = {f"ca/{p.name}": p.read_bytes() for p in ca_files}
            build(client, first, _dockerfile(release, ca_files, ca), files, log)
            built.append(first)
        image = client.images.get(first)
        for tag in others:
            built += retag(client, image, tag, log)
    built += _python(client, ca, log)
    return built


def _python(client: DockerClient, ca: str, log: Log) -> list[str]:
    """python:3.12[-slim] over the ubuntu:24.04 stand-in (rebuilt when that is)."""
    first, *others = PYTHON_TAGS
    labels, base = labels_of(client, first), client.images.get(RELEASES[0].tags[0])
    built = []
    if is_foreign(labels):
        log(f"keeping {first}: it is a real image, not a stand-in")
    elif (labels or {}).get(FROM_LABEL) != base.id or not is_current(labels, UBUNTU_VERSION):
        build(client, first, PYTHON_DOCKERFILE.format(base_id=base.id), {}, log)
        built.append(first)
    image = client.images.get(first)
    for tag in others:
        built += retag(client, image, tag, log)
    return built


def _state(client: DockerClient, tag: str, ca: str) -> str:
    labels = labels_of(client, tag)
    if labels is None:
        return "missing"
    if is_foreign(labels):
        return "foreign"
    return "current" if is_current(labels, UBUNTU_VERSION, ca) else "stale"


def ubuntu_image_status(client: DockerClient) -> dict[str, str]:
    """Each Ubuntu stand-in tag -> "current", "stale", "missing" or "foreign"."""
    ca = ca_digest(host_ca_files())
    return {tag: _state(client, tag, ca) for tag in UBUNTU_TAGS}
