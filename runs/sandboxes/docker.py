"""Docker sandboxes through the docker SDK: cached task images, one labelled container per attempt."""

from __future__ import annotations

import os
import shutil
import socket
import tarfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import docker
from docker.errors import APIError, NotFound

from runs.sandboxes import compose
from runs.sandboxes.files import FileEntry, make_tar
from runs.sandboxes.images import ImageBuildError, TaskImages
from runs.sandboxes.owners import (
    LABEL_ATTEMPT,
    LABEL_HOST,
    LABEL_JOB,
    LABEL_JOB_DIR,
    LABEL_OWNED,
    LABEL_PID,
    LABEL_PID_START,
    pid_start,
)
from runs.sandboxes.owners import (
    reap_orphans as reap_orphans,  # its old home: callers may import it here
)
from runs.sandboxes.resources import Grant, HostResources, grant, host_resources
from runs.sandboxes.streams import OUTPUT_CAP_BYTES, CappedWriter, ExecResult, StreamReader
from runs.tasks.load import Task

EXEC_TRIES = 3
EXEC_NOT_STARTED = b"unable to start container process"  # runc's words: nothing of the cmd ran
HEAD_BYTES = 1024

ARCHIVE_CAP_BYTES = 200 * 1024 * 1024  # of /logs copied back into the attempt folder

# Stops every process but init and the container's main process: the agent, its children,
# and anything it left running, whatever session or user it moved to.
STOP_ALL_SCRIPT = (
    'main=""; for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" -gt 1 ] || continue; '
    'if [ -z "$main" ] || [ "$p" -lt "$main" ]; then main=$p; fi; done; '
    'for d in /proc/[0-9]*; do p=${d#/proc/}; case "$p" in 1|"$main"|"$$") continue;; esac; '
    'kill -KILL "$p" 2>/dev/null; done; true'
)


class SandboxError(Exception):
    """The sandbox could not be created or started (an infrastructure problem)."""


class SandboxConfigError(SandboxError):
    """Docker refused the sandbox's settings (HTTP 400): another attempt would be refused the same."""


# seconds between tries of a forced removal the engine refused; None: the last try raises
REMOVE_RETRY_S: tuple[float | None, ...] = (0.5, 1.0, 2.0, 4.0, None)


def connect(max_pool_size: int = 64) -> docker.DockerClient:
    return docker.from_env(max_pool_size=max_pool_size, timeout=300)


