"""A task's environment/docker-compose.yaml, checked for what this runner cannot honour.

Docker Compose itself merges the file over the main service (as Harbor does) and runs every
service; this module only reads the task's own file for the keys that cannot be given to a
sandbox here, each refused with its reason: a host port or a fixed container name (trials run
side by side would collide), the host's network, devices or namespaces (agents are untrusted),
a host path or an external network or volume (outside the task), a main service built or
imaged otherwise than from environment/ (the runner builds and caches it). Everything else is
Compose's to honour.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from runs.env_names import env_problem
from runs.host_env import HostEnv
from runs.secrets import MODEL_KEY_VARS
from runs.tasks.checker import Checker

COMPOSE_FILE = "docker-compose.yaml"  # Harbor's name; a .yml there is the task's own content
MAIN = "main"
# The variables Harbor's base file gives a task's compose file (runs/sandboxes/compose.py sets them)
HARBOR_VARS = frozenset(
    "MAIN_IMAGE_NAME CONTEXT_DIR PREBUILT_IMAGE_NAME CPUS MEMORY HOST_VERIFIER_LOGS_PATH "
    "HOST_AGENT_LOGS_PATH HOST_ARTIFACTS_PATH ENV_VERIFIER_LOGS_PATH ENV_AGENT_LOGS_PATH "
    "ENV_ARTIFACTS_PATH".split()
)
_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:?[-?+][^}]*)?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_SIDE_BY_SIDE = "trials run side by side would collide"
_UNTRUSTED = "agents are untrusted: it would give the task's containers this machine's"

# service key -> (what it does here, the fix): refused whatever its value
REFUSED_SERVICE_KEYS: dict[str, tuple[str, str]] = {
    "ports": (
        f"publishes the service on this machine's network interfaces, where {_SIDE_BY_SIDE} and anyone could reach it",
        "use expose: services reach each other by name on the task's network",
    ),
    "container_name": (
        f"a fixed container name: {_SIDE_BY_SIDE}",
        "remove it: services reach each other by their service name",
    ),
    "privileged": (f"{_UNTRUSTED} devices and kernel", "remove it"),
    "devices": (f"{_UNTRUSTED} devices", "remove it"),
    "device_cgroup_rules": (f"{_UNTRUSTED} devices", "remove it"),
    "cgroup_parent": (f"{_UNTRUSTED} cgroups", "remove it"),
    "gpus": ("asks for GPUs; this machine has none", "remove it"),
    "runtime": ("names a container runtime other than Docker's default", "remove it"),
}
_HOST_NAMESPACES = ("pid", "ipc", "uts", "userns_mode", "cgroup")
# A sidecar's build: what runs/sandboxes/compose.py builds from (its image is the runner's own
# build of the context, as a task's); those of no weight offline (a registry cache, labels, the
# platform of this machine's one engine) are accepted and have no effect.
BUILD_KEYS = set(
    "context dockerfile dockerfile_inline args target labels cache_from cache_to no_cache pull "
    "platforms tags".split()
)


def compose_problems(c: Checker, env_dir: Path, given: set[str]) -> Path | None:
    """Check environment/docker-compose.yaml (problems and warnings into `c`); the file, or None.
    `given`: the variables the task's [environment] env sets (Compose reads them too)."""
    file = env_dir / COMPOSE_FILE
    if not file.is_file():
        return None
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        c.add(
            "", f"YAML syntax error{at}: {getattr(e, 'problem', None) or e}", "fix that line", file
        )
        return file
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
        fix = "write services: with main: (overrides) and the extra services"
        c.add("", "must be a mapping with a services: mapping", fix, file)
        return file
    if "include" in data:
        fix = "write the included services into this file"
        c.add(
            "include", "include: is not read here (its files' keys would go unchecked)", fix, file
        )
    for name, service in data["services"].items():
        if not isinstance(service, dict):
            c.add(f"services.{name}", "must be a mapping", "write key: value lines under it", file)
            continue
        _service(c, file, env_dir, str(name), service)
    for kind in ("networks", "volumes", "secrets", "configs"):
        _top_level(c, file, env_dir, kind, data.get(kind))
    _interpolation(c, file, given)
    return file


