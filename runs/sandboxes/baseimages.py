"""Offline stand-ins for the base images benchmarks use (no registry here): build and check them.

Debian bookworm is debootstrapped from the host's mirror, imported, and tagged under the FROM
names tasks use most that it can honestly carry: debian:bookworm[-slim], debian:12[-slim], and
python:3.11[-slim][-bookworm] (bookworm's Python is 3.11). A stand-in carries the version its tag
names: python:3.12[-slim] is made over Ubuntu 24.04, whose own Python it is (never tagged
-bookworm), none for 3.13 or Alpine, and a build that needs one says why. Ubuntu 24.04 and 22.04
come from the Ubuntu archive, verified (runs/sandboxes/ubuntu.py).
"""

from __future__ import annotations

import glob
import re
import shutil
import tempfile
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
    build_lock,
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
from runs.sandboxes.ubuntu import (
    NOBLE_PYTHON,
    RELEASE_LABEL,
    RELEASES,
    build_ubuntu_images,
    ubuntu_image_status,
)
from runs.sandboxes.ubuntu import PYTHON_TAGS as UBUNTU_PYTHON_TAGS

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
# Registries that serve Docker Hub's official images under another name, byte for byte (ECR
# Public's mirror of the library namespace): a stand-in answers to those names too.
MIRROR_PREFIXES = ("public.ecr.aws/docker/library/",)


