"""Harbor 0.26 / BenchFlow task keys (runs/tasks/harbor_keys.py): accepted, honoured or warned
about, MCP servers parsed, typos still refused; and docker_image beside a Dockerfile."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from docker.errors import ImageNotFound

from runs.sandboxes.images import prebuilt_or_build
from runs.tasks.load import load_task
from tests.runs.tasks.test_tasks import problems_of, split_task

# A Terminal-Bench 2.1 task.toml as published (every key of it), with its empty MCP list.
TB21 = """version = "1.0"

[metadata]
author_name = "Terminal Bench"
difficulty = "medium"
tags = ["coding"]
expert_time_estimate_min = 30.0

[verifier]
timeout_sec = 900.0

[agent]
timeout_sec = 900.0

[environment]
build_timeout_sec = 600.0
docker_image = "alexgshaw/password-recovery:20251031"
cpus = 1
memory_mb = 2048
storage_mb = 10240
gpus = 0
allow_internet = true
mcp_servers = []

[verifier.env]

[environment.env]

[solution.env]
"""


def warnings_of(folder: Path) -> dict[str, str]:
    return {w.field: w.message for w in load_task(folder).warnings}


def test_a_terminal_bench_2_1_task_toml_loads_with_its_empty_mcp_list(tmp_path: Path) -> None:
    task = load_task(split_task(tmp_path, TB21))
    assert task.sandbox.mcp_servers == ()
    assert task.sandbox.docker_image == "alexgshaw/password-recovery:20251031"
    assert task.environment_dir == task.path / "environment"  # the Dockerfile is kept
    assert [w.field for w in task.warnings] == ["environment.storage_mb"]
    assert "not enforced" in task.warnings[0].message


def test_mcp_servers_are_read_from_environment_tables(tmp_path: Path) -> None:
    toml = """
[[environment.mcp_servers]]
name = "tools"
transport = "stdio"
command = "python3"
args = ["/opt/server.py"]

