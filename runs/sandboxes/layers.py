"""Agent files as a cached image layer over a task's image.

An agent's files (a CLI's native binary) are put once into a files-only image,
`benchflow-agent:<name>`, built from the host folder they were installed into. Each task
image then gets one layer on top, `FROM <task image>` + `COPY --from=benchflow-agent:<name>`,
tagged by the task image's id and the agent's name and version: built on the first trial
that needs it, reused by every later trial and run, rebuilt when the task image changes.
"""

from __future__ import annotations

import hashlib
import io
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import APIError, ImageNotFound

FILES_REPO = "benchflow-agent"
LAYERED_REPO = "benchflow-env"
LABEL_AGENT = "benchflow.agent"
LABEL_BASE = "benchflow.agent.task_image"  # the id of the task image a layer was built over (benchflow.base is taken)


class LayerError(Exception):
    """The agent's layer could not be built over the task's image."""


@dataclass(frozen=True)
class AgentLayer:
    """Host folder `source` copied to `target` in the sandbox; `name` holds the version."""

    name: str  # e.g. "claude-2.1.197": an image tag, so [A-Za-z0-9_.-] only
    source: Path
    target: str


def _build(client: docker.DockerClient, tag: str, labels: dict[str, str], **kwargs: object) -> None:
    error = None
    lines: list[str] = []
    try:
        for item in client.api.build(
            tag=tag, rm=True, forcerm=True, decode=True, labels=labels, **kwargs
        ):
            if "stream" in item:
                lines.append(item["stream"])
            if "error" in item:
                error = str(item["error"]).strip()
    except (APIError, OSError) as exc:
        error = str(exc)
    if error:
        tail = "".join(lines[-5:]).strip()
        raise LayerError(f"{error}" + (f" ({tail})" if tail else ""))


def files_image(client: docker.DockerClient, layer: AgentLayer) -> str:
    """The files-only image of the agent's folder, built once per agent version."""
    tag = f"{FILES_REPO}:{layer.name}"
    try:
        client.api.inspect_image(tag)
        return tag
    except ImageNotFound:
        pass
    if not layer.source.is_dir():
        raise LayerError(
            f"the agent's folder {layer.source} is missing; rerun so that it is installed again"
        )
    with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile") as dockerfile:
        # The Dockerfile lives outside the context: docker-py sends it beside the folder's files,
        # the whole folder as one tar to the engine's classic builder (nothing synced by name).
        dockerfile.write(f"FROM scratch\nCOPY . {layer.target}/\n")
        dockerfile.flush()
        _build(
            client,
            tag,
            {LABEL_AGENT: layer.name},
            path=str(layer.source),
            dockerfile=dockerfile.name,
        )
    return tag


def layered_tag(image_id: str, layer: AgentLayer, files_id: str) -> str:
    """Named by the ids of both images it is made of (the task's and the agent's files), so a
    layer is never reused over other files than its own."""
    key = f"{image_id}\n{files_id}\n{layer.name}\n{layer.target}"
    return f"{LAYERED_REPO}:{hashlib.sha256(key.encode()).hexdigest()[:16]}-{layer.name}"


class LayerCache:
    """Layered images of one job: each built once, under a lock per tag."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._done: dict[tuple[str, str], str] = {}

    def _lock_for(self, tag: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(tag, threading.Lock())

    def image_with(self, image: str, layer: AgentLayer) -> str:
        """`image` with the agent's layer on top; raises LayerError."""
        key = (image, layer.name)
        if key in self._done:
            return self._done[key]
        try:
            image_id = self.client.api.inspect_image(image)["Id"]
        except (ImageNotFound, APIError) as exc:
            raise LayerError(f"cannot read the task image {image}: {exc}") from exc
        with self._lock_for(f"{FILES_REPO}:{layer.name}"):  # one upload of the files per job
            source = files_image(self.client, layer)
        try:
            files_id = self.client.api.inspect_image(source)["Id"]
        except (ImageNotFound, APIError) as exc:
            raise LayerError(f"cannot read the agent's files image {source}: {exc}") from exc
        tag = layered_tag(image_id, layer, files_id)
        with self._lock_for(tag):
            if key not in self._done:
                try:
                    self.client.api.inspect_image(tag)
                except ImageNotFound:
                    # the engine's classic builder: the Dockerfile alone is sent, no context to sync
                    dockerfile = (
                        f"FROM {image}\nCOPY --from={source} {layer.target} {layer.target}\n"
                    )
                    _build(
                        self.client,
                        tag,
                        {LABEL_AGENT: layer.name, LABEL_BASE: image_id},
                        fileobj=io.BytesIO(dockerfile.encode()),
                    )
                self._done[key] = tag
        return self._done[key]
