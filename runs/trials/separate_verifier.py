"""A separate verifier (Harbor's `[verifier] environment_mode = "separate"`): the tests run in a
fresh container of their own image, given only what the agent's sandbox handed over.

As Harbor 0.26 does it (trial/single_step.py, trial/artifact_handler.py): once the agent is done,
the collect hooks run and the declared artifacts are copied out of its sandbox, which is then
stopped; the verifier's container (its image per runs/tasks/verifier_env.py, with its cpus,
memory, network and env) gets each artifact back at its own path and the agent's /logs/artifacts
at /logs/artifacts, and only the attempt's verifier/ folder, emptied, mounted at /logs/verifier,
where the reward is read from. Nothing else of the agent's sandbox reaches it. `bench regrade`
runs the same from the attempt's saved artifacts/.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from runs.sandboxes.docker import Sandbox, SandboxFactory
from runs.sandboxes.images import ImageBuildError, ImageSpec, TaskImages
from runs.tasks.load import Task, environment_digest
from runs.tasks.setup_keys import Artifact
from runs.tasks.verifier_env import VERIFIER_DOCKERFILE, VerifierEnvironment
from runs.trials.artifacts import MANIFEST
from runs.trials.judge import JudgeAccess
from runs.trials.verifier import TESTS_DIR, VerifierOutcome, run_tests

ARTIFACTS_DIR = "/logs/artifacts"  # Harbor's convention dir: what the agent published


class VerifierImageError(Exception):
    """The separate verifier's image could not be had: a verifier error, not the agent's."""


def verifier_image(
    images: TaskImages, task: Task, env: VerifierEnvironment, build_log: Path | None
) -> str:
    """The verifier's image (built once per context, as a task's); raises VerifierImageError."""
    try:
        if env.image:
            images.require(env.image, f"the verifier of task {task.name}")
            return env.image
        if env.context is not None:
            spec = ImageSpec(
                f"the verifier of task {task.name}",
                env.context,
                VERIFIER_DOCKERFILE,
                env.sandbox.build_timeout_sec,
                f"{task.name} (verifier)",
            )
            return images.built(spec, build_log)
        return images.image_for(task, environment_digest(task))
    except ImageBuildError as exc:  # "image build failed for the verifier of task ..."
        raise VerifierImageError(str(exc)) from exc


def handed_over(artifacts_dir: Path, artifacts: tuple[Artifact, ...]) -> list[tuple[str, Path]]:
    """(path in the verifier's container, file on the host) for what the agent's sandbox handed
    over: each declared artifact at its own source path, and the rest of the attempt's
    artifacts/ (what the agent put in /logs/artifacts) under /logs/artifacts. Regular files only;
    nothing outside artifacts/ (a symlink is not followed)."""
    declared = {a.destination.strip("/"): a.source for a in artifacts}
    out: list[tuple[str, Path]] = []
    root = artifacts_dir.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if rel == MANIFEST or not stat.S_ISREG(path.lstat().st_mode):
                continue
            out.append((_container_path(rel, declared), path))
    return out


def _container_path(rel: str, declared: dict[str, str]) -> str:
    parts = PurePosixPath(rel).parts
    for i in range(len(parts), 0, -1):
        source = declared.get("/".join(parts[:i]))
        if source is not None:
            rest = parts[i:]
            return str(PurePosixPath(source, *rest)) if rest else source
    return f"{ARTIFACTS_DIR}/{rel}"


def missing_artifacts(artifacts_dir: Path, artifacts: tuple[Artifact, ...]) -> list[str]:
    """The declared artifacts the attempt's manifest does not have (none copied out, or no
    manifest at all): a regrade could not give them to the verifier."""
    if not artifacts:
        return []
    try:
        rows = json.loads((artifacts_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return [a.source for a in artifacts]
    had = {r.get("source") for r in rows if isinstance(r, dict) and r.get("type") != "missing"}
    return [a.source for a in artifacts if a.source not in had]


def _write_tar(out: BinaryIO, files: list[tuple[str, Path]]) -> None:
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo(ARTIFACTS_DIR.strip("/"))
        info.type, info.mode = tarfile.DIRTYPE, 0o777
        tar.addfile(info)
        for target, path in files:
            st = path.stat()
            info = tarfile.TarInfo(target.strip("/"))
            info.size, info.mode, info.mtime = (
                st.st_size,
                stat.S_IMODE(st.st_mode),
                int(st.st_mtime),
            )
            with open(path, "rb") as fh:
                tar.addfile(info, fh)


def _empty(folder: Path) -> None:
    """The verifier's /logs/verifier, emptied: the agent's sandbox had it mounted too."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    os.chmod(folder, 0o777)


async def run_separate_verifier(
    factory: SandboxFactory,
    task: Task,
    env: VerifierEnvironment,
    image: str,
    *,
    name: str,
    artifacts_dir: Path,
    verifier_dir: Path,
    staging: Path,
    live: set[Sandbox],
    judged: Callable[[Sandbox], AbstractAsyncContextManager[JudgeAccess | None]] | None = None,
) -> VerifierOutcome:
    """Create the verifier's container (`name` labels it as the attempt's), hand the artifacts
    over, run the tests, read the reward, remove the container. A failure of ours (the
    container) is verifier_infra; the tests' own outcome is as in a shared run."""
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, _empty, verifier_dir)
    mounts = {"/logs/verifier": (verifier_dir, "rw")}
    if not env.bundled_tests:  # the task's own image: tests/ at /tests, as in a shared run
        tests = staging / "tests"
        await loop.run_in_executor(None, _fill, tests, task.tests_dir)
        mounts[TESTS_DIR] = (tests, "ro")
    # the verifier's container has its own resources, network and env (no compose project)
    container_task = replace(task, sandbox=env.sandbox, compose_file=None)
    try:
        files = await loop.run_in_executor(None, handed_over, artifacts_dir, task.artifacts)

        def create() -> Sandbox:
            made = factory.create(container_task, image, name, mounts=mounts)
            live.add(made)
            try:
                with tempfile.TemporaryFile(prefix="benchflow-handover-") as tar:
                    _write_tar(tar, files)
                    tar.seek(0)
                    made.api.put_archive(made.id, "/", tar)
                factory.start(made)
            except BaseException:
                made.remove()
                live.discard(made)
                raise
            return made

        sandbox = await loop.run_in_executor(None, create)
    except Exception as exc:  # noqa: BLE001 - docker and files fail in many ways; all are ours
        return VerifierOutcome(
            None, f"separate verifier sandbox failed: {exc}", "verifier_infra", None, 0.0
        )
    try:
        # a judge's way to a model is served on the verifier's own loopback, as in a shared run
        async with judged(sandbox) if judged is not None else contextlib.nullcontext() as judge:
            return await run_tests(
                sandbox,
                task,
                verifier_dir,
                timeout=task.verifier.timeout_sec,
                workdir=env.sandbox.workdir,
                network_mode=env.sandbox.network_mode,
                judge=judge,
            )
    finally:
        await _remove(sandbox, live)


def _fill(folder: Path, source: Path) -> None:
    from runs.sandboxes.files import populate

    populate(folder, [source])


async def _remove(sandbox: Sandbox, live: set[Sandbox]) -> None:
    await asyncio.shield(asyncio.get_running_loop().run_in_executor(None, sandbox.remove))
    live.discard(sandbox)
