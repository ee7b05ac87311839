"""`bench doctor [--fix]`: check (and with --fix, repair) what trials need on this machine."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from typing import Any, TextIO

import docker
import docker.errors
from docker import DockerClient

from runs.sandboxes.baseimages import (
    BASE_VERSION,
    base_image_status,
    build_base_images,
    build_ubuntu,
)
from runs.sandboxes.engine import (
    DOCKERD_LOG,
    SETUP_HINT,
    EngineUnavailable,
    Log,
    docker_host,
    ensure_engine,
)
from runs.sandboxes.rootfs import HOST_CA_BUNDLE, HOST_CA_GLOB, host_ca_files
from runs.sandboxes.ubuntu import (
    UBUNTU_VERSION,
    UbuntuArchiveError,
    archive_unreachable,
    ubuntu_image_status,
)


@dataclass
class Check:
    name: str
    status: str  # "PASS" | "WARN" | "FAIL"
    detail: str
    fix: str = ""


def doctor_checks(
    client_or_none: DockerClient | None, *, fix: bool, log: Log = print, uv: tuple[str, ...] = ()
) -> list[Check]:
    """Engine, base images, disk and CA checks; with fix=True start the engine and build images
    (and the uv stand-ins of the versions in `uv`)."""
    checks: list[Check] = []
    client, error, info = client_or_none, "", {}
    if client is None or not _pings(client):
        try:
            if fix:
                ensure_engine(log)
            client = docker.from_env()
            client.ping()
        except (docker.errors.DockerException, EngineUnavailable) as exc:
            client, error = None, str(exc).splitlines()[0]
    if client is None:
        checks.append(
            Check(
                "docker engine",
                "FAIL",
                f"not reachable at {docker_host()}: {error}",
                f"start it with `bench doctor --fix` (or `nohup dockerd >{DOCKERD_LOG} 2>&1 &`); "
                f"if it is not installed, {SETUP_HINT}",
            )
        )
        unchecked = "not checked: the engine is not reachable"
        checks.append(Check("base images", "WARN", unchecked, "start the engine first"))
        checks.append(Check("ubuntu base images", "WARN", unchecked, "start the engine first"))
    else:
        version = client.version()
        info = client.info()
        checks.append(
            Check(
                "docker engine",
                "PASS",
                f"{version.get('Version', '?').split('+')[0]} at {docker_host()}",
            )
        )
        checks.append(_version_check(version, info))
        checks.append(_images_check(client, fix, log))
        checks.append(_ubuntu_check(client, fix, log))
        checks.append(_uv_check(client, uv if fix else (), log))
        checks.append(agent_images_check(client, fix))
    root = str(info.get("DockerRootDir", "/var/lib/docker"))
    checks.append(_disk_check(f"disk space (docker root {root})", root))
    checks.append(_disk_check(f"disk space ({os.getcwd()})", os.getcwd()))
    ca_files = host_ca_files()
    bundle = "present" if os.path.exists(HOST_CA_BUNDLE) else "absent"
    checks.append(
        Check(
            "host CA bundle",
            "PASS",
            f"{len(ca_files)} extra CA file(s) in {os.path.dirname(HOST_CA_GLOB)}"
            f"{' (baked into the base images)' if ca_files else ''}; {HOST_CA_BUNDLE} {bundle}",
        )
    )
    return checks


def _pings(client: DockerClient) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


def _version_check(version: dict[str, Any], info: dict[str, Any]) -> Check:
    api = tuple(int(p) for p in str(version.get("ApiVersion", "0.0")).split(".")[:2])
    detail = (
        f"API {version.get('ApiVersion')}, storage {info.get('Driver')}, "
        f"cgroup v{info.get('CgroupVersion', '?')}"
    )
    if api < (1, 24):
        return Check(
            "engine version", "FAIL", detail + " (docker-py 7 needs API 1.24+)", "upgrade docker.io"
        )
    if api < (1, 41):
        return Check(
            "engine version", "WARN", detail + " (older than Docker 20.10)", "upgrade docker.io"
        )
    return Check("engine version", "PASS", detail)


def _images_check(client: DockerClient, fix: bool, log: Log) -> Check:
    status = base_image_status(client)
    if fix and any(s in ("missing", "stale") for s in status.values()):
        try:
            build_base_images(client, log=log)
        except Exception as exc:  # report, don't crash the doctor
            return Check("base images", "FAIL", f"building failed: {exc}", SETUP_HINT)
        status = base_image_status(client)
    missing = [t for t, s in status.items() if s == "missing"]
    stale = [t for t, s in status.items() if s == "stale"]
    if missing:
        return Check(
            "base images",
            "FAIL",
            f"missing: {', '.join(missing)}",
            "build them with `bench doctor --fix` (debootstrap, about a minute)",
        )
    if stale:
        return Check(
            "base images",
            "WARN",
            f"older recipe than v{BASE_VERSION} or CA changed: {', '.join(stale)}",
            "rebuild them with `bench doctor --fix`",
        )
    return Check("base images", "PASS", f"v{BASE_VERSION}: {', '.join(status)}")


def _ubuntu_check(client: DockerClient, fix: bool, log: Log) -> Check:
    """ubuntu:24.04 and ubuntu:22.04, built from the Ubuntu archive (verified) by --fix."""
    status = ubuntu_image_status(client)
    if fix and any(s in ("missing", "stale") for s in status.values()):
        try:
            build_ubuntu(client, log=log)
        except UbuntuArchiveError as exc:
            return Check("ubuntu base images", "FAIL", f"not built: {exc}", UBUNTU_FIX)
        except Exception as exc:  # report, don't crash the doctor
            return Check("ubuntu base images", "FAIL", f"building failed: {exc}", SETUP_HINT)
        status = ubuntu_image_status(client)
    missing = [t for t, s in status.items() if s == "missing"]
    stale = [t for t, s in status.items() if s == "stale"]
    if missing or stale:
        why = archive_unreachable()
        parts = [f"missing: {', '.join(missing)}"] if missing else []
        parts += [f"older recipe or CA changed: {', '.join(stale)}"] if stale else []
        fix_text = (
            UBUNTU_FIX
            if why
            else (
                "build them with `bench doctor --fix` (debootstrap from the Ubuntu archive, "
                "about a minute each)"
            )
        )
        detail = "; ".join(parts + ([why] if why else []))
        return Check("ubuntu base images", "FAIL" if missing else "WARN", detail, fix_text)
    return Check("ubuntu base images", "PASS", f"v{UBUNTU_VERSION}: {', '.join(status)}")


def _uv_check(client: DockerClient, versions: tuple[str, ...], log: Log) -> Check:
    """The ghcr.io/astral-sh/uv stand-ins here; those of `versions` built (runs/sandboxes/uvimage.py)."""
    from runs.sandboxes.uvimage import UV_VERSION_LABEL, UvImageError, build_uv_image

    failed = []
    for version in versions:
        try:
            build_uv_image(client, version, log)
        except UvImageError as exc:
            failed.append(str(exc))
        except Exception as exc:  # report, don't crash the doctor
            failed.append(f"uv {version}: {exc}")
    images = client.images.list(filters={"label": UV_VERSION_LABEL})
    have = sorted(t for i in images for t in i.tags)
    detail = f"stand-ins: {', '.join(have)}" if have else "no stand-in built"
    fix_text = "`bench doctor --fix --uv VERSION` builds ghcr.io/astral-sh/uv:VERSION from uv's wheel on PyPI"
    if failed:
        return Check("uv images", "FAIL", f"{detail}; {'; '.join(failed)}", fix_text)
    return Check("uv images", "PASS", f"{detail} (tasks that COPY --from one: {fix_text})")


UBUNTU_FIX = (
    "let this machine reach http://archive.ubuntu.com/ubuntu (a proxy in http_proxy works), then "
    "run `bench doctor --fix`; tasks FROM ubuntu:24.04 or 22.04 cannot be built until then"
)


def agent_images_check(client: DockerClient, fix: bool) -> Check:
    """Agent CLI layers (runs/sandboxes/layers.py). Two kinds are never used again, so --fix
    removes them: those of CLI versions or layouts no longer pinned (CliSpec.layer_name), and those
    over a task image that has since been rebuilt (its old image has no tag left). The rest are
    rebuilt on demand anyway."""
    from runs.agents.install import SPECS
    from runs.sandboxes.layers import LABEL_AGENT, LABEL_BASE

    pinned = {spec.layer_name for spec in SPECS.values()}
    images = client.images.list(filters={"label": LABEL_AGENT})
    old = [i for i in images if i.labels.get(LABEL_AGENT) not in pinned]
    orphans = [
        i for i in images if i not in old and not _base_tagged(client, i.labels.get(LABEL_BASE))
    ]
    stale = old + orphans
    own = _own_sizes(client)
    removed, freed, failed = 0, 0, []
    if fix:
        for image in stale:
            try:
                for ref in image.tags or [image.id]:
                    client.images.remove(ref, force=False, noprune=False)
                removed += 1
                freed += own.get(image.id, 0)
            except docker.errors.APIError as exc:  # in use by a container, say
                failed.append(
                    f"{image.tags[0] if image.tags else image.short_id}: {exc.explanation or exc}"
                )
    kept = [i for i in images if i not in stale]
    detail = f"{len(kept)} image(s) in use ({', '.join(sorted(pinned))})" + _size_text(
        own, kept, "holding"
    )
    if removed:
        detail += f"; removed {removed} no longer used" + _size_text(own, [], "freeing", freed)
    if failed:
        return Check(
            "agent layers",
            "WARN",
            detail + "; could not remove: " + "; ".join(failed),
            "stop the containers using them, then rerun `bench doctor --fix`",
        )
    if stale and not fix:
        versions = sorted({str(i.labels.get(LABEL_AGENT)) for i in old})
        parts = (
            [f"{len(old)} of CLI versions no longer pinned ({', '.join(versions)})"] if old else []
        )
        if orphans:
            parts.append(f"{len(orphans)} over task images since rebuilt")
        return Check(
            "agent layers",
            "WARN",
            detail + "; no longer used: " + ", ".join(parts) + _size_text(own, stale, "holding"),
            "remove them with `bench doctor --fix` (each holds a copy of its CLI)",
        )
    return Check("agent layers", "PASS", detail)


def _own_sizes(client: DockerClient) -> dict[str, int]:
    """Bytes each image holds that no other image shares (what removing it frees), by id;
    empty when the engine cannot say."""
    try:
        usage = client.df()
    except (docker.errors.APIError, OSError):
        return {}
    sizes: dict[str, int] = {}
    for item in usage.get("Images") or ():
        size, shared = item.get("Size"), item.get("SharedSize")
        if isinstance(size, int) and isinstance(shared, int) and shared >= 0:
            sizes[item.get("Id", "")] = max(size - shared, 0)
    return sizes


def _size_text(own: dict[str, int], images: list[Any], verb: str, total: int | None = None) -> str:
    """ ", holding 1.2 GB" for the images' own disk use, or "" when it is not known."""
    if total is None:
        if not images or not own or any(i.id not in own for i in images):
            return ""
        total = sum(own[i.id] for i in images)
    if not own:
        return ""
    return f", {verb} {total / 1e9:.1f} GB" if total >= 1e9 else f", {verb} {total / 1e6:.0f} MB"


