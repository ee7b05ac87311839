"""Who owns a sandbox: the labels on every container, network and volume a run makes (the job,
the attempt, the owning process), and the reaper that removes what a dead owner left."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

import docker
from docker.errors import APIError, NotFound

LABEL_OWNED = "benchflow.owned"
LABEL_HOST = "benchflow.host"
LABEL_PID = "benchflow.pid"
LABEL_PID_START = "benchflow.pid_start"
LABEL_JOB = "benchflow.job"
# the job folder, resolved: two jobs started in the same second on one machine share a name
LABEL_JOB_DIR = "benchflow.job_dir"
LABEL_ATTEMPT = "benchflow.attempt"


def pid_start(pid: int) -> str:
    """The kernel's start time of a live process: tells a live owner from a reused pid; "" for a
    process that is gone, or dead and not yet reaped by its parent (a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return ""
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return ""
    return fields[19]


def reap_orphans(client: docker.DockerClient) -> list[str]:
    """Remove containers of runs on this host whose owning process is gone; returns their ids."""
    return _remove(client, _owner_alive)


def remove_own(client: docker.DockerClient) -> list[str]:
    """Remove this process's containers (and networks, volumes): for a worker that holds no
    attempt, what it could not remove when it gave its attempts up."""
    me = str(os.getpid())
    return _remove(client, lambda labels: labels.get(LABEL_PID) != me)


def _remove(client: docker.DockerClient, keep: Callable[[dict[str, str]], bool]) -> list[str]:
    """Remove the containers of runs on this host, then their networks and volumes, but those
    whose labels `keep`; returns the containers' ids."""
    mine = [f"{LABEL_OWNED}=process", f"{LABEL_HOST}={socket.gethostname()}"]
    removed = []
    for c in client.api.containers(all=True, filters={"label": mine}):
        if keep(c.get("Labels") or {}):
            continue
        try:
            client.api.remove_container(c["Id"], force=True, v=True)
            removed.append(c["Id"])
        except (NotFound, APIError):
            pass
    # a multi-container sandbox's networks and volumes carry the same labels
    networks = client.api.networks(filters={"label": mine})
    volumes = (client.api.volumes(filters={"label": mine}) or {}).get("Volumes") or []
    for kind, items, remove in (
        ("Id", networks, client.api.remove_network),
        ("Name", volumes, lambda name: client.api.remove_volume(name, force=True)),
    ):
        for item in items:
            if keep(item.get("Labels") or {}):
                continue
            try:
                remove(item[kind])
            except (NotFound, APIError):
                pass  # still in use by a container of another owner: a later sweep takes it
    return removed


def _owner_alive(labels: dict[str, str]) -> bool:
    try:
        pid = int(labels.get(LABEL_PID, "0"))
    except ValueError:
        return False
    return pid > 0 and bool(pid_start(pid)) and pid_start(pid) == labels.get(LABEL_PID_START)


def owned_containers(
    client: docker.DockerClient, job_name: str | None = None, job_dir: str | None = None
) -> list[dict]:
    labels = [f"{LABEL_OWNED}=process"]
    if job_name:
        labels.append(f"{LABEL_JOB}={job_name}")
    if job_dir:
        labels.append(f"{LABEL_JOB_DIR}={job_dir}")
    return client.api.containers(all=True, filters={"label": labels})