[[environment.mcp_servers]]
name = "remote"
transport = "http"
url = "http://mcp-server:8000/mcp"
"""
    servers = load_task(split_task(tmp_path, toml)).sandbox.mcp_servers
    assert [(s.name, s.transport) for s in servers] == [
        ("tools", "stdio"),
        ("remote", "streamable-http"),
    ]
    assert servers[0].command == "python3" and servers[0].args == ("/opt/server.py",)
    assert servers[1].url == "http://mcp-server:8000/mcp"


@pytest.mark.parametrize(
    "server, field, words",
    [
        ('name = "a"\ntransport = "sse"', "url", "needs a url"),
        ('name = "a"\ntransport = "stdio"', "command", "needs a command"),
        ('name = "a"\ntransport = "grpc"\nurl = "x"', "transport", "unknown transport"),
        ('transport = "sse"\nurl = "http://x"', "name", "unique name"),
        ('name = "a"\nurl = "http://x"\ncomand = "y"', "comand", "did you mean 'command'"),
    ],
)
def test_a_broken_mcp_server_is_a_problem_naming_its_field(
    tmp_path: Path, server: str, field: str, words: str
) -> None:
    problems = problems_of(split_task(tmp_path, f"[[environment.mcp_servers]]\n{server}\n"))
    assert [p.field for p in problems] == [f"environment.mcp_servers[0].{field}"]
    assert words in problems[0].message


def test_a_typo_of_a_known_key_still_gets_did_you_mean(tmp_path: Path) -> None:
    problems = problems_of(split_task(tmp_path, "[environment]\nmcp_server = []\n"))
    assert [p.field for p in problems] == ["environment.mcp_server"]
    assert "did you mean 'mcp_servers'" in problems[0].message


def test_an_allowlist_runs_with_the_network_on_and_says_so(tmp_path: Path) -> None:
    toml = '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n'
    task = load_task(split_task(tmp_path, toml))
    assert task.sandbox.network_mode == "public"
    assert "the sandbox gets the full network" in warnings_of(task.path)["environment.network_mode"]


@pytest.mark.parametrize(
    "toml, field",
    [
        ("[environment]\ngpus = 2\n", "environment.gpus"),
        ('[environment]\ntpu = { type = "v6e", topology = "2x4" }\n', "environment.tpu"),
        ('[agent]\nnetwork_mode = "no-network"\n', "agent.network_mode"),
    ],
)
def test_keys_not_honoured_load_with_a_warning_saying_what_differs(
    tmp_path: Path, toml: str, field: str
) -> None:
    assert field in warnings_of(split_task(tmp_path, toml))


def test_a_separate_verifier_is_honoured_with_no_warning(tmp_path: Path) -> None:
    from runs.tasks.verifier_env import verifier_environment

    # given the math-modelling set's keys: separate mode, tests/Dockerfile, a no-network task
    toml = (
        'artifacts = ["/root/results/out.json"]\n[verifier]\ntimeout_sec = 180.0\n'
        'environment_mode = "separate"\n[verifier.env]\n'
        "[environment]\nallow_internet = false\ncpus = 2\nmemory_mb = 4096\n"
    )
    folder = split_task(tmp_path, toml)
    (folder / "tests" / "Dockerfile").write_text("FROM python:3.12-slim\nCOPY . /tests/\n")
    task = load_task(folder)
    assert task.warnings == () and task.verifier.separate
    # then its verifier is tests/ built, holding the tests, with the task's resources and network
    env = verifier_environment(task)
    assert env is not None and env.image is None and env.context == folder / "tests"
    assert env.bundled_tests and env.source.endswith("tests/Dockerfile")
    assert (env.sandbox.cpus, env.sandbox.memory_mb, env.sandbox.network_mode) == (
        2.0,
        4096,
        "no-network",
    )


@pytest.mark.parametrize(
    ("toml", "image", "bundled", "network", "memory"),
    [
        # an environment block implies separate; its own image holds the tests
        (
            '[verifier.environment]\ndocker_image = "judge:1"\nmemory_mb = 512\n',
            "judge:1",
            True,
            "public",
            512,
        ),
        # its own resources, the task's image (tests put at /tests), the phase's network
        (
            '[verifier]\nnetwork_mode = "no-network"\n[verifier.environment]\ncpus = 1\n',
            None,
            False,
            "no-network",
            2048,
        ),
        # BenchFlow's names for the same keys
        ('[verifier]\nsandbox_mode = "separate"\n', None, False, "public", 2048),
    ],
)
def test_a_separate_verifiers_image_and_resources_follow_harbors_order(
    tmp_path: Path, toml: str, image: str | None, bundled: bool, network: str, memory: int
) -> None:
    from runs.tasks.verifier_env import verifier_environment

    task = load_task(split_task(tmp_path, toml))
    env = verifier_environment(task)
    assert env is not None and task.warnings == ()
    assert (env.image, env.bundled_tests, env.context) == (image, bundled, None)
    assert (env.sandbox.network_mode, env.sandbox.memory_mb) == (network, memory)


def test_shared_mode_with_an_environment_of_its_own_is_a_problem(tmp_path: Path) -> None:
    toml = '[verifier]\nenvironment_mode = "shared"\n[verifier.environment]\ncpus = 1\n'
    problems = problems_of(split_task(tmp_path, toml))
    assert [p.field for p in problems] == ["verifier.environment_mode"]
    assert 'write environment_mode = "separate"' in problems[0].fix


def test_a_verifier_of_several_containers_is_a_problem(tmp_path: Path) -> None:
    folder = split_task(tmp_path, '[verifier]\nenvironment_mode = "separate"\n')
    (folder / "tests" / "docker-compose.yaml").write_text("services: {}\n")
    [problem] = problems_of(folder)
    assert problem.file.name == "docker-compose.yaml" and "tests/Dockerfile" in problem.fix


def test_a_multi_step_task_asking_for_separate_verifiers_says_what_runs_instead(
    tmp_path: Path,
) -> None:
    folder = split_task(
        tmp_path, '[verifier]\nenvironment_mode = "separate"\n[[steps]]\nname = "one"\n'
    )
    (folder / "steps" / "one").mkdir(parents=True)
    (folder / "steps" / "one" / "instruction.md").write_text("Do one.\n")
    warned = warnings_of(folder)
    assert "run in the agent's own sandbox here" in warned["verifier.environment_mode"]


def test_collect_hooks_are_read_with_harbors_defaults(tmp_path: Path) -> None:
    toml = (
        '[[verifier.collect]]\ncommand = "pg_dump > /logs/artifacts/db.sql"\n'
        '[[verifier.collect]]\ncommand = "cp /var/log/x /tmp"\nservice = "db"\ntimeout_sec = 5\n'
    )
    task = load_task(split_task(tmp_path, toml))
    assert [(h.service, h.timeout_sec) for h in task.verifier.collect] == [
        ("main", 60.0),
        ("db", 5.0),
    ]
    assert task.warnings == ()


def test_an_llm_judge_verifier_cannot_run_here(tmp_path: Path) -> None:
    problems = problems_of(split_task(tmp_path, '[verifier]\ntype = "llm-judge"\n'))
    assert [p.field for p in problems] == ["verifier.type"]


def test_a_healthcheck_is_read_with_harbor_defaults(tmp_path: Path) -> None:
    toml = '[environment.healthcheck]\ncommand = "test -f /tmp/ready"\nretries = 5\n'
    check = load_task(split_task(tmp_path, toml)).sandbox.healthcheck
    assert check is not None and (check.command, check.retries, check.interval_sec) == (
        "test -f /tmp/ready",
        5,
        5.0,
    )


class _Images:
    """A docker client whose image store holds `present`."""

    def __init__(self, *present: str) -> None:
        self.api = SimpleNamespace(inspect_image=self._inspect)
        self.present = present

    def _inspect(self, name: str) -> dict:
        if name not in self.present:
            raise ImageNotFound(name)
        return {"Id": name}


@pytest.mark.parametrize(
    "toml_image, present, expected, why",
    [
        ("tb/task:1", ("tb/task:1",), "tb/task:1", "runs as is"),
        ("tb/task:1", (), None, "built instead"),
        ("debian:bookworm-slim", ("debian:bookworm-slim",), None, "own FROM image"),
    ],
)
def test_docker_image_beside_a_dockerfile(
    tmp_path: Path, toml_image: str, present: tuple[str, ...], expected: str | None, why: str
) -> None:
    # given a task with both (its Dockerfile is FROM debian:bookworm-slim)
    task = load_task(split_task(tmp_path, f'[environment]\nimage = "{toml_image}"\n'))
    # when the image is chosen
    image, reason = prebuilt_or_build(task, _Images(*present))  # type: ignore[arg-type]
    # then
    assert image == expected and why in reason


def test_docker_image_alone_is_the_image(tmp_path: Path) -> None:
    folder = split_task(tmp_path, '[environment]\ndocker_image = "tb/task:1"\n')
    (folder / "environment" / "Dockerfile").unlink()
    task = load_task(folder)
    assert task.environment_dir is None
    assert prebuilt_or_build(task, _Images()) == ("tb/task:1", "")  # type: ignore[arg-type]


def test_a_terminal_bench_1_task_is_refused_with_how_to_convert_it() -> None:
    from tests.conftest import REPO

    folder = REPO / "tests" / "tasksets" / "tb1-layout" / "hello-world"
    [problem] = problems_of(folder)
    assert problem.file == folder / "task.yaml"
    assert problem.message.startswith("a Terminal-Bench 1 task (task.yaml, run-tests.sh")
    assert f"harbor tasks migrate -i {folder.parent} -o {folder.parent}-harbor" in problem.fix
    # a folder of them is a folder of tasks, each refused the same way, not "holds no tasks"
    from runs.tasks.load import TaskError, load_tasks

    with pytest.raises(TaskError) as raised:
        load_tasks(folder.parent)
    assert [p.file for p in raised.value.problems] == [folder / "task.yaml"]