def _base_tagged(client: DockerClient, base_id: str | None) -> bool:
    """Whether the task image a layer was built over still has a tag (unknown: assume so)."""
    if not base_id:
        return True  # built before the base was recorded
    try:
        return bool(client.api.inspect_image(base_id).get("RepoTags"))
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.APIError:
        return True


def _disk_check(name: str, path: str) -> Check:
    try:
        free = shutil.disk_usage(path).free / 2**30
    except OSError as exc:
        return Check(name, "WARN", f"cannot read: {exc}", "check the path exists and is readable")
    detail = f"{free:.1f} GB free"
    if free < 2:
        return Check(name, "FAIL", detail, "free space: `docker system prune` or delete old runs")
    if free < 10:
        return Check(
            name, "WARN", detail + " (under 10 GB)", "`docker system prune` or delete old runs"
        )
    return Check(name, "PASS", detail)


def run_doctor(fix: bool, out: TextIO = sys.stdout, uv: tuple[str, ...] = ()) -> int:
    """Print one line per check (and a fix line for each non-PASS); 1 if anything FAILs."""

    def log(line: str) -> None:
        print(f"      {line}", file=out, flush=True)

    checks = doctor_checks(None, fix=fix, log=log, uv=uv)
    for check in checks:
        print(f"{check.status:<4}  {check.name}: {check.detail}", file=out)
        if check.status != "PASS" and check.fix:
            print(f"      fix: {check.fix}", file=out)
    out.flush()
    return 1 if any(c.status == "FAIL" for c in checks) else 0