def _service(c: Checker, file: Path, env_dir: Path, name: str, s: dict[str, Any]) -> None:
    at = f"services.{name}"
    for var in _environment_names(s.get("environment")):
        if why := env_problem(var):
            fix = "remove it; give the value under a plain name of its own"
            c.add(f"{at}.environment.{var}", why, fix, file)
    for key, (why, fix) in REFUSED_SERVICE_KEYS.items():
        if key in s and s[key] not in (None, False, []):
            c.add(f"{at}.{key}", f"{key} is not honoured here: {why}", fix, file)
    for key in _HOST_NAMESPACES:
        if str(s.get(key, "")).startswith("host"):
            c.add(f"{at}.{key}", f"{key}: host {_UNTRUSTED} {key} namespace", "remove it", file)
    mode = str(s.get("network_mode") or "")
    if mode == "host" or mode.startswith("container:"):
        what = (
            "this machine's network (beside the model proxy and other trials)"
            if mode == "host"
            else "a container outside the task"
        )
        fix = "remove it, or write network_mode: none (or an internal network) to air-gap it"
        c.add(f"{at}.network_mode", f"network_mode {mode} would join {what}", fix, file)
    reservations = ((s.get("deploy") or {}).get("resources") or {}).get("reservations") or {}
    if isinstance(reservations, dict) and reservations.get("devices"):
        c.add(f"{at}.deploy", "reserves devices (GPUs); this machine has none", "remove them", file)
    for i, volume in enumerate(s.get("volumes") or []):
        if (source := _bind_source(volume)) is not None and not _inside(source, env_dir):
            what = f"mounts {source}, a path of this machine outside the task's environment/"
            c.add(
                f"{at}.volumes[{i}]",
                what,
                "copy what it needs into the image, or use a named volume",
                file,
            )
    build = s.get("build")
    context = build if isinstance(build, str) else (build or {}).get("context", ".")
    if build is not None and not _inside(str(context), env_dir):
        fix = "move the build context under environment/"
        c.add(f"{at}.build", f"its context {context} is outside environment/", fix, file)
    for key in sorted(set(build) - BUILD_KEYS if isinstance(build, dict) else ()):
        why = "the runner builds the image from its context, Dockerfile, args and target only"
        c.add(f"{at}.build.{key}", f"{key} is not honoured here: {why}", "remove it", file)
    if name == MAIN:
        _main(c, file, env_dir, s)


def _main(c: Checker, file: Path, env_dir: Path, s: dict[str, Any]) -> None:
    """The main service is the sandbox: the runner builds (and caches) it from environment/."""
    build, image = s.get("build"), s.get("image")
    if isinstance(build, dict):
        context = str(build.get("context", "."))
        other = {k: v for k, v in build.items() if k not in ("context", "dockerfile")}
        if (
            not _same_dir(context, env_dir)
            or build.get("dockerfile", "Dockerfile") != "Dockerfile"
            or other
        ):
            what = "main is built here from environment/Dockerfile only (cached, on this machine's base images)"
            fix = "remove main's build: (or keep context: . and dockerfile: Dockerfile)"
            c.add("services.main.build", what, fix, file)
    elif build is not None and not _same_dir(str(build), env_dir):
        c.add(
            "services.main.build",
            "main is built here from environment/ only",
            "remove main's build:",
            file,
        )
    if image is not None and str(image).strip() not in (
        "${MAIN_IMAGE_NAME}",
        "${PREBUILT_IMAGE_NAME}",
    ):
        what = f"main's image {image}: main runs the task's own image (environment/Dockerfile or docker_image)"
        fix = "remove it (or write image: ${MAIN_IMAGE_NAME}); set docker_image in task.toml for a prebuilt image"
        c.add("services.main.image", what, fix, file)


