"""Multi-container sandboxes: a task's environment/docker-compose.yaml run by Docker Compose.

As Harbor does it: a base file declares the `main` service (the task's image, kept alive with
`sleep infinity`, its CPUs and memory), and the task's file is layered over it (it may add to
main and declare further services, networks and volumes); `docker compose config` merges them
and resolves the variables Harbor's base file offers (MAIN_IMAGE_NAME, CONTEXT_DIR, CPUS, MEMORY,
HOST_*_LOGS_PATH, ...). The runner then puts its own settings on the merged model: the attempt's
labels on every container, network and volume (so the reaper and a cancel find them), main's
image with the agent's layer, its mounts and init, and for a no-network task main taken off
every network (only lo is left, as Harbor's egress rules leave it). The sidecars' images are
built by the runner as a task's are (runs/sandboxes/images.py: each named by what its build sees;
Compose's own build would sync contexts by folder name and could mix two tasks' files), and
Compose creates and starts the project (`up --wait`: healthchecks gate `depends_on`). Keys this
runner cannot honour were refused by `bench tasks check` (runs/tasks/compose_keys.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from docker.errors import APIError, NotFound

from runs.sandboxes.images import ImageSpec

MAIN = "main"
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
_ENV_PASSED = ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "DOCKER_CERT_PATH")


class ComposeError(Exception):
    """The project could not be set up. `kind`: "config" (Compose refuses the files: the same
    every time), "build" (a sidecar's image), or "setup" (the engine, on this try)."""

    def __init__(self, message: str, kind: str = "setup"):
        super().__init__(message)
        self.kind = kind


@cache
def available() -> bool:
    """Whether `docker compose` (Compose v2, the docker CLI plugin) is installed."""
    if shutil.which("docker") is None:
        return False
    try:
        proc = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


MISSING = (
    "multi-container tasks need Docker Compose v2 (`docker compose`), which is not installed; "
    "fix: run scripts/setup.sh (installs Debian's docker-compose 2.x)"
)


def project_name(attempt_id: str) -> str:
    """A Compose project name of the attempt's own: lowercase letters, digits, - and _."""
    return "bf-" + re.sub(r"[^a-z0-9_-]", "-", attempt_id.lower())


def harbor_variables(
    *,
    context_dir: Path,
    image: str,
    logs_dir: Path | None,
    cpus: float,
    memory_mb: int,
) -> dict[str, str]:
    """The variables Harbor's base compose file sets, which a task's file may use too."""
    logs = logs_dir or Path(tempfile.gettempdir())
    return {
        "MAIN_IMAGE_NAME": image,
        "PREBUILT_IMAGE_NAME": image,
        "CONTEXT_DIR": str(context_dir),
        "CPUS": f"{cpus:g}",
        "MEMORY": f"{memory_mb}M",
        "HOST_VERIFIER_LOGS_PATH": str(logs / "verifier"),
        "HOST_AGENT_LOGS_PATH": str(logs / "agent"),
        "HOST_ARTIFACTS_PATH": str(logs / "artifacts"),
        "ENV_VERIFIER_LOGS_PATH": "/logs/verifier",
        "ENV_AGENT_LOGS_PATH": "/logs/agent",
        "ENV_ARTIFACTS_PATH": "/logs/artifacts",
    }


def base_model() -> dict[str, Any]:
    """Harbor's base and build files in one: what main is before the task's file."""
    return {
        "services": {
            MAIN: {
                "build": {"context": "${CONTEXT_DIR}"},
                "image": "${MAIN_IMAGE_NAME}",
                "command": ["sleep", "infinity"],
                "entrypoint": [],  # as a single-container sandbox: the image's ENTRYPOINT is not run
                "deploy": {"resources": {"limits": {"cpus": "${CPUS}", "memory": "${MEMORY}"}}},
            }
        }
    }


def interpolation_env(
    task_env: dict[str, str], host_values: dict[str, str], variables: dict[str, str]
) -> dict[str, str]:
    """What Compose may substitute into the task's file, as its process's environment: Harbor's
    variables, the task's [environment] env, and the variables of this machine it was allowed to
    read (Task.compose_env, runs/host_env.py). Nothing else of this process's environment but
    what the docker CLI itself needs, which a task's env does not replace."""
    own = {k: os.environ[k] for k in _ENV_PASSED if k in os.environ}
    given = {k: v for k, v in task_env.items() if not k.startswith(("DOCKER_", "COMPOSE_"))}
    return {**host_values, **given, **variables, **own}


def resolve(task_file: Path, env_dir: Path, project: str, env: dict[str, str]) -> dict[str, Any]:
    """The merged model, by `docker compose config`: the base file, then the task's."""
    with tempfile.TemporaryDirectory(prefix="benchflow-compose-") as folder:
        files = [Path(folder) / "base.json", task_file]
        files[0].write_text(json.dumps(base_model()))
        args = ["docker", "compose", "-p", project, "--project-directory", str(env_dir)]
        for file in files:
            args += ["-f", str(file)]
        proc = _run([*args, "config", "--format", "json"], env=env, timeout=60)
    if proc.returncode != 0:
        raise ComposeError(f"{task_file}: {_last_lines(proc.stderr)}", kind="config")
    return json.loads(proc.stdout)


@dataclass(frozen=True)
class MainSettings:
    """What the runner gives the main service."""

    image: str  # the task's image with the agent's layer
    labels: dict[str, str]  # the attempt's, put on every container, network and volume
    binds: dict[str, dict[str, str]]  # host path -> {"bind": target, "mode": ro|rw}
    env: dict[str, str]
    cpus: float
    memory_mb: int
    workdir: str | None
    no_network: bool = False  # the task's network_mode = "no-network": main reaches only lo


def finalize(
    model: dict[str, Any], main: MainSettings, sidecar_images: dict[str, str]
) -> dict[str, Any]:
    """The merged model with the runner's settings on it (a new dict; `model` is unchanged).

    A sidecar built from a context runs `sidecar_images`[service], the runner's own build of it
    (named by what the build sees), whatever image name the file gives it; Compose builds nothing.
    """
    out = json.loads(json.dumps(model))
    project = out.get("name", "")
    services: dict[str, Any] = out.get("services") or {}
    for name, service in services.items():
        service["labels"] = {**(service.get("labels") or {}), **main.labels}
        service["pull_policy"] = "never"  # no registry answers here: a missing image fails at once
        if name in sidecar_images:
            service["image"] = sidecar_images[name]
            service.pop("build", None)
    m = services[MAIN]
    if main.no_network:
        # Harbor drops main's egress but lo (iptables) for a no-network task: main off every
        # network is the same; set here, as a last file could not take the task's networks away
        m.pop("networks", None)
        m["network_mode"] = "none"
    m.pop("build", None)
    m["image"] = main.image
    m["init"] = True
    m["environment"] = {**(m.get("environment") or {}), **main.env}
    if main.workdir:
        m["working_dir"] = main.workdir
    ours = [
        {"type": "bind", "source": host, "target": b["bind"], "read_only": b["mode"] == "ro"}
        for host, b in main.binds.items()
    ]
    targets = {
        v["target"] for v in ours
    }  # the runner's mounts win over the task's at the same path
    theirs = [v for v in m.get("volumes") or [] if v.get("target") not in targets]
    m["volumes"] = [*theirs, *ours]
    m["deploy"] = {
        **(m.get("deploy") or {}),
        "resources": {"limits": {"cpus": main.cpus, "memory": f"{main.memory_mb}M"}},
    }
    networks: dict[str, Any] = out.setdefault("networks", {})
    if any(not s.get("network_mode") and not s.get("networks") for s in services.values()):
        networks.setdefault("default", {"name": f"{project}_default"})
    for kind in ("networks", "volumes"):
        for spec in (out.get(kind) or {}).values():
            spec["labels"] = {**(spec.get("labels") or {}), **main.labels}
    if not networks:
        out.pop("networks")
    return out


def sidecar_specs(model: dict[str, Any], task: str, timeout: float) -> dict[str, ImageSpec]:
    """Service -> what to build, for the services other than main built from a context (the
    merged model's `build`: context, dockerfile or dockerfile_inline, args, target)."""
    specs = {}
    for name, s in (model.get("services") or {}).items():
        build = s.get("build")
        if name == MAIN or not build:
            continue
        context = Path(build["context"])
        dockerfile = str(build.get("dockerfile") or "Dockerfile")
        inline = build.get("dockerfile_inline")
        if Path(dockerfile).is_absolute():
            dockerfile = os.path.relpath(dockerfile, context)
        args = build.get("args") or {}
        specs[name] = ImageSpec(
            f"sidecar {name} of task {task}",
            context,
            "Dockerfile" if inline else dockerfile,
            timeout,
            task,
            build_args=tuple(sorted((k, str(v)) for k, v in args.items() if v is not None)),
            target=build.get("target"),
            inline=inline,
        )
    return specs


@dataclass
class ComposeProject:
    """One attempt's project: its model, and the Compose commands run on it."""

    client: Any  # docker.DockerClient
    name: str
    model: dict[str, Any]
    env_dir: Path
    timeout: float  # seconds for the services to be healthy
    main_id: str = field(default="", init=False)

    def create(self) -> str:
        """Networks, volumes and containers made (none started); main's container id."""
        proc = self._compose(["create", "--no-build", "--pull", "never"], timeout=300)
        if proc.returncode != 0:
            kind = "config" if "invalid" in proc.stderr.lower() else "setup"
            raise ComposeError(f"compose create failed: {_last_lines(proc.stderr)}", kind=kind)
        found = self.client.api.containers(
            all=True,
            filters={"label": [f"{PROJECT_LABEL}={self.name}", f"{SERVICE_LABEL}={MAIN}"]},
        )
        if not found:
            raise ComposeError("compose created no main container")
        self.main_id = found[0]["Id"]
        return self.main_id

    def up(self) -> None:
        """Start every service in depends_on order; wait until each is running (healthy, if it
        has a healthcheck)."""
        wait = max(int(self.timeout), 60)
        args = ["up", "--detach", "--wait", "--wait-timeout", str(wait), "--no-build"]
        proc = self._compose([*args, "--pull", "never", "--no-recreate"], timeout=wait + 60)
        if proc.returncode != 0:
            raise ComposeError(f"compose up failed: {_last_lines(proc.stderr)}{self._unhealthy()}")

    def remove(self) -> None:
        """Every container, network and volume of the project, gone (the engine's API, not the
        CLI: it works whatever state the files and the project are in)."""
        remove_project(self.client, self.name)

    def _unhealthy(self) -> str:
        """The services that are not running or not healthy, with their health log's last line."""
        found = self.client.api.containers(
            all=True, filters={"label": f"{PROJECT_LABEL}={self.name}"}
        )
        lines = []
        for c in found:
            try:
                state = self.client.api.inspect_container(c["Id"])["State"]
            except (APIError, NotFound):
                continue
            health = state.get("Health") or {}
            if state.get("Status") == "running" and health.get("Status") in (None, "healthy"):
                continue
            log = (health.get("Log") or [{}])[-1].get("Output", "").strip()[:200]
            service = (c.get("Labels") or {}).get(SERVICE_LABEL, c["Id"][:12])
            status = health.get("Status") or f"{state.get('Status')} (exit {state.get('ExitCode')})"
            lines.append(f"{service}: {status}" + (f", last check: {log}" if log else ""))
        return ("; " + "; ".join(lines)) if lines else ""

    def _compose(self, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        cmd = ["docker", "compose", "-p", self.name, "--project-directory", str(self.env_dir)]
        env = {k: os.environ[k] for k in _ENV_PASSED if k in os.environ}
        return _run(
            [*cmd, "-f", "-", *args], env=env, timeout=timeout, stdin=json.dumps(self.model)
        )


def remove_project(client: Any, project: str) -> None:
    """Remove a Compose project's containers (with their anonymous volumes), networks, volumes."""
    label = {"label": f"{PROJECT_LABEL}={project}"}
    for c in client.api.containers(all=True, filters=label):
        _retry(lambda cid=c["Id"]: client.api.remove_container(cid, force=True, v=True))
    for n in client.api.networks(filters=label):
        _retry(lambda nid=n["Id"]: client.api.remove_network(nid))
    for v in (client.api.volumes(filters=label) or {}).get("Volumes") or []:
        _retry(lambda name=v["Name"]: client.api.remove_volume(name, force=True))


def _retry(remove: Any) -> None:
    """A removal the busy engine refuses for a moment is tried again; one already gone is done."""
    for wait in (0.5, 1.0, 2.0, 4.0, None):
        try:
            remove()
            return
        except NotFound:
            return
        except APIError:
            if wait is None:
                raise
            time.sleep(wait)


def _run(
    args: list[str], *, env: dict[str, str], timeout: float, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            args,
            input=stdin,
            capture_output=True,
            text=True,
            errors="replace",
            env=env,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stderr if isinstance(exc.stderr, str) else ""
        return subprocess.CompletedProcess(args, 124, "", f"{out}\ntook longer than {timeout:g} s")
    except OSError as exc:
        return subprocess.CompletedProcess(args, 127, "", str(exc))


def _last_lines(text: str, n: int = 6) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:]) or "no output"
