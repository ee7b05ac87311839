"""The Docker engine: is it answering, and if not, start dockerd in the background (no systemd here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable

import docker
import docker.errors

Log = Callable[[str], None]

DOCKERD_LOG = "/var/log/dockerd.log"
SETUP_HINT = "run scripts/setup.sh (installs docker.io and debootstrap, starts dockerd)"


class EngineUnavailable(RuntimeError):
    """The Docker engine does not answer and cannot be started from here."""


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def engine_running() -> bool:
    try:
        client = docker.from_env(timeout=5)
    except docker.errors.DockerException:
        return False
    try:
        return bool(client.ping())
    except Exception:
        return False
    finally:
        client.close()


def ensure_engine(log: Log = print) -> None:
    """Start dockerd in the background (there is no systemd here) and wait for it to answer."""
    if engine_running():
        return
    if shutil.which("dockerd") is None:
        raise EngineUnavailable(
            f"the Docker engine does not answer and dockerd is missing: {SETUP_HINT}"
        )
    log(f"starting dockerd in the background (log: {DOCKERD_LOG})")
    with open(DOCKERD_LOG, "ab") as out:
        cmd, null = ["nohup", "dockerd"], subprocess.DEVNULL
        proc = subprocess.Popen(cmd, stdout=out, stderr=out, stdin=null, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if engine_running():
            log("docker engine is up")
            return
        if proc.poll() is not None and not engine_running():
            raise EngineUnavailable(f"dockerd exited with {proc.returncode}; see {DOCKERD_LOG}")
        time.sleep(0.5)
    raise EngineUnavailable(f"dockerd did not answer within 60 s; see {DOCKERD_LOG}")
