"""Hole 2, environment names that are code: one rule (runs/env_names.py), and every way a name
enters a sandbox or a process of ours refuses what it refuses, with the reason."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchflow_site.cli import build_parser
from benchflow_site.worker_cli import pass_name
from runs.env_names import env_problem, name_problem
from runs.spec import RunSpec, env_pair, parse_form, value_problems
from runs.tasks.load import TaskError, load_task
from tests.conftest import write_task

CODE = [
    ("BASH_FUNC_echo%%", "not an environment name"),
    ("BASH_FUNC_echo", "exported functions"),
    ("BASH_ENV", "non-interactive bash"),
    ("ENV", "sh, dash"),
    ("SHELLOPTS", "xtrace"),
    ("PS4", "xtrace"),
    ("PROMPT_COMMAND", "before every prompt"),
    ("LD_PRELOAD", "ld.so"),
    ("LD_LIBRARY_PATH", "ld.so"),
    ("LD_AUDIT", "ld.so"),
    ("GCONV_PATH", "iconv"),
    ("GLIBC_TUNABLES", "tunables"),
    ("PYTHONSTARTUP", "python"),
    ("PYTHONPATH", "python"),
    ("PYTHONHOME", "python"),
    ("PYTHONWARNINGS", "imports"),
    ("NODE_OPTIONS", "--require"),
    ("PERL5OPT", "-M"),
    ("PERL5LIB", "perl"),
    ("RUBYOPT", "-r"),
    ("JAVA_TOOL_OPTIONS", "-javaagent"),
    ("GIT_SSH_COMMAND", "git"),
    ("GIT_CONFIG_COUNT", "core.fsmonitor"),
    ("GIT_CONFIG_KEY_0", "core.fsmonitor"),
    ("GIT_EXEC_PATH", "git"),
    ("LESSOPEN", "less"),
    ("OPENSSL_CONF", "engines"),
    ("ZDOTDIR", "zsh"),
]
NOT_NAMES = ["", "1ABC", "A-B", "A B", "A=B", "Ä", "A\nB", "A;rm -rf /", "A$(id)"]
DATA = [
    "HOME",
    "PATH",
    "LANG",
    "TZ",
    "MODE",
    "OPENAI_API_KEY",
    "PYTHONUNBUFFERED",
    "NODE_ENV",
    "GIT_AUTHOR_NAME",
    "_PRIVATE",
    "a1",
    "LDAP_URL",
    "ENVIRONMENT",
    "BASH_VERSION_WANTED",
]


@pytest.mark.parametrize(("name", "reason"), CODE)
def test_a_name_that_makes_a_shell_or_loader_run_code_is_refused_with_its_reason(name, reason):
    why = name_problem(name)
    assert why is not None and reason in why


@pytest.mark.parametrize("name", NOT_NAMES)
def test_only_plain_identifiers_are_names(name):
    assert "not an environment name" in (name_problem(name) or "")


@pytest.mark.parametrize("name", DATA)
def test_plain_data_names_pass(name):
    assert name_problem(name) is None


def test_a_value_an_old_bash_runs_as_a_function_is_refused():
    assert "older bash" in (env_problem("GREETING", "() { :; }; id") or "")
    assert env_problem("GREETING", "(hello) {world}") is None


# --- every entry point calls the rule -------------------------------------------------------------


def test_agent_env_on_the_command_line_is_refused_with_the_reason(capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(
            ["run", "tasks", "--agent-env", "BASH_FUNC_echo%%=() { cat /etc/passwd; }"]
        )
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--agent-env" in err and "not an environment name" in err and "fix:" in err


def test_agent_env_pairs_from_any_caller_are_checked():
    with pytest.raises(ValueError, match="BASH_ENV is code"):
        env_pair("BASH_ENV=/tmp/x")
    # the launch form's text
    spec, problems = parse_form({"tasks_dir": "t", "agent_env": ["LD_PRELOAD=/tmp/x.so"]})
    assert spec is None and problems[0].field == "agent_env" and "ld.so" in problems[0].text
    # a spec built in code (a resume's values, a recorded job's) passes the same check
    spec = RunSpec(tasks_dir=Path("t"), agent_env={"PROMPT_COMMAND": "id"})
    assert [p.field for p in value_problems(spec)] == ["agent_env"]


def test_worker_pass_env_and_allow_env_names_are_checked():
    with pytest.raises(ValueError, match="not an environment name"):
        pass_name("A-B")
    with pytest.raises(ValueError, match="code"):
        pass_name("LD_PRELOAD")
    with pytest.raises(ValueError, match="provider's key"):
        pass_name("OPENAI_API_KEY")
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["tasks", "check", "t", "--allow-env", "A B"])
    assert isinstance(parser, argparse.ArgumentParser)


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ('[environment.env]\n"BASH_FUNC_ls%%" = "() { id; }"\n', "environment.env.BASH_FUNC_ls%%"),
        ('[environment.env]\nBASH_ENV = "/app/x"\n', "environment.env.BASH_ENV"),
        ('[verifier.env]\nLD_PRELOAD = "/app/x.so"\n', "verifier.env.LD_PRELOAD"),
        ('[solution.env]\nNODE_OPTIONS = "--require /app/x"\n', "solution.env.NODE_OPTIONS"),
        (
            '[[environment.setup_commands]]\ncommand = "true"\nenv = { PYTHONSTARTUP = "/x" }\n',
            "environment.setup_commands[0].env.PYTHONSTARTUP",
        ),
        (
            '[[environment.mcp_servers]]\nname = "m"\ntransport = "stdio"\ncommand = "m"\n'
            'env = { PERL5OPT = "-Mx" }\n',
            "environment.mcp_servers[0].env.PERL5OPT",
        ),
    ],
)
def test_a_task_env_table_refuses_a_code_name_naming_the_file_and_field(tmp_path, toml, field):
    task = write_task(tmp_path, "t", test_sh="true\n", toml=toml)
    with pytest.raises(TaskError) as raised:
        load_task(task)
    problem = next(p for p in raised.value.problems if p.field == field)
    assert problem.file == task / "task.toml"
    assert "is code, not data" in problem.message or "not an environment name" in problem.message
    assert problem.fix


def test_an_mcp_servers_headers_are_not_env_names(tmp_path):
    toml = (
        '[[environment.mcp_servers]]\nname = "m"\ntransport = "streamable-http"\n'
        'url = "http://m:8000/mcp"\nheaders = { "X-Api-Key" = "k" }\n'
    )
    assert load_task(write_task(tmp_path, "t", test_sh="true\n", toml=toml)).sandbox.mcp_servers


@pytest.mark.parametrize(
    "environment",
    ["      - LD_PRELOAD=/x.so\n", "      LD_PRELOAD: /x.so\n", "      - BASH_ENV\n"],
)
def test_a_compose_services_environment_refuses_a_code_name(tmp_path, environment):
    task = write_task(tmp_path, "t", test_sh="true\n")
    form = "    environment:\n" + environment
    (task / "environment" / "docker-compose.yaml").write_text(
        "services:\n  db:\n    image: postgres\n" + form
    )
    with pytest.raises(TaskError) as raised:
        load_task(task)
    problem = raised.value.problems[0]
    assert problem.file.name == "docker-compose.yaml"
    assert problem.field.startswith("services.db.environment.") and "code" in problem.message