def mirrored(tags: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(prefix + tag for prefix in MIRROR_PREFIXES for tag in tags)


def unmirrored(name: str) -> str:
    """An official image's name without the mirror it is named through."""
    for prefix in MIRROR_PREFIXES:
        if name.startswith(prefix):
            return name.removeprefix(prefix)
    return name


STAND_INS = (BASE_TAG, *DEBIAN_TAGS, *PYTHON_TAGS, *mirrored(DEBIAN_TAGS + PYTHON_TAGS))
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SECURITY_MIRROR = "http://deb.debian.org/debian-security"


# --- host facts -------------------------------------------------------------------------------


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


def _debootstrap_rootfs(client: DockerClient, log: Log) -> None:
    if shutil.which("debootstrap") is None:
        raise RuntimeError(f"debootstrap is not installed: {SETUP_HINT}")
    mirror, security = apt_mirrors()
    work = Path(tempfile.mkdtemp(prefix="benchflow-rootfs-", dir="/var/tmp"))
    rootfs, tarball = work / "rootfs", work / "rootfs.tar"
    try:
        include = "--include=ca-certificates,procps,coreutils"
        try:
            debootstrap(
                ["debootstrap", "--variant=minbase", include, "bookworm", str(rootfs), mirror], log
            )
        except RuntimeError as exc:
            raise RuntimeError(f"{exc} (mirror {mirror})") from None
        (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
        (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(
            f"Types: deb\nURIs: {mirror}\nSuites: bookworm bookworm-updates\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
            f"Types: deb\nURIs: {security}\nSuites: bookworm-security\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        )
        (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(DOCKER_CLEAN)
        changes = [
            f"LABEL {LABEL}=1 {VERSION_LABEL}={BASE_VERSION}",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD ["bash"]',
        ]
        import_rootfs(client, rootfs, tarball, ROOTFS_TAG, changes, log)
    finally:
        remove_tree(work, log)


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


# Bump when the python recipe below changes: only the python stand-in is rebuilt.
PYTHON_RECIPE = 2
PYTHON_RECIPE_LABEL = "benchflow.base.python_recipe"
# {base_id} pins the python image to the base it was built on (see _build_locked). The standard
# library's entries are linked into /usr/local/lib/python3.11, where the official image keeps
# them (Debian keeps them in /usr/lib/python3.11): tasks that load a module by that path work.
PYTHON_DOCKERFILE = f"""FROM {BASE_TAG}
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      python3 python3-pip python3-venv \\
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \\
 && ln -sf /usr/bin/python3 /usr/local/bin/python \\
 && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED \\
 && mkdir -p /usr/local/lib/python3.11 \\
 && for f in /usr/lib/python3.11/*; do ln -s "$f" /usr/local/lib/python3.11/; done \\
 && pip --version
ENV PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
LABEL {FROM_LABEL}="{{base_id}}" {PYTHON_RECIPE_LABEL}="{PYTHON_RECIPE}" benchflow.base.python="3.11" benchflow.base.note="Debian bookworm python3 (3.11), standing in for python:3.11 images"
CMD ["python3"]
"""


def build_base_images(client: DockerClient, *, force: bool = False, log: Log = print) -> list[str]:
    """Build (or refresh) the stand-in images; returns the tags that were (re)built or re-tagged."""
    with build_lock():
        return _build_locked(client, force=force, log=log)


def build_ubuntu(client: DockerClient, *, force: bool = False, log: Log = print) -> list[str]:
    """Build (or refresh) the ubuntu:24.04 and ubuntu:22.04 stand-ins (runs/sandboxes/ubuntu.py);
    raises UbuntuArchiveError when the Ubuntu archive cannot be reached or does not verify."""
    with build_lock():
        built = build_ubuntu_images(client, force=force, log=log)
    log(f"ubuntu images: {'built ' + ', '.join(built) if built else 'all current, nothing built'}")
    return built


def _build_locked(client: DockerClient, *, force: bool, log: Log) -> list[str]:
    ca_files = host_ca_files()
    ca = ca_digest(ca_files)
    built: list[str] = []
    if force or not is_current(labels_of(client, ROOTFS_TAG), BASE_VERSION):
        _debootstrap_rootfs(client, log)
        built.append(ROOTFS_TAG)
    if built or not is_current(labels_of(client, BASE_TAG), BASE_VERSION, ca):
        files = {f"ca/{p.name}": p.read_bytes() for p in ca_files}
        build(client, BASE_TAG, _base_dockerfile(ca_files, ca), files, log)
        built.append(BASE_TAG)
    base = client.images.get(BASE_TAG)
    for tag in DEBIAN_TAGS + mirrored(DEBIAN_TAGS):
        built += retag(client, base, tag, log)
    first, *others = PYTHON_TAGS
    labels = labels_of(client, first)
    if is_foreign(labels):
        log(f"keeping {first}: it is a real image, not a stand-in")
    elif (
        not is_current(labels, BASE_VERSION, ca)
        or (labels or {}).get(FROM_LABEL) != base.id
        or (labels or {}).get(PYTHON_RECIPE_LABEL) != str(PYTHON_RECIPE)
    ):
        build(client, first, PYTHON_DOCKERFILE.format(base_id=base.id), {}, log)
        built.append(first)
    python = client.images.get(first)
    for tag in (*others, *mirrored(PYTHON_TAGS)):
        built += retag(client, python, tag, log)
    for tag in UNTRUTHFUL_TAGS:
        _drop_untruthful(client, tag, log)
    log(f"base images: {'built ' + ', '.join(built) if built else 'all current, nothing built'}")
    return built


# Tags an older version of this module made that name another version than they hold.
UNTRUTHFUL_TAGS = ("python:3.12-slim",)


def _drop_untruthful(client: DockerClient, tag: str, log: Log) -> None:
    labels = labels_of(client, tag)
    if labels is not None and (why := untruthful(tag, labels)):
        client.images.remove(tag, noprune=True)  # the tag only; the image stays under its others
        log(f"removed the tag {tag}: {why}")


def base_image_status(client: DockerClient) -> dict[str, str]:
    """Each stand-in tag -> "current", "stale", "missing" or "foreign" (a real image we keep)."""
    ca = ca_digest(host_ca_files())
    status: dict[str, str] = {}
    for tag in STAND_INS:
        labels = labels_of(client, tag)
        if labels is None:
            status[tag] = "missing"
        elif is_foreign(labels):
            status[tag] = "foreign"
        else:
            current = is_current(labels, BASE_VERSION, ca)
            if "benchflow.base.python" in labels and current:  # the python recipe's own version
                current = labels.get(PYTHON_RECIPE_LABEL) == str(PYTHON_RECIPE)
            status[tag] = "current" if current else "stale"
    return status


def local_base_images(client: DockerClient) -> list[str]:
    """The stand-in tags present locally (a real image under the same name counts)."""
    status = {**base_image_status(client), **ubuntu_image_status(client)}
    return [tag for tag, state in status.items() if state != "missing" and unmirrored(tag) == tag]


_PYTHON_TAG = re.compile(r"(?:.*/)?python:(\d+\.\d+)")
_UBUNTU_TAG = re.compile(r"(?:docker\.io/)?(?:library/)?ubuntu(?::(.+))?$")


def untruthful(tag: str, labels: dict[str, str] | None) -> str | None:
    """Why a local image under `tag` is a stand-in that does not carry the version its tag names
    (an older `bench doctor` tagged Debian's Python 3.11 as python:3.12-slim), else None."""
    if not labels or LABEL not in labels:
        return None  # a real image, loaded by someone: it is what it says
    named = _PYTHON_TAG.match(tag)
    held = labels.get("benchflow.base.python")
    if named and held and named.group(1) != held:
        return f"the local {tag} is a stand-in holding Python {held}, not {named.group(1)}, so it is not used"
    ubuntu = _UBUNTU_TAG.match(tag)
    release = next(
        (r for r in RELEASES if ubuntu and ubuntu.group(1) in (r.version, r.codename)), None
    )
    uv = labels.get("benchflow.base.uv")
    if uv and not tag.endswith(f":{uv}"):
        return f"the local {tag} is a stand-in holding uv {uv}, so it is not used"
    held = labels.get(RELEASE_LABEL)
    if ubuntu and (release is None or held != release.version):
        return (
            f"the local {tag} is a stand-in holding Ubuntu {held or 'nothing'}, so it is not used"
        )
    return None


def no_stand_in_reason(name: str) -> str:
    """Why no offline stand-in exists for the image `name`."""
    name = unmirrored(name)
    python = _PYTHON_TAG.match(name)
    bare = name.removeprefix("docker.io/").removeprefix("library/")
    if python and bare in PYTHON_TAGS + UBUNTU_PYTHON_TAGS:
        return (
            "Its stand-in is built by `bench doctor --fix` (or `scripts/setup.sh`); if that "
            "failed, `bench doctor` says why."
        )
    if python:
        made = ", ".join(PYTHON_TAGS + UBUNTU_PYTHON_TAGS)
        return (
            f"No stand-in is made for {name}: the bases built offline here hold Python "
            f"{BOOKWORM_PYTHON} (Debian bookworm) and {NOBLE_PYTHON} (Ubuntu 24.04) only, made "
            f"as {made}; a stand-in must carry the version (and system) its tag names."
        )
    ubuntu = _UBUNTU_TAG.match(name)
    if ubuntu and any(ubuntu.group(1) in (r.version, r.codename) for r in RELEASES):
        return (
            "Its stand-in is built from the Ubuntu archive by `bench doctor --fix` (or "
            "`scripts/setup.sh`); if that failed, `bench doctor` says why."
        )
    if ubuntu:
        made = " and ".join(r.tags[0] for r in RELEASES)
        return (
            f"No stand-in is made for {name}: only {made} are built here (from the Ubuntu "
            "archive), each tagged only with the release it holds."
        )
    if name.removeprefix("docker.io/").startswith("ghcr.io/astral-sh/uv:"):
        from runs.sandboxes.uvimage import uv_version_of

        version = uv_version_of(name)
        if version:
            return (
                f"Its stand-in (uv {version}'s two binaries, from its wheel on PyPI) is built by "
                f"`bench doctor --fix --uv {version}`."
            )
        return (
            f"No stand-in is made for {name}: the tag names no exact uv version. Pin one in the "
            "Dockerfile (ghcr.io/astral-sh/uv:0.8.15) and build its stand-in with `bench doctor "
            "--fix --uv 0.8.15`."
        )
    if "laude-institute/t-bench/" in name:
        return (
            f"No stand-in is made for {name}: Terminal-Bench's base images are built from its "
            "own Dockerfiles, which this machine has no copy of to rebuild faithfully (load the "
            "image with `docker load`, or build it from terminal-bench's docker/base-images/ on "
            "the ubuntu:24.04 stand-in and tag it yourself)."
        )
    if "alpine" in name:
        return (
            f"No stand-in is made for {name}: Alpine's packages are not served here, and a "
            "Debian image tagged as another system would not be what the tag says."
        )
    return ""