class Sandbox:
    """One running container for one attempt (the main one, when the task has a compose file:
    `project` then holds its other services, networks and volumes)."""

    def __init__(
        self,
        client: docker.DockerClient,
        container_id: str,
        task: Task,
        project: compose.ComposeProject | None = None,
    ):
        self.client = client
        self.api = client.api
        self.id = container_id
        self.task = task
        self.project = project
        self.removed = False
        self._lock = threading.Lock()

    def service(self, name: str) -> Sandbox | None:
        """The container of one of the task's compose services (main is this one); None when the
        task has no such service. Removing the project removes it."""
        if name == compose.MAIN:
            return self
        if self.project is None:
            return None
        found = self.api.containers(
            filters={
                "label": [
                    f"{compose.PROJECT_LABEL}={self.project.name}",
                    f"{compose.SERVICE_LABEL}={name}",
                ]
            }
        )
        return Sandbox(self.client, found[0]["Id"], self.task) if found else None

    def oom_kills(self) -> int | None:
        """Processes the kernel killed for lack of memory in this sandbox (its memory cgroup,
        v1 or v2, cgroupfs or systemd driver); None when the counter cannot be read."""
        for path, field_name in (
            (f"/sys/fs/cgroup/memory/docker/{self.id}/memory.oom_control", "oom_kill"),
            (f"/sys/fs/cgroup/docker/{self.id}/memory.events", "oom_kill"),
            (f"/sys/fs/cgroup/system.slice/docker-{self.id}.scope/memory.events", "oom_kill"),
        ):
            try:
                text = Path(path).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                name, _, value = line.partition(" ")
                if name == field_name and value.strip().isdigit():
                    return int(value)
        return None

    def put_files(self, files: dict[str, FileEntry], dirs: Iterable[str] = ()) -> None:
        if files or dirs:
            self.api.put_archive(self.id, "/", make_tar(files, dirs))

    def exec(
        self,
        cmd: list[str],
        *,
        user: str | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        stdout_path: Path | None = None,
        stderr_path: Path | None = None,
        on_stdout: Callable[[bytes], None] | None = None,
        secrets: list[str] | None = None,
    ) -> ExecResult:
        """Run `cmd`, streaming its output to files (bounded, `secrets` replaced); blocks until it
        ends. An exec the container runtime could not start (exit 126, "unable to start container
        process": nothing of `cmd` ran) is tried again, up to EXEC_TRIES times in all: on a
        loaded engine runc sometimes fails so, and a whole attempt should not be lost to it."""
        started = time.monotonic()
        for tried in range(1, EXEC_TRIES + 1):
            result, head = self._exec_once(
                cmd, user, workdir, env, stdout_path, stderr_path, on_stdout, secrets
            )
            if not (result.exit_code == 126 and EXEC_NOT_STARTED in head) or tried == EXEC_TRIES:
                break
            time.sleep(0.2 * tried)
        result.duration_s = time.monotonic() - started
        return result

    def _exec_once(
        self,
        cmd: list[str],
        user: str | None,
        workdir: str | None,
        env: dict[str, str] | None,
        stdout_path: Path | None,
        stderr_path: Path | None,
        on_stdout: Callable[[bytes], None] | None,
        secrets: list[str] | None,
    ) -> tuple[ExecResult, bytes]:
        """One exec; with the first bytes of its output (the runtime's own error, if any)."""
        started = time.monotonic()
        exec_id = self.api.exec_create(
            self.id, cmd, user=user or "", workdir=workdir, environment=env or None
        )["Id"]
        head = b""
        out = CappedWriter(stdout_path, OUTPUT_CAP_BYTES, secrets)
        err = (
            out
            if stderr_path is None or stderr_path == stdout_path
            else CappedWriter(stderr_path, OUTPUT_CAP_BYTES, secrets)
        )
        try:
            for chunk_out, chunk_err in self.api.exec_start(exec_id, stream=True, demux=True):
                if len(head) < HEAD_BYTES:
                    head += (chunk_out or b"") + (chunk_err or b"")
                out.write(chunk_out)
                err.write(chunk_err)
                if on_stdout is not None and chunk_out:
                    on_stdout(chunk_out)
        except (APIError, OSError, ValueError):
            pass  # the container went away under us; the exit code says the rest
        finally:
            out.close()
            if err is not out:
                err.close()
        try:
            code = self.api.exec_inspect(exec_id).get("ExitCode")
        except (APIError, NotFound):
            code = None
        dropped = out.dropped + (err.dropped if err is not out else 0)
        result = ExecResult(code, dropped_bytes=dropped, duration_s=time.monotonic() - started)
        return result, head[:HEAD_BYTES]

    def pid(self) -> int:
        """The host pid of the container's init: the way into its namespaces."""
        return int(self.api.inspect_container(self.id)["State"]["Pid"])

    def stop_processes(self) -> None:
        """Kill everything the agent started, keeping the container up for the verifier."""
        try:
            exec_id = self.api.exec_create(self.id, ["sh", "-c", STOP_ALL_SCRIPT], user="0")["Id"]
            self.api.exec_start(exec_id)
        except (APIError, NotFound):
            pass

    def kill(self) -> None:
        """Kill this container (it stays, for copying files out and for remove())."""
        try:
            self.api.kill(self.id)
        except (APIError, NotFound):
            pass  # not running any more, or gone: stopped either way

    def stop(self) -> None:
        """Kill every container of the sandbox, a compose task's services too: nothing the
        agent started runs on (a separate verifier starts only after this)."""
        self.kill()
        if self.project is not None:
            label = f"{compose.PROJECT_LABEL}={self.project.name}"
            for found in self.api.containers(filters={"label": label}):
                Sandbox(self.client, found["Id"], self.task).kill()

    def copy_dir_to(
        self, path: str, dest: Path, *, cap: int = ARCHIVE_CAP_BYTES
    ) -> list[tarfile.TarInfo]:
        """Copy a folder of the sandbox into `dest` (regular files and dirs only); returns the members.

        `/logs` lands as dest/agent, dest/verifier, dest/artifacts: the attempt folder's layout.
        """
        try:
            stream, _stat = self.api.get_archive(self.id, path)
        except NotFound:
            return []
        kept, members = 0, []
        with tarfile.open(fileobj=StreamReader(stream), mode="r|") as tar:
            for member in tar:
                parts = Path(member.name).parts[1:]  # drop the folder's own name
                if not parts or ".." in parts or member.name.startswith("/"):
                    continue
                target = dest.joinpath(*parts)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    members.append(member)
                    continue
                if not member.isfile() or kept + member.size > cap:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                if src is None:
                    continue
                with open(target, "wb") as fh:
                    while block := src.read(1 << 20):
                        fh.write(block)
                os.chmod(target, member.mode & 0o777)
                kept += member.size
                members.append(member)
        return members

    def copy_path_to(
        self,
        path: str,
        target: Path,
        exclude: Callable[[str], bool],
        *,
        cap: int = ARCHIVE_CAP_BYTES,
    ) -> tuple[str, int, int]:
        """Copy a file of the sandbox to `target`, or a folder's contents into it (regular files
        and folders; paths `exclude` says yes to are left out): (file | folder | missing, files
        copied, bytes copied). Nothing past `cap` bytes is copied."""
        try:
            stream, stat = self.api.get_archive(self.id, path)
        except NotFound:
            return "missing", 0, 0
        kind = "folder" if int(stat.get("mode", 0)) & (1 << 31) else "file"
        files = kept = 0
        with tarfile.open(fileobj=StreamReader(stream), mode="r|") as tar:
            for member in tar:
                parts = Path(member.name).parts[1:]  # a folder's members, without its own name
                if kind == "folder" and (not parts or ".." in parts or exclude("/".join(parts))):
                    continue
                if not member.isfile() or kept + member.size > cap:
                    continue
                dest = target.joinpath(*parts) if kind == "folder" else target
                dest.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                if src is None:
                    continue
                with open(dest, "wb") as fh:
                    shutil.copyfileobj(src, fh, 1 << 20)
                files, kept = files + 1, kept + member.size
        return kind, files, kept

    def copy_file_to(self, path: str, target: Path, *, cap: int = ARCHIVE_CAP_BYTES) -> bool:
        """Copy one regular file of the sandbox to `target`; False when there is none (or it is
        larger than `cap`)."""
        try:
            stream, _stat = self.api.get_archive(self.id, path)
        except NotFound:
            return False
        copied = False
        with tarfile.open(fileobj=StreamReader(stream), mode="r|") as tar:
            for member in tar:  # read to the end: the API's stream is then done with
                src = tar.extractfile(member) if member.isfile() and member.size <= cap else None
                if src is None or copied:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "wb") as fh:
                    while block := src.read(1 << 20):
                        fh.write(block)
                copied = True
        return copied

    def remove(self) -> None:
        """Kill and remove the container; returns once it is gone. A busy engine can refuse a
        forced removal for a moment ("did not receive an exit event", 409) or be removing it
        already: both are waited out, so no container outlives its attempt."""
        with self._lock:
            if self.removed:
                return
            self.removed = True
        if self.project is not None:
            try:
                self.project.remove()  # every service, network and volume of the attempt
            except APIError:
                self.removed = False
                raise
            return
        for wait in REMOVE_RETRY_S:
            try:
                self.api.remove_container(self.id, force=True, v=True)
                return
            except NotFound:
                return
            except APIError as exc:
                if wait is None:
                    self.removed = False  # still there: a later remove tries again
                    raise
                if "already in progress" in str(exc) and self._gone_within(wait):
                    return
                time.sleep(wait)

    def _gone_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                self.api.inspect_container(self.id)
            except NotFound:
                return True
            time.sleep(0.1)
        return False


