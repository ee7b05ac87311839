"""Task images: each task's environment built once per build context and base image, and the
agent's layer over it; a second run builds nothing."""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker
from docker.errors import APIError, ImageNotFound

from runs.sandboxes.layers import AgentLayer, LayerCache
from runs.tasks.load import Task
from runs.tasks.load import environment_digest as task_environment_digest

IMAGE_REPO = "benchflow-env"


class ImageBuildError(Exception):
    """The task's image could not be built (a task or setup problem)."""


def prebuilt_or_build(task: Task, client: docker.DockerClient) -> tuple[str | None, str]:
    """(the prebuilt image to run, or None to build environment/Dockerfile; why, when both exist).

    Harbor and BenchFlow run a task's docker_image as is and skip its Dockerfile (unless told to
    force a build); they pull the image. Nothing can be pulled here, so an image absent locally
    means the Dockerfile is built, as Harbor's --force-build does. An image that is the
    Dockerfile's own FROM is a base, not a build of the task: the Dockerfile is built on it.
    """
    from runs.sandboxes.dockerfile_refs import base_image_refs

    image = task.sandbox.docker_image
    if not image or task.environment_dir is None:
        return image, ""
    dockerfile = (task.environment_dir / "Dockerfile").read_text(errors="replace")
    if image in base_image_refs(dockerfile):
        return None, (
            f"docker_image {image} is the Dockerfile's own FROM image, not a build of the task: "
            "environment/Dockerfile is built on it"
        )
    try:
        client.api.inspect_image(image)
    except (ImageNotFound, APIError):
        return None, (
            f"docker_image {image} is not present locally and no registry is reachable: "
            "environment/Dockerfile is built instead (as harbor --force-build would)"
        )
    return image, (
        f"docker_image {image} is present locally and runs as is; environment/Dockerfile is "
        "not built (as Harbor does without --force-build)"
    )


