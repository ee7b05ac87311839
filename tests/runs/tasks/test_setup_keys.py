"""Setup commands, skills_dir, artifacts and step healthchecks (runs/tasks/setup_keys.py): read,
honoured with no warning, and refused with the fix when wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.tasks.harbor_keys import Healthcheck
from runs.tasks.load import load_task
from runs.tasks.setup_keys import Artifact, SetupCommand
from tests.runs.tasks.test_tasks import problems_of, split_task


def test_setup_commands_read_as_strings_or_tables(tmp_path: Path) -> None:
    toml = """[environment]
setup_commands = ["service redis start"]

[[environment.setup_commands]]
command = "make seed"
timeout_sec = 30
cwd = "/srv"
env = { LEVEL = "2" }
user = "app"
service = "db"
"""
    # (both forms at once is not TOML; read each)
    first, second = toml.split("\n\n")
    task = load_task(split_task(tmp_path / "a", first))
    assert task.sandbox.setup_commands == (SetupCommand("service redis start"),)
    task = load_task(split_task(tmp_path / "b", "[environment]\n" + second))
    assert task.sandbox.setup_commands == (
        SetupCommand("make seed", 30.0, "/srv", {"LEVEL": "2"}, "app", "db"),
    )
    assert task.warnings == ()


def test_a_setup_command_key_not_applied_is_a_warning(tmp_path: Path) -> None:
    toml = '[[environment.setup_commands]]\ncommand = "x"\nhost_lock = "apt"\n'
    task = load_task(split_task(tmp_path, toml))
    [warning] = task.warnings
    assert warning.field == "environment.setup_commands[0].host_lock"


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ("[environment]\nsetup_commands = 3\n", "environment.setup_commands"),
        ('[[environment.setup_commands]]\ncwd = "/x"\n', "environment.setup_commands[0]"),
        (
            '[[environment.setup_commands]]\ncommand = "x"\ncwd = "rel"\n',
            "environment.setup_commands[0].cwd",
        ),
        ('[environment]\nskills_dir = "skills"\n', "environment.skills_dir"),
        ('artifacts = ["out.txt"]\n', "artifacts[0].source"),
        ('[[artifacts]]\nsource = "/app"\ndestination = "../x"\n', "artifacts[0].destination"),
        ('[[artifacts]]\nsource = "/app"\nexclude = "*.tmp"\n', "artifacts[0].exclude"),
        ('[[artifacts]]\nsource = "/app"\ndest = "x"\n', "artifacts[0].dest"),
    ],
)
def test_a_wrong_value_is_refused_naming_its_key(tmp_path: Path, toml: str, field: str) -> None:
    assert [p.field for p in problems_of(split_task(tmp_path, toml))] == [field]


def test_artifacts_mirror_their_source_path_unless_given_a_destination(tmp_path: Path) -> None:
    toml = (
        'artifacts = ["/app/out.txt", "/var/log/app/", '
        '{ source = "/data", destination = "d", exclude = ["*.tmp"] }]\n'
    )
    task = load_task(split_task(tmp_path, toml))
    assert task.artifacts == (
        Artifact("/app/out.txt", "app/out.txt"),
        Artifact("/var/log/app", "var/log/app"),
        Artifact("/data", "d", ("*.tmp",)),
    )
    assert task.warnings == ()


def test_a_step_has_its_own_healthcheck_and_artifacts(tmp_path: Path) -> None:
    toml = """[[steps]]
name = "one"
artifacts = ["/app/one.txt"]

[steps.healthcheck]
command = "test -f /tmp/ready"
retries = 2
"""
    folder = split_task(tmp_path, toml)
    (folder / "steps" / "one").mkdir(parents=True)
    (folder / "steps" / "one" / "instruction.md").write_text("Do one.\n")
    [step] = load_task(folder).steps
    assert step.healthcheck == Healthcheck("test -f /tmp/ready", retries=2)
    assert step.artifacts == (Artifact("/app/one.txt", "app/one.txt"),)


def test_skills_dir_is_kept_as_the_folder_the_image_holds(tmp_path: Path) -> None:
    task = load_task(split_task(tmp_path, '[environment]\nskills_dir = "/opt/skills"\n'))
    assert task.sandbox.skills_dir == "/opt/skills" and task.warnings == ()


def test_multi_turn_step_keys_load_with_what_differs(tmp_path: Path) -> None:
    toml = """[[steps]]
name = "one"
dependencies = []

[[steps]]
name = "two"
dependencies = ["one"]
inherit_prior_session = true

[[steps]]
name = "three"
dependencies = ["four"]
"""
    folder = split_task(tmp_path, toml)
    for name in ("one", "two", "three"):
        (folder / "steps" / name).mkdir(parents=True)
        (folder / "steps" / name / "instruction.md").write_text(f"Do {name}.\n")
    task = load_task(folder)
    said = {w.field: w.message for w in task.warnings}
    assert set(said) == {
        "steps[1].dependencies",
        "steps[1].inherit_prior_session",
        "steps[2].dependencies",
    }
    assert "its agent starts a new session" in said["steps[1].inherit_prior_session"]
    assert "whether they passed or not" in said["steps[1].dependencies"]
    assert "steps run in their listed order here" in said["steps[2].dependencies"]