@dataclass
class SandboxFactory:
    """Makes sandboxes for one job, labelled with the job and the owning process."""

    client: docker.DockerClient
    job_name: str
    job_dir: str = ""  # the job folder, resolved (a label: job names repeat across folders)
    images: TaskImages = field(init=False)
    _host: HostResources | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.images = TaskImages(self.client)

    def grant(self, task: Task) -> Grant:
        """The CPUs and memory the task's sandbox gets: its request, within this machine's."""
        if self._host is None:
            self._host = host_resources(self.client)
        return grant(task.sandbox.cpus, task.sandbox.memory_mb, self._host)

    def create(
        self,
        task: Task,
        image: str,
        attempt_id: str,
        *,
        logs_dir: Path | None = None,
        mounts: dict[str, tuple[Path, str]] | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> Sandbox:
        """Create (not start) the attempt's container with the task's cpu, memory and network.

        With `logs_dir`, its agent/, verifier/ and artifacts/ are bind-mounted at /logs/...: what
        the agent and the verifier write there lands in the attempt folder with no copy.
        `mounts` maps a container path to (host folder, "ro" | "rw").
        """
        binds: dict[str, dict[str, str]] = {
            str(host.resolve()): {"bind": target, "mode": mode}
            for target, (host, mode) in (mounts or {}).items()
        }
        if logs_dir is not None:
            for sub in ("agent", "verifier", "artifacts"):
                host = (logs_dir / sub).resolve()
                host.mkdir(parents=True, exist_ok=True)
                os.chmod(host, 0o777)  # the task's agent user need not be root
                binds[str(host)] = {"bind": f"/logs/{sub}", "mode": "rw"}
        given = self.grant(task)
        env = {**task.sandbox.env, **(extra_env or {})}
        if task.compose_file is not None:
            return self._create_project(task, image, attempt_id, logs_dir, binds, env, given)
        network = "none" if task.sandbox.network_mode == "no-network" else "bridge"
        host_config = self.client.api.create_host_config(
            init=True,
            nano_cpus=int(given.cpus * 1e9),
            mem_limit=f"{given.memory_mb}m",
            network_mode=network,
            binds=binds or None,
        )
        labels = self.labels(attempt_id)
        try:
            created = self.client.api.create_container(
                image,
                command=["sleep", "infinity"],
                entrypoint=[],
                working_dir=task.sandbox.workdir,
                environment=env or None,
                labels=labels,
                host_config=host_config,
                detach=True,
            )
        except APIError as exc:
            if exc.status_code == 400:  # a setting Docker refuses: the same every time
                raise SandboxConfigError(
                    f"sandbox config refused by Docker: {exc.explanation or exc}"
                ) from exc
            raise SandboxError(f"sandbox creation failed: {exc.explanation or exc}") from exc
        return Sandbox(self.client, created["Id"], task)

    def labels(self, attempt_id: str) -> dict[str, str]:
        """What marks a container (network, volume) as this job's attempt's, and its owner."""
        return {
            LABEL_OWNED: "process",
            LABEL_HOST: socket.gethostname(),
            LABEL_PID: str(os.getpid()),
            LABEL_PID_START: pid_start(os.getpid()),
            LABEL_JOB: self.job_name,
            LABEL_JOB_DIR: self.job_dir,
            LABEL_ATTEMPT: attempt_id,
        }

    def _create_project(
        self,
        task: Task,
        image: str,
        attempt_id: str,
        logs_dir: Path | None,
        binds: dict[str, dict[str, str]],
        env: dict[str, str],
        given: Grant,
    ) -> Sandbox:
        """The task's compose project, created (not started): main and every other service."""
        assert task.compose_file is not None
        if not compose.available():
            raise SandboxConfigError(compose.MISSING)
        env_dir = task.compose_file.parent
        name = compose.project_name(attempt_id)
        variables = compose.harbor_variables(
            context_dir=env_dir,
            image=image,
            logs_dir=logs_dir,
            cpus=given.cpus,
            memory_mb=given.memory_mb,
        )
        project: compose.ComposeProject | None = None
        try:
            model = compose.resolve(
                task.compose_file,
                env_dir,
                name,
                compose.interpolation_env(task.sandbox.env, task.compose_env, variables),
            )
            settings = compose.MainSettings(
                image=image,
                labels=self.labels(attempt_id),
                binds=binds,
                env=env,
                cpus=given.cpus,
                memory_mb=given.memory_mb,
                workdir=task.sandbox.workdir,
                no_network=task.sandbox.network_mode == "no-network",
            )
            builds = logs_dir.parent / "builds" if logs_dir else None
            sidecars = {
                service: self.images.built(
                    spec, builds / f"{task.name}.{service}.log" if builds else None
                )
                for service, spec in compose.sidecar_specs(
                    model, task.name, task.sandbox.build_timeout_sec
                ).items()
            }
            project = compose.ComposeProject(
                self.client,
                name,
                compose.finalize(model, settings, sidecars),
                env_dir,
                timeout=task.sandbox.build_timeout_sec,
            )
            main_id = project.create()
        except compose.ComposeError as exc:
            if project is not None:
                compose.remove_project(self.client, name)
            if exc.kind == "build":
                raise ImageBuildError(str(exc)) from exc
            error = SandboxConfigError if exc.kind == "config" else SandboxError
            raise error(f"sandbox creation failed: {exc}") from exc
        return Sandbox(self.client, main_id, task, project)

    def start(self, sandbox: Sandbox) -> None:
        if sandbox.project is not None:
            try:
                sandbox.project.up()
            except compose.ComposeError as exc:
                raise SandboxError(f"sandbox startup failed: {exc}") from exc
            return
        try:
            self.client.api.start(sandbox.id)
        except APIError as exc:
            raise SandboxError(f"sandbox startup failed: {exc.explanation or exc}") from exc
