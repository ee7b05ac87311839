"""Task images: each task's environment built once per build context and base image, and the
agent's layer over it; a second run builds nothing."""

from __future__ import annotations

import hashlib
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker
from docker.errors import APIError, ImageNotFound

from runs.sandboxes.build_context import BuildContext
from runs.sandboxes.layers import AgentLayer, LayerCache
from runs.tasks.load import Task

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


@dataclass(frozen=True)
class ImageSpec:
    """One image to build: a context folder and the Dockerfile in it (relative), for `what`
    (said in every error: "task x", "the verifier of task x")."""

    what: str
    context: Path
    dockerfile: str  # relative to context
    timeout: float
    label: str  # the benchflow.task label
    build_args: tuple[tuple[str, str], ...] = ()
    target: str | None = None  # the stage to build, when not the last
    inline: str | None = None  # the Dockerfile's text, when not read from the context

    @property
    def dockerfile_path(self) -> Path:
        return self.context / self.dockerfile

    def options(self) -> tuple[str, ...]:
        """What else decides the image, as `docker build` flags."""
        flags = [f"--build-arg={k}={v}" for k, v in self.build_args]
        return (*flags, f"--target={self.target}") if self.target else tuple(flags)


@dataclass
class TaskImages:
    """The images of one job's sandboxes; safe to call from several threads at once.

    Every built image is tagged by the digest of exactly what its build sees (the context's
    files after .dockerignore, the Dockerfile, build args) and the ids of the images it names
    (FROM, COPY --from): a build never reuses an image made from other files, and a second run of
    the same files builds nothing.
    """

    client: docker.DockerClient
    _build_locks: dict[str, threading.Lock] = field(default_factory=dict)
    _locks_guard: threading.Lock = field(default_factory=threading.Lock)
    _resolved: dict[tuple[Path, str, tuple[str, ...]], str] = field(default_factory=dict)
    _layers: LayerCache | None = None

    def with_layer(self, image: str, layer: AgentLayer) -> str:
        """`image` with the agent's files layered on top (built once); raises LayerError."""
        if self._layers is None:
            self._layers = LayerCache(self.client)
        return self._layers.image_with(image, layer)

    def image_for(self, task: Task, environment_digest: str, build_log: Path | None = None) -> str:
        """The task's image: its docker_image when present locally, else environment/ built
        (once per build context and base images; a second run builds nothing)."""
        prebuilt, _why = prebuilt_or_build(task, self.client)
        if prebuilt:
            self._require_image(prebuilt)
            return prebuilt
        assert task.environment_dir is not None
        spec = ImageSpec(
            f"task {task.name}",
            task.environment_dir,
            "Dockerfile",
            task.sandbox.build_timeout_sec,
            task.name,
        )
        return self.built(spec, build_log)

    def built(self, spec: ImageSpec, build_log: Path | None = None) -> str:
        """The image of `spec`, built unless an image of the same context and bases exists;
        raises ImageBuildError."""
        key = (spec.context.resolve(), spec.dockerfile, spec.options())
        with self._locks_guard:
            if key in self._resolved:
                return self._resolved[key]
        context = self._context(spec)
        tag = self._tag(context)
        with self._locks_guard:
            lock = self._build_locks.setdefault(tag, threading.Lock())
        with lock:
            try:
                self.client.api.inspect_image(tag)
            except ImageNotFound:
                self._build(spec, context, tag, build_log)
        with self._locks_guard:
            self._resolved[key] = tag
        return tag

    def _context(self, spec: ImageSpec) -> BuildContext:
        from runs.sandboxes.buildkit import without_syntax_line

        try:
            text = spec.inline or spec.dockerfile_path.read_text(errors="replace")
        except OSError as exc:
            raise ImageBuildError(
                f"image build failed for {spec.what}: cannot read {spec.dockerfile_path}: {exc}"
            ) from exc
        text, _dropped = without_syntax_line(text)
        return BuildContext(spec.context, text, spec.dockerfile, spec.options())

    def _tag(self, context: BuildContext) -> str:
        """Named by the build context's digest and the ids of the images it names: equal files
        share the image, other files never do, and a rebuilt base image invalidates it."""
        from runs.sandboxes.dockerfile_refs import image_refs

        digest = hashlib.sha256(context.digest().encode())
        for ref in image_refs(context.dockerfile_text):
            try:
                digest.update(self.client.api.inspect_image(ref)["Id"].encode())
            except (ImageNotFound, APIError):
                digest.update(ref.encode())
        return f"{IMAGE_REPO}:{digest.hexdigest()[:16]}"

    def image_workdir(self, image: str) -> str:
        """The image's WORKDIR (the agent's working folder when the task sets none); / if unset."""
        config = self.client.api.inspect_image(image).get("Config") or {}
        return config.get("WorkingDir") or "/"

    def _require_image(self, name: str) -> None:
        from runs.sandboxes.baseimages import local_base_images
        from runs.sandboxes.dockerfile_refs import explain_missing_images, missing_base_images

        if missing_base_images(f"FROM {name}\n", self.client):
            raise ImageBuildError(explain_missing_images([name], local_base_images(self.client)))

    def require(self, name: str, what: str) -> None:
        """Raise ImageBuildError, naming `what` needs it, unless the image `name` is here."""
        try:
            self._require_image(name)
        except ImageBuildError as exc:
            raise ImageBuildError(f"image build failed for {what}: {exc}") from None

    def _build(
        self, spec: ImageSpec, context: BuildContext, tag: str, build_log: Path | None
    ) -> None:
        from runs.sandboxes.baseimages import local_base_images
        from runs.sandboxes.dockerfile_refs import explain_missing_images, missing_images

        missing = missing_images(context.dockerfile_text, self.client)
        if missing:
            available = local_base_images(self.client)
            where = "; ".join(f"{spec.dockerfile_path}: {m.where}" for m in missing)
            raise ImageBuildError(
                f"image build failed for {spec.what} ({where}): "
                + explain_missing_images([m.image for m in missing], available)
            )
        from runs.sandboxes import buildkit

        labels = {"benchflow.task": spec.label}
        if buildkit.available():
            outcome = buildkit.build(context, tag, labels, spec.timeout, spec.options())
            log, error, line = outcome.log, outcome.error, outcome.line
        else:
            log, error, line = self._classic_build(spec, context, tag)
        if build_log is not None:
            build_log.parent.mkdir(parents=True, exist_ok=True)
            build_log.write_text(log + (f"\nERROR: {error}\n" if error else ""))
        if error:
            at = f", line {line}" if line else ""
            tail = "\n".join(log.strip().splitlines()[-8:])
            raise ImageBuildError(
                f"image build failed for {spec.what} ({spec.dockerfile_path}{at}): {error}"
                + (f"\n{tail}" if tail else "")
            )

    def _classic_build(
        self, spec: ImageSpec, context: BuildContext, tag: str
    ) -> tuple[str, str | None, int | None]:
        """The engine's classic builder (no BuildKit on this machine), given the same tar: a
        Dockerfile using a feature only BuildKit has fails here, naming its line."""
        from runs.sandboxes.buildkit import buildkit_only_line

        if found := buildkit_only_line(context.dockerfile_text):
            number, what = found
            return (
                "",
                f"{what} needs BuildKit (the docker CLI with its buildx plugin), which this machine "
                "lacks; fix: run scripts/setup.sh (installs docker-buildx), or rewrite the line",
                number,
            )
        lines: list[str] = []
        deadline = time.monotonic() + spec.timeout
        error = None
        with tempfile.TemporaryFile(prefix="benchflow-context-") as tar:
            context.write_tar(tar)
            tar.seek(0)
            try:
                for item in self.client.api.build(
                    fileobj=tar,
                    custom_context=True,
                    dockerfile=context.dockerfile,
                    tag=tag,
                    rm=True,
                    forcerm=True,
                    decode=True,
                    labels={"benchflow.task": spec.label},
                    buildargs=dict(spec.build_args) or None,
                    target=spec.target,
                    timeout=spec.timeout,
                ):
                    if "stream" in item:
                        lines.append(item["stream"])
                    if "error" in item:
                        error = item["error"].strip()
                    if time.monotonic() > deadline:
                        error = f"the build took longer than build_timeout_sec={spec.timeout:g}"
                        break
            except (APIError, OSError) as exc:
                error = str(exc)
        return "".join(lines), error, None
