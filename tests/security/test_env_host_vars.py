"""Hole 3, a task's ${VAR} reads the runner's environment: it resolves only names a person
allowed (--allow-env, BENCHFLOW_ALLOW_ENV; from `bench serve` only the admin's), a model
provider's key never, and otherwise the task is refused naming the file, the field, the variable
and the fix. The rule's cases here; the CLI's refusal in test_env_cli.py, a sandbox's in
test_env_sandbox_docker.py."""

from __future__ import annotations

import pytest

from runs.host_env import ALLOW_ENV_VAR, host_env, setting_names, setting_problems
from runs.tasks.load import TaskError, load_task
from tests.conftest import write_task

SECRET = "postgres://bench:pw-hole3-7f3a9c1e5b@db.internal:5432/bench"
ENV = {
    "DATABASE_URL": SECRET,
    "PLAIN": "plain-value",
    "OPENAI_API_KEY": "sk-host-0123456789abcdef0123",
}


def _load(tmp_path, toml: str, allowed=(), environ=ENV, on_server=False):
    task = write_task(tmp_path, "t", test_sh="true\n", toml=toml)
    return task, lambda: load_task(task, host_env(allowed, environ, on_server=on_server))


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ("[environment.env]", "environment.env.LEAK"),
        ("[verifier.env]", "verifier.env.LEAK"),
        ("[solution.env]", "solution.env.LEAK"),
    ],
)
def test_a_variable_not_allowed_is_refused_naming_file_field_variable_and_fix(
    tmp_path, table, field
):
    task, load = _load(tmp_path, f'{table}\nLEAK = "${{DATABASE_URL}}"\n')
    with pytest.raises(TaskError) as raised:
        load()
    (problem,) = raised.value.problems
    assert problem.file == task / "task.toml" and problem.field == field
    assert "${DATABASE_URL}" in problem.message
    assert "--allow-env DATABASE_URL" in problem.fix and ALLOW_ENV_VAR in problem.fix
    assert SECRET not in str(problem)


@pytest.mark.parametrize(
    ("value", "allowed", "resolved"),
    [
        ("${DATABASE_URL:-none}", (), "none"),  # not allowed: unset here, its default
        ("${DATABASE_URL}", ("DATABASE_URL",), SECRET),
        ("x-${PLAIN}-y", ("PLAIN",), "x-plain-value-y"),
        ("${NOT_SET:-d}", ("NOT_SET",), "d"),
        ("${PLAIN:-d}", ("PLAIN",), "plain-value"),
    ],
)
def test_what_a_variable_resolves_to(tmp_path, value, allowed, resolved):
    _task, load = _load(tmp_path, f'[environment.env]\nV = "{value}"\n', allowed)
    assert load().sandbox.env == {"V": resolved}


def test_an_allowed_variable_that_is_not_set_is_refused(tmp_path):
    _task, load = _load(tmp_path, '[environment.env]\nV = "${NOT_SET}"\n', ("NOT_SET",))
    with pytest.raises(TaskError, match="allowed but not set"):
        load()


def test_a_provider_key_is_never_allowed_nor_read(tmp_path):
    assert host_env(["OPENAI_API_KEY", "PLAIN"], ENV).allowed == {"PLAIN"}
    assert "provider's key" in setting_problems({ALLOW_ENV_VAR: "PLAIN,OPENAI_API_KEY"})[0]
    _task, load = _load(
        tmp_path, '[environment.env]\nK = "${OPENAI_API_KEY}"\n', ("OPENAI_API_KEY",)
    )
    with pytest.raises(TaskError, match="model provider's key into the sandbox"):
        load()


def test_from_bench_serve_only_the_admins_setting_counts(tmp_path):
    environ = {**ENV, ALLOW_ENV_VAR: "PLAIN"}
    assert setting_names(environ) == ["PLAIN"]
    assert host_env(["DATABASE_URL"], environ).allowed == {"PLAIN", "DATABASE_URL"}
    served = host_env(["DATABASE_URL"], environ, on_server=True)
    assert served.allowed == {"PLAIN"}
    _task, load = _load(
        tmp_path, '[environment.env]\nL = "${DATABASE_URL}"\n', ["DATABASE_URL"], environ, True
    )
    with pytest.raises(TaskError) as raised:
        load()
    assert "an admin lists DATABASE_URL" in raised.value.problems[0].fix


def test_an_allowed_secret_given_to_a_shared_verifier_is_warned_about(tmp_path):
    _task, load = _load(tmp_path, '[verifier.env]\nJUDGE = "${DATABASE_URL}"\n', ("DATABASE_URL",))
    task = load()
    assert task.verifier.env == {"JUDGE": SECRET}
    (warning,) = task.warnings
    assert warning.field == "verifier.env.JUDGE" and "the agent can read it" in warning.message


def test_a_compose_file_reads_only_allowed_variables(tmp_path):
    task = write_task(tmp_path, "t", test_sh="true\n")
    (task / "environment" / "docker-compose.yaml").write_text(
        "services:\n  db:\n    image: postgres\n    environment:\n"
        "      - URL=${DATABASE_URL}\n      - P=${PLAIN}\n      - D=${OTHER:-x}\n"
    )
    with pytest.raises(TaskError) as raised:
        load_task(task, host_env(["PLAIN"], ENV))
    (problem,) = raised.value.problems
    assert problem.file.name == "docker-compose.yaml" and problem.field == "line 5"
    assert "${DATABASE_URL}" in problem.message and "--allow-env DATABASE_URL" in problem.fix
    loaded = load_task(task, host_env(["PLAIN", "DATABASE_URL"], ENV))
    assert loaded.compose_env == {"DATABASE_URL": SECRET, "PLAIN": "plain-value"}
    from runs.sandboxes.compose import interpolation_env

    given = interpolation_env({"DOCKER_HOST": "tcp://evil:2375"}, loaded.compose_env, {})
    assert given["PLAIN"] == "plain-value" and given.get("DOCKER_HOST") != "tcp://evil:2375"
    assert "OPENAI_API_KEY" not in given