def _top_level(c: Checker, file: Path, env_dir: Path, kind: str, table: Any) -> None:
    for name, spec in (table or {}).items() if isinstance(table, dict) else ():
        if not isinstance(spec, dict):
            continue
        at = f"{kind}.{name}"
        if spec.get("external"):
            c.add(
                f"{at}.external",
                f"an external {kind[:-1]} is outside the task",
                "declare it in this file",
                file,
            )
        if kind == "networks" and spec.get("driver", "bridge") != "bridge":
            fix = "remove driver: (a bridge network, internal: true to air-gap it)"
            c.add(f"{at}.driver", f"driver {spec['driver']} is not a per-task network", fix, file)
        if kind == "networks" and ((spec.get("ipam") or {}).get("config")):
            fix = "remove ipam: services reach each other by name"
            c.add(f"{at}.ipam", f"a fixed subnet: {_SIDE_BY_SIDE}", fix, file)
        if kind == "volumes" and spec.get("driver_opts"):
            fix = "remove driver_opts: (a plain named volume)"
            c.add(
                f"{at}.driver_opts",
                "driver options (a bind of a host folder) reach outside the task",
                fix,
                file,
            )
        if (
            kind in ("secrets", "configs")
            and spec.get("file")
            and not _inside(str(spec["file"]), env_dir)
        ):
            fix = "keep the file under environment/"
            c.add(f"{at}.file", f"{spec['file']} is outside environment/", fix, file)


def _environment_names(environment: Any) -> list[str]:
    """The names a service's environment: sets (a mapping, or a list of NAME=VALUE / NAME)."""
    if isinstance(environment, dict):
        return [str(k) for k in environment]
    if isinstance(environment, list):
        return [str(item).split("=", 1)[0] for item in environment]
    return []


def _interpolation(c: Checker, file: Path, given: set[str]) -> None:
    """${VAR}s the runner cannot give: a model provider's key (never in a sandbox), one not
    allowed (runs/host_env.py) without a default, or one allowed but unset."""
    seen: set[str] = set()
    text = file.read_text(encoding="utf-8")
    for m in _REF.finditer(text):
        var, default = m.group(1) or m.group(3), m.group(2)
        if var in seen or var in HARBOR_VARS or var in given:
            continue
        seen.add(var)
        line = f"line {text.count(chr(10), 0, m.start()) + 1}"
        if var in MODEL_KEY_VARS:
            c.warn(
                line,
                f"${{{var}}} is a model provider's key, which never enters a sandbox here: it is empty",
                file,
            )
        elif var not in c.host.allowed and default is None:
            msg = (
                f"${{{var}}} reads this machine's environment, and {var} is not a variable tasks "
                "may read here"
            )
            c.add(line, msg, c.host.how_to_allow(var), file)
        elif var in c.host.allowed and var not in c.host.values and default is None:
            c.warn(line, f"${{{var}}} is not set in this environment: Compose makes it empty", file)


def compose_variables(file: Path | None, host: HostEnv) -> dict[str, str]:
    """The allowed variables of this machine the task's Compose file names, with their values:
    all that Compose may read of the host's environment (runs/sandboxes/compose.py)."""
    if file is None:
        return {}
    named = {m.group(1) or m.group(3) for m in _REF.finditer(file.read_text(encoding="utf-8"))}
    return {k: v for k, v in host.values.items() if k in named and k not in MODEL_KEY_VARS}


def _bind_source(volume: Any) -> str | None:
    """The host path of a bind mount (short or long syntax); None for a named volume."""
    if isinstance(volume, dict):
        return str(volume.get("source")) if volume.get("type") == "bind" else None
    source = str(volume).split(":", 1)[0] if ":" in str(volume) else None
    if source is None or not source.startswith((".", "/", "~", "$")):
        return None  # a named volume, or an anonymous one
    return source


def _inside(path: str, env_dir: Path) -> bool:
    """Whether a path written in the file stays under environment/ (Harbor's variables for the
    trial's own folders count as inside)."""
    if any(path.startswith((f"${{{v}}}", f"${v}")) for v in HARBOR_VARS):
        return True
    if path.startswith(("/", "~", "$")):
        return False
    return (env_dir / path).resolve().is_relative_to(env_dir.resolve())


def _same_dir(path: str, env_dir: Path) -> bool:
    return path in ("${CONTEXT_DIR}", "$CONTEXT_DIR") or (
        not path.startswith(("/", "~", "$")) and (env_dir / path).resolve() == env_dir.resolve()
    )