@dataclass
class TaskImages:
    """The images of one job's sandboxes; safe to call from several threads at once."""

    client: docker.DockerClient
    _build_locks: dict[str, threading.Lock] = field(default_factory=dict)
    _locks_guard: threading.Lock = field(default_factory=threading.Lock)
    _resolved: dict[str, str] = field(default_factory=dict)
    _sidecars: dict[Path, str] = field(default_factory=dict)
    _layers: LayerCache | None = None

    def with_layer(self, image: str, layer: AgentLayer) -> str:
        """`image` with the agent's files layered on top (built once); raises LayerError."""
        if self._layers is None:
            self._layers = LayerCache(self.client)
        return self._layers.image_with(image, layer)

    def image_for(self, task: Task, environment_digest: str, build_log: Path | None = None) -> str:
        """The task's image, built once per build context and base image (a second run builds nothing)."""
        prebuilt, _why = prebuilt_or_build(task, self.client)
        if prebuilt:
            self._require_image(prebuilt)
            return prebuilt
        with self._locks_guard:
            if environment_digest in self._resolved:
                return self._resolved[environment_digest]
            lock = self._build_locks.setdefault(environment_digest, threading.Lock())
        with lock:
            if environment_digest in self._resolved:
                return self._resolved[environment_digest]
            tag = self._tag(task, environment_digest)
            try:
                self.client.api.inspect_image(tag)
            except ImageNotFound:
                self._build(task, tag, build_log)
            self._resolved[environment_digest] = tag
        return tag

    def _tag(self, task: Task, environment_digest: str) -> str:
        """Named by the build context's digest and the ids of its FROM images: tasks sharing a
        context share the image, and a rebuilt base image invalidates it."""
        from runs.sandboxes.dockerfile_refs import base_image_refs

        assert task.environment_dir is not None
        digest = hashlib.sha256(environment_digest.encode())
        for ref in base_image_refs(
            (task.environment_dir / "Dockerfile").read_text(errors="replace")
        ):
            try:
                digest.update(self.client.api.inspect_image(ref)["Id"].encode())
            except (ImageNotFound, APIError):
                digest.update(ref.encode())
        return f"{IMAGE_REPO}:{digest.hexdigest()[:16]}"

    def sidecar_tag(self, task: Task) -> str:
        """The name the task's sidecar images are built under (with -<service> after it): by its
        environment/'s digest, so that every attempt of it, and a second run, reuse them."""
        with self._locks_guard:
            if task.path not in self._sidecars:
                digest = hashlib.sha256(task_environment_digest(task).encode()).hexdigest()[:16]
                self._sidecars[task.path] = f"{IMAGE_REPO}:{digest}-sidecar"
            return self._sidecars[task.path]

    def image_workdir(self, image: str) -> str:
        """The image's WORKDIR (the agent's working folder when the task sets none); / if unset."""
        config = self.client.api.inspect_image(image).get("Config") or {}
        return config.get("WorkingDir") or "/"

    def _require_image(self, name: str) -> None:
        from runs.sandboxes.baseimages import local_base_images
        from runs.sandboxes.dockerfile_refs import explain_missing_images, missing_base_images

        if missing_base_images(f"FROM {name}\n", self.client):
            raise ImageBuildError(explain_missing_images([name], local_base_images(self.client)))

    def _build(self, task: Task, tag: str, build_log: Path | None) -> None:
        assert task.environment_dir is not None
        dockerfile = task.environment_dir / "Dockerfile"
        from runs.sandboxes.baseimages import local_base_images
        from runs.sandboxes.dockerfile_refs import explain_missing_images, missing_base_images

        missing = missing_base_images(dockerfile.read_text(errors="replace"), self.client)
        if missing:
            available = local_base_images(self.client)
            raise ImageBuildError(
                f"image build failed for task {task.name}: "
                + explain_missing_images(missing, available)
            )
        from runs.sandboxes import buildkit

        text = dockerfile.read_text(errors="replace")
        if buildkit.available():
            outcome = buildkit.build(
                task.environment_dir,
                text,
                tag,
                {"benchflow.task": task.name},
                task.sandbox.build_timeout_sec,
            )
            log, error, line = outcome.log, outcome.error, outcome.line
        else:
            log, error, line = self._classic_build(task, tag, text)
        if build_log is not None:
            build_log.parent.mkdir(parents=True, exist_ok=True)
            build_log.write_text(log + (f"\nERROR: {error}\n" if error else ""))
        if error:
            at = f", line {line}" if line else ""
            tail = "\n".join(log.strip().splitlines()[-8:])
            raise ImageBuildError(
                f"image build failed for task {task.name} ({dockerfile}{at}): {error}"
                + (f"\n{tail}" if tail else "")
            )

    def _classic_build(self, task: Task, tag: str, text: str) -> tuple[str, str | None, int | None]:
        """The engine's classic builder (no BuildKit on this machine): a Dockerfile using a
        feature only BuildKit has fails here, naming its line."""
        from runs.sandboxes.buildkit import buildkit_only_line

        if found := buildkit_only_line(text):
            number, what = found
            return (
                "",
                f"{what} needs BuildKit (the docker CLI with its buildx plugin), which this machine "
                "lacks; fix: run scripts/setup.sh (installs docker-buildx), or rewrite the line",
                number,
            )
        lines: list[str] = []
        deadline = time.monotonic() + task.sandbox.build_timeout_sec
        error = None
        try:
            for item in self.client.api.build(
                path=str(task.environment_dir),
                tag=tag,
                rm=True,
                forcerm=True,
                decode=True,
                labels={"benchflow.task": task.name},
                timeout=task.sandbox.build_timeout_sec,
            ):
                if "stream" in item:
                    lines.append(item["stream"])
                if "error" in item:
                    error = item["error"].strip()
                if time.monotonic() > deadline:
                    error = f"the build took longer than build_timeout_sec={task.sandbox.build_timeout_sec:g}"
                    break
        except (APIError, OSError) as exc:
            error = str(exc)
        return "".join(lines), error, None
