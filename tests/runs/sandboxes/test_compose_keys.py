"""environment/docker-compose.yaml: what runs/tasks/compose_keys.py refuses (each with its
reason), what it lets Compose honour, and the model runs/sandboxes/compose.py gives Compose."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.sandboxes.compose import MainSettings, finalize, sidecar_specs
from runs.tasks.load import load_task
from tests.runs.tasks.test_tasks import problems_of, split_task

HONOURED = """services:
  main:
    build:
      context: .
    image: ${MAIN_IMAGE_NAME}
    networks: [airgap]
    depends_on:
      db:
        condition: service_healthy
    environment:
      - DB_HOST=db
    volumes:
      - shared:/shared
      - ./data:/data:ro
      - ${HOST_ARTIFACTS_PATH}:/out
  db:
    build:
      context: ./db
    networks: [airgap]
    expose: ["5432"]
    healthcheck:
      test: ["CMD", "true"]
  mcp:
    image: python:3.11-slim
    network_mode: service:db
networks:
  airgap:
    internal: true
volumes:
  shared:
"""


def compose_task(tmp_path: Path, compose: str, toml: str = "") -> Path:
    folder = split_task(tmp_path, toml)
    (folder / "environment" / "docker-compose.yaml").write_text(compose)
    return folder


def test_what_compose_honours_loads_with_the_file_and_no_warning(tmp_path: Path) -> None:
    folder = compose_task(tmp_path, HONOURED)
    task = load_task(folder)
    assert task.compose_file == folder / "environment" / "docker-compose.yaml"
    assert task.warnings == ()


def test_a_yml_beside_the_dockerfile_is_the_tasks_content_not_a_compose_file(
    tmp_path: Path,
) -> None:
    folder = split_task(tmp_path, "")
    (folder / "environment" / "docker-compose.yml").write_text("services: {a: {ports: [1]}}\n")
    assert load_task(folder).compose_file is None


@pytest.mark.parametrize(
    ("service", "field", "said"),
    [
        ('ports: ["8000:8000"]', "services.db.ports", "trials run side by side would collide"),
        ("container_name: db", "services.db.container_name", "a fixed container name"),
        ("network_mode: host", "services.db.network_mode", "this machine's network"),
        ("network_mode: container:abc", "services.db.network_mode", "a container outside the task"),
        ("privileged: true", "services.db.privileged", "agents are untrusted"),
        ("pid: host", "services.db.pid", "pid namespace"),
        ("devices: [/dev/kvm]", "services.db.devices", "devices"),
        ("gpus: all", "services.db.gpus", "GPUs"),
        (
            "volumes: [/var/run/docker.sock:/var/run/docker.sock]",
            "services.db.volumes[0]",
            "/var/run/docker.sock",
        ),
        ("volumes: [../../secret:/s]", "services.db.volumes[0]", "outside the task's environment/"),
        ("build: {context: ../..}", "services.db.build", "outside environment/"),
        (
            "deploy: {resources: {reservations: {devices: [{capabilities: [gpu]}]}}}",
            "services.db.deploy",
            "GPUs",
        ),
    ],
)
def test_a_service_key_that_cannot_be_honoured_is_refused_with_its_reason(
    tmp_path: Path, service: str, field: str, said: str
) -> None:
    folder = compose_task(tmp_path, f"services:\n  db:\n    image: x\n    {service}\n")
    [problem] = problems_of(folder)
    assert problem.file == folder / "environment" / "docker-compose.yaml"
    assert problem.field == field
    assert said in problem.message
    assert problem.fix


@pytest.mark.parametrize(
    ("top", "field"),
    [
        ("networks: {n: {external: true}}", "networks.n.external"),
        ("networks: {n: {driver: macvlan}}", "networks.n.driver"),
        ("networks: {n: {ipam: {config: [{subnet: 10.9.0.0/24}]}}}", "networks.n.ipam"),
        ("volumes: {v: {external: true}}", "volumes.v.external"),
        (
            "volumes: {v: {driver_opts: {type: none, o: bind, device: /srv}}}",
            "volumes.v.driver_opts",
        ),
        ("secrets: {s: {file: /etc/shadow}}", "secrets.s.file"),
        ("include: [other.yaml]", "include"),
    ],
)
def test_a_top_level_key_reaching_outside_the_task_is_refused(
    tmp_path: Path, top: str, field: str
) -> None:
    folder = compose_task(tmp_path, f"services:\n  db:\n    image: x\n{top}\n")
    [problem] = problems_of(folder)
    assert problem.field == field


@pytest.mark.parametrize(
    "main",
    [
        "build: {context: ., dockerfile: Other.Dockerfile}",
        "build: {context: ., args: {X: 1}}",
        "build: ./sub",
        "image: ubuntu:24.04",
    ],
)
def test_main_is_built_from_environment_only(tmp_path: Path, main: str) -> None:
    [problem] = problems_of(compose_task(tmp_path, f"services:\n  main:\n    {main}\n"))
    assert problem.field in ("services.main.build", "services.main.image")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("not: [a, mapping of services]", "must be a mapping with a services: mapping"),
        ("services:\n  a: [1\n", "YAML syntax error at line"),
        ("services:\n  a: 3\n", "must be a mapping"),
    ],
)
def test_a_malformed_compose_file_is_a_problem(tmp_path: Path, text: str, said: str) -> None:
    [problem] = problems_of(compose_task(tmp_path, text))
    assert said in problem.message


def test_a_model_key_or_an_unset_variable_is_a_warning(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SIM_USER_MODEL", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-x")
    text = (
        "services:\n  user:\n    image: x\n    environment:\n"
        "      - KEY=${ANTHROPIC_API_KEY}\n      - MODEL=${SIM_USER_MODEL}\n"
        "      - OK=${GIVEN}\n      - DEFAULTED=${NOT_SET:-x}\n"
    )
    from runs.host_env import host_env

    task = load_task(
        compose_task(tmp_path, text, '[environment]\nenv = { GIVEN = "1" }\n'),
        host_env(["SIM_USER_MODEL"]),
    )
    said = [w.message for w in task.warnings]
    assert said == [
        "${ANTHROPIC_API_KEY} is a model provider's key, which never enters a sandbox here: it is empty",
        "${SIM_USER_MODEL} is not set in this environment: Compose makes it empty",
    ]


# --- the model Compose is given -------------------------------------------------------------

MERGED = {
    "name": "bf-t",
    "services": {
        "main": {
            "build": {"context": "/t/environment", "dockerfile": "Dockerfile"},
            "image": "benchflow-env:abc",
            "command": ["sleep", "infinity"],
            "environment": {"DB_HOST": "db"},
            "volumes": [
                {"type": "volume", "source": "shared", "target": "/shared"},
                {"type": "bind", "source": "/x", "target": "/logs/agent"},
            ],
            "networks": {"airgap": None},
        },
        "db": {"build": {"context": "/t/environment/db"}, "networks": {"airgap": None}},
        "cache": {"image": "redis:7", "labels": {"theirs": "1"}},
    },
    "networks": {"airgap": {"name": "bf-t_airgap", "internal": True}},
    "volumes": {"shared": {"name": "bf-t_shared"}},
}
LABELS = {"benchflow.job": "j", "benchflow.attempt": "a"}
SIDECARS = {"db": "benchflow-env:0123456789abcdef"}
SETTINGS = MainSettings(
    image="benchflow-env:abc-claude",
    labels=LABELS,
    binds={
        "/jobs/a/agent": {"bind": "/logs/agent", "mode": "rw"},
        "/sol": {"bind": "/solution", "mode": "ro"},
    },
    env={"TASK_VAR": "1"},
    cpus=2.0,
    memory_mb=1024,
    workdir=None,
)


def test_every_container_network_and_volume_carries_the_attempts_labels() -> None:
    out = finalize(MERGED, SETTINGS, SIDECARS)
    assert all(s["labels"].items() >= LABELS.items() for s in out["services"].values())
    assert out["services"]["cache"]["labels"]["theirs"] == "1"
    # cache is on the default network, declared so that it is labelled too
    assert set(out["networks"]) == {"airgap", "default"}
    assert out["networks"]["default"]["name"] == "bf-t_default"
    assert all(n["labels"] == LABELS for n in out["networks"].values())
    assert out["volumes"]["shared"]["labels"] == LABELS
    assert MERGED["services"]["cache"]["labels"] == {"theirs": "1"}  # not changed in place


def test_main_runs_the_agents_image_with_the_runners_mounts_and_limits() -> None:
    main = finalize(MERGED, SETTINGS, SIDECARS)["services"]["main"]
    assert "build" not in main and main["image"] == "benchflow-env:abc-claude"
    assert main["init"] is True and main["pull_policy"] == "never"
    assert main["environment"] == {"DB_HOST": "db", "TASK_VAR": "1"}
    assert main["volumes"] == [
        {"type": "volume", "source": "shared", "target": "/shared"},
        {"type": "bind", "source": "/jobs/a/agent", "target": "/logs/agent", "read_only": False},
        {"type": "bind", "source": "/sol", "target": "/solution", "read_only": True},
    ]  # the runner's /logs/agent replaced the task's
    assert main["deploy"]["resources"]["limits"] == {"cpus": 2.0, "memory": "1024M"}


def test_a_built_sidecar_runs_the_runners_own_build_and_compose_builds_nothing() -> None:
    out = finalize(MERGED, SETTINGS, SIDECARS)
    assert out["services"]["db"]["image"] == "benchflow-env:0123456789abcdef"
    assert not any("build" in s for s in out["services"].values())
    assert out["services"]["cache"]["image"] == "redis:7"


def test_a_sidecars_build_is_read_from_the_merged_model() -> None:
    model = {
        "services": {
            **MERGED["services"],
            "api": {
                "build": {
                    "context": "/t/environment/api",
                    "dockerfile": "/t/environment/api/docker/Dockerfile.api",
                    "args": {"MODE": "test", "UNSET": None},
                    "target": "run",
                }
            },
            "inline": {"build": {"context": "/t/environment", "dockerfile_inline": "FROM x\n"}},
        }
    }
    specs = sidecar_specs(model, "t", 60.0)
    assert set(specs) == {"db", "api", "inline"}  # main is the runner's, cache is an image
    api = specs["api"]
    assert (str(api.context), api.dockerfile) == ("/t/environment/api", "docker/Dockerfile.api")
    assert api.options() == ("--build-arg=MODE=test", "--target=run")
    assert specs["inline"].inline == "FROM x\n" and specs["db"].dockerfile == "Dockerfile"


def test_a_no_network_task_takes_main_off_every_network() -> None:
    settings = MainSettings(**{**SETTINGS.__dict__, "no_network": True})
    out = finalize(MERGED, settings, SIDECARS)
    main = out["services"]["main"]
    assert main["network_mode"] == "none" and "networks" not in main
    assert out["services"]["db"]["networks"] == {"airgap": None}  # the sidecars keep theirs
