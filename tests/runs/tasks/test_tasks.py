"""Task loading and validation (runs/tasks/load.py): layouts, defaults, problems, selection, digests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runs.host_env import NO_HOST_ENV, HostEnv
from runs.tasks.checker import TaskProblem
from runs.tasks.config import AgentConfig, SandboxConfig, VerifierConfig
from runs.tasks.load import (
    TaskError,
    environment_digest,
    find_task_dirs,
    load_task,
    load_tasks,
    task_digest,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tasks"

SPLIT = {
    "task.toml": "",
    "instruction.md": "Write hello to /app/hello.txt.\n",
    "environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
    "tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n",
    "solution/solve.sh": "echo hello > /app/hello.txt\n",
}
NATIVE = {
    "task.md": "---\nagent:\n  timeout_sec: 30\n---\nReverse the file.\n",
    "environment/Dockerfile": "FROM debian:bookworm-slim\n",
    "verifier/test.sh": "echo 1 > /logs/verifier/reward.txt\n",
    "oracle/solve.sh": "tac in > out\n",
}


def write_task(parent: Path, files: dict[str, str | None], name: str = "task") -> Path:
    """A task folder under parent; a None value leaves that file out."""
    folder = parent / name
    for rel, text in files.items():
        if text is not None:
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
    return folder


def split_task(parent: Path, toml: str = "", name: str = "task", **files: str | None) -> Path:
    """A valid split task with task.toml = toml; keyword files (a/b written a__b) override."""
    return write_task(parent, {**SPLIT, "task.toml": toml, **_paths(files)}, name)


def _paths(files: dict[str, str | None]) -> dict[str, str | None]:
    return {k.replace("__", "/").replace("_dot_", "."): v for k, v in files.items()}


def problems_of(folder: Path, host: HostEnv = NO_HOST_ENV) -> list[TaskProblem]:
    with pytest.raises(TaskError) as raised:
        load_task(folder, host)
    return raised.value.problems


def only_problem(folder: Path, host: HostEnv = NO_HOST_ENV) -> TaskProblem:
    problems = problems_of(folder, host)
    assert len(problems) == 1, [str(p) for p in problems]
    return problems[0]


# --- layouts and defaults ------------------------------------------------------------------


def test_split_layout_reads_instruction_and_folders(tmp_path):
    folder = split_task(tmp_path, 'version = "1.0"\n[metadata]\ndifficulty = "easy"\n')

    task = load_task(folder)

    assert task.name == "task"
    assert task.layout == "split"
    assert task.path == folder.resolve()
    assert task.config_file == folder.resolve() / "task.toml"
    assert task.instruction == "Write hello to /app/hello.txt."
    assert task.environment_dir == folder.resolve() / "environment"
    assert task.tests_dir == folder.resolve() / "tests"
    assert task.solution_dir == folder.resolve() / "solution"
    assert task.metadata == {"difficulty": "easy"}


def test_native_layout_reads_frontmatter_body_verifier_and_oracle(tmp_path):
    folder = write_task(tmp_path, NATIVE)

    task = load_task(folder)

    assert task.layout == "native"
    assert task.config_file.name == "task.md"
    assert task.instruction == "Reverse the file."
    assert task.agent.timeout_sec == 30.0
    assert task.tests_dir.name == "verifier"
    assert task.solution_dir is not None and task.solution_dir.name == "oracle"


def test_task_md_without_frontmatter_is_all_defaults(tmp_path):
    folder = write_task(tmp_path, {**NATIVE, "task.md": "Just do it.\n"})

    task = load_task(folder)

    assert task.instruction == "Just do it."
    assert task.agent == AgentConfig()


def test_task_md_wins_over_task_toml(tmp_path):
    folder = write_task(tmp_path, {**NATIVE, "task.toml": "[agent]\ntimeout_sec = 999\n"})

    task = load_task(folder)

    assert task.layout == "native"
    assert task.agent.timeout_sec == 30.0


@pytest.mark.parametrize(
    ("attribute", "expected"),
    [
        ("agent.timeout_sec", None),
        ("agent.user", None),
        ("agent.token_budget", None),
        ("agent.turn_budget", None),
        ("verifier.timeout_sec", 600.0),
        ("verifier.reward_range", (0.0, 1.0)),
        ("sandbox.build_timeout_sec", 600.0),
        ("sandbox.cpus", 1.0),
        ("sandbox.memory_mb", 2048),
        ("sandbox.network_mode", "public"),
        ("sandbox.workdir", None),
        ("sandbox.docker_image", None),
        ("multi_step_reward_strategy", "mean"),
        ("steps", ()),
        ("metadata", {}),
    ],
)
def test_defaults_when_task_toml_is_empty(tmp_path, attribute, expected):
    task = load_task(split_task(tmp_path))

    value = task
    for part in attribute.split("."):
        value = getattr(value, part)
    assert value == expected


def test_solution_dir_is_none_without_solve_sh(tmp_path):
    task = load_task(split_task(tmp_path, solution__solve_dot_sh=None))

    assert task.solution_dir is None


@pytest.mark.parametrize("section", ["environment", "sandbox"])
def test_environment_and_sandbox_are_the_same_table(tmp_path, section):
    toml = (
        f'[{section}]\ncpus = 2\nmemory_mb = 512\nnetwork_mode = "no-network"\nworkdir = "/app"\n'
    )

    task = load_task(split_task(tmp_path, toml))

    assert task.sandbox == SandboxConfig(
        cpus=2.0, memory_mb=512, network_mode="no-network", workdir="/app"
    )


def test_declaring_both_environment_and_sandbox_is_a_problem(tmp_path):
    problem = only_problem(split_task(tmp_path, "[environment]\ncpus = 1\n[sandbox]\ncpus = 2\n"))

    assert "both [environment] and [sandbox]" in problem.message
    assert "[environment]" in problem.fix and "[sandbox]" in problem.fix


def test_agent_and_verifier_settings_are_read(tmp_path):
    toml = (
        '[agent]\ntimeout_sec = 20\nuser = "agent"\ntoken_budget = 1000\nturn_budget = 5\n'
        "[verifier]\ntimeout_sec = 30\nuser = 0\nreward_range = [-1, 1]\n"
    )

    task = load_task(split_task(tmp_path, toml))

    assert task.agent == AgentConfig(
        timeout_sec=20.0, user="agent", token_budget=1000, turn_budget=5
    )
    assert task.verifier == VerifierConfig(timeout_sec=30.0, user="0", reward_range=(-1.0, 1.0))


def test_prompt_prefix_is_kept_apart_from_the_instruction(tmp_path):
    # the runner prepends it (runs/trials/attempt.py), so the instruction stays as written
    task = load_task(split_task(tmp_path, '[agent]\nprompt_prefix = "Be brief."\n'))

    assert task.agent.prompt_prefix == "Be brief."
    assert task.instruction == "Write hello to /app/hello.txt."


def test_verifier_env_resolves_allowed_host_variables_and_defaults(tmp_path, monkeypatch):
    from runs.host_env import host_env

    monkeypatch.setenv("BF_TEST_TOKEN", "secret")
    monkeypatch.delenv("BF_TEST_UNSET", raising=False)
    toml = '[verifier.env]\nA = "${BF_TEST_TOKEN}"\nB = "${BF_TEST_UNSET:-fallback}"\nC = "x-${BF_TEST_TOKEN}-y"\n'

    task = load_task(split_task(tmp_path, toml), host_env(["BF_TEST_TOKEN"]))

    assert task.verifier.env == {"A": "secret", "B": "fallback", "C": "x-secret-y"}


@pytest.mark.parametrize("section", ["environment", "sandbox"])
def test_a_model_key_in_the_sandbox_env_is_refused(tmp_path, monkeypatch, section):
    # the agent reads the sandbox's env; the proxy keeps provider keys on this machine
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret-0123456789")

    problem = only_problem(
        split_task(tmp_path, f'[{section}.env]\nJUDGE_KEY = "${{OPENAI_API_KEY}}"\n')
    )

    assert problem.field == f"{section}.env.JUDGE_KEY"
    assert "${OPENAI_API_KEY}" in problem.message and "[verifier] env" in problem.fix


def test_a_model_key_in_the_verifier_env_is_kept_for_the_judges_own_token(tmp_path, monkeypatch):
    # the verifier runs where the agent had root: it gets a token of the proxy's, never the key
    # (runs/trials/judge.py puts the token where the reference is)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret-0123456789")

    task = load_task(split_task(tmp_path, '[verifier.env]\nJUDGE_KEY = "${OPENAI_API_KEY}"\n'))

    assert task.verifier.env == {"JUDGE_KEY": "${OPENAI_API_KEY}"}


def test_unset_allowed_env_variable_without_default_is_a_problem(tmp_path, monkeypatch):
    from runs.host_env import host_env

    monkeypatch.delenv("BF_TEST_UNSET", raising=False)

    problem = only_problem(
        split_task(tmp_path, '[verifier.env]\nA = "${BF_TEST_UNSET}"\n'),
        host_env(["BF_TEST_UNSET"]),
    )

    assert problem.field == "verifier.env.A"
    assert "BF_TEST_UNSET" in problem.message and "${BF_TEST_UNSET:-default}" in problem.fix


@pytest.mark.parametrize(
    ("toml", "network_mode"),
    [
        ("[environment]\nallow_internet = false\n", "no-network"),
        ("[environment]\nallow_internet = true\n", "public"),
        ('[environment]\nallow_internet = true\nnetwork_mode = "no-network"\n', "no-network"),
    ],
)
def test_deprecated_allow_internet(tmp_path, toml, network_mode):
    assert load_task(split_task(tmp_path, toml)).sandbox.network_mode == network_mode


def test_docker_image_replaces_the_dockerfile(tmp_path):
    folder = split_task(
        tmp_path, '[environment]\ndocker_image = "python:3.11-slim"\n', environment__Dockerfile=None
    )

    task = load_task(folder)

    assert task.sandbox.docker_image == "python:3.11-slim"
    assert task.environment_dir is None


def test_harbor_memory_string_is_read_as_megabytes(tmp_path):
    task = load_task(split_task(tmp_path, '[environment]\nmemory = "2G"\nstorage = "10G"\n'))

    assert task.sandbox.memory_mb == 2048


def test_solution_and_oracle_tables_are_kept(tmp_path):
    task = load_task(
        split_task(tmp_path, '[solution]\ntimeout_sec = 60\nenv = { MODE = "fast" }\n')
    )

    assert task.solution_env == {"MODE": "fast"}
    assert task.solution_timeout_sec == 60.0


def test_accepted_top_level_keys_load(tmp_path):
    toml = (
        'schema_version = "1.3"\nsource = "demo"\nartifacts = ["/app/out"]\n'
        '[task]\nname = "org/demo"\n[metadata]\ntags = ["a"]\n'
    )

    assert load_task(split_task(tmp_path, toml)).metadata == {"tags": ["a"]}


# --- problems ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "field", "suggestion"),
    [
        ("[agent]\ntimeout_secs = 10\n", "agent.timeout_secs", "timeout_sec"),
        ("[verifier]\ntimout_sec = 10\n", "verifier.timout_sec", "timeout_sec"),
        ("[environment]\ncpu = 2\n", "environment.cpu", "cpus"),
        ("[sandbox]\nnetwork = 'public'\n", "sandbox.network", "network_mode"),
        ("[metdata]\ndifficulty = 'easy'\n", "metdata", "metadata"),
        ("[solution]\nenvv = {}\n", "solution.envv", "env"),
    ],
)
def test_mistyped_key_is_refused_with_did_you_mean(tmp_path, toml, field, suggestion):
    problem = only_problem(split_task(tmp_path, toml))

    assert problem.field == field
    assert f"did you mean '{suggestion}'?" in problem.message
    assert f"'{suggestion}'" in problem.fix


def test_unknown_key_without_a_close_match_lists_the_allowed_keys(tmp_path):
    problem = only_problem(split_task(tmp_path, "[agent]\nzzz = 1\n"))

    assert problem.message == "unknown key 'zzz'"
    assert "timeout_sec" in problem.fix and "prompt_prefix" in problem.fix


@pytest.mark.parametrize(
    ("toml", "field", "fix_mentions"),
    [
        ('[agent]\ntimeout_sec = "ten"\n', "agent.timeout_sec", "timeout_sec = 600"),
        ("[agent]\ntimeout_sec = 0\n", "agent.timeout_sec", "timeout_sec ="),
        ("[agent]\ntimeout_sec = -5\n", "agent.timeout_sec", "timeout_sec ="),
        ("[agent]\ntimeout_sec = true\n", "agent.timeout_sec", "timeout_sec ="),
        ("[agent]\ntimeout_sec = inf\n", "agent.timeout_sec", "timeout_sec ="),
        ("[agent]\ntoken_budget = 1.5\n", "agent.token_budget", "token_budget ="),
        ("[agent]\nturn_budget = 0\n", "agent.turn_budget", "turn_budget ="),
        ("[agent]\nuser = ''\n", "agent.user", 'user = "..."'),
        ("[agent]\nprompt_prefix = 3\n", "agent.prompt_prefix", "prompt_prefix"),
        ("[verifier]\ntimeout_sec = -1\n", "verifier.timeout_sec", "timeout_sec ="),
        ("[verifier]\nreward_range = [0.2, 1]\n", "verifier.reward_range", "reward_range = [0, 1]"),
        ("[verifier]\nreward_range = 1\n", "verifier.reward_range", "reward_range"),
        ("[verifier]\nenv = { A = 1 }\n", "verifier.env.A", 'A = "1"'),
        ("[verifier]\nenv = 'x'\n", "verifier.env", "[verifier.env]"),
        ("agent = 3\n", "agent", "[agent]"),
        ("[environment]\ncpus = 0\n", "environment.cpus", "cpus = 2"),
        ("[environment]\ncpus = -1\n", "environment.cpus", "cpus = 2"),
        ("[environment]\nmemory_mb = 1.5\n", "environment.memory_mb", "memory_mb = 2048"),
        ("[environment]\nmemory_mb = '2G'\n", "environment.memory_mb", "memory_mb = 2048"),
        ("[environment]\nmemory = 'lots'\n", "environment.memory", "memory_mb = 2048"),
        (
            "[environment]\nbuild_timeout_sec = 0\n",
            "environment.build_timeout_sec",
            "build_timeout_sec",
        ),
        ('[environment]\nnetwork_mode = "none"\n', "environment.network_mode", '"no-network"'),
        ('[environment]\nallow_internet = "no"\n', "environment.allow_internet", "no-network"),
        (
            '[environment]\nallow_internet = false\nnetwork_mode = "public"\n',
            "environment.allow_internet",
            "no-network",
        ),
        ('[environment]\nworkdir = "app"\n', "environment.workdir", '"/app"'),
        ('[environment]\nos = "windows"\n', "environment.os", '"linux"'),
        ('multi_step_reward_strategy = "max"\n', "multi_step_reward_strategy", '"mean"'),
        ('schema_version = "2.0"\n', "schema_version", "schema_version"),
        ("[solution]\nenv = {}\n[oracle]\nenv = {}\n", "oracle", "keep one"),
    ],
)
def test_wrong_values_are_reported_with_a_concrete_fix(tmp_path, toml, field, fix_mentions):
    problem = only_problem(split_task(tmp_path, toml))

    assert problem.field == field
    assert problem.file.name == "task.toml"
    assert fix_mentions in problem.fix


def test_every_problem_of_a_task_is_reported_at_once(tmp_path):
    toml = '[agent]\ntimeout_secs = 1\n[environment]\ncpus = 0\nnetwork_mode = "off"\n'
    folder = split_task(tmp_path, toml, instruction_dot_md="  \n", tests__test_dot_sh=None)

    problems = problems_of(folder)

    assert {(p.file.name, p.field) for p in problems} == {
        ("task.toml", "agent.timeout_secs"),
        ("task.toml", "environment.cpus"),
        ("task.toml", "environment.network_mode"),
        ("instruction.md", ""),
        ("test.sh", ""),
    }


def test_toml_syntax_error_names_the_line(tmp_path):
    problem = only_problem(split_task(tmp_path, "[agent]\ntimeout_sec = = 3\n"))

    assert problem.file.name == "task.toml"
    assert "TOML syntax error" in problem.message and "line 2" in problem.message


def test_yaml_syntax_error_names_the_line_in_task_md(tmp_path):
    folder = write_task(
        tmp_path, {**NATIVE, "task.md": "---\nagent:\n  timeout_sec: [1\n---\nbody\n"}
    )

    problem = only_problem(folder)

    assert problem.file.name == "task.md"
    assert "YAML syntax error at line" in problem.message


def test_unclosed_frontmatter_is_a_problem(tmp_path):
    problem = only_problem(write_task(tmp_path, {**NATIVE, "task.md": "---\nagent: {}\nbody\n"}))

    assert "never closed" in problem.message and "'---'" in problem.fix


def test_frontmatter_keys_are_checked_like_toml_keys(tmp_path):
    folder = write_task(tmp_path, {**NATIVE, "task.md": "---\nsandbox:\n  cpuss: 2\n---\nbody\n"})

    problem = only_problem(folder)

    assert problem.field == "sandbox.cpuss" and "did you mean 'cpus'?" in problem.message


@pytest.mark.parametrize(
    ("missing", "problem_file", "fix_mentions"),
    [
        ({"instruction.md": None}, "instruction.md", "instruction.md"),
        ({"instruction.md": "\n\n  \n"}, "instruction.md", "instruction.md"),
        ({"environment/Dockerfile": None}, "Dockerfile", "environment/Dockerfile"),
        ({"tests/test.sh": None}, "test.sh", "tests/test.sh"),
    ],
)
def test_missing_files_are_reported(tmp_path, missing, problem_file, fix_mentions):
    problem = only_problem(write_task(tmp_path, {**SPLIT, **missing}))

    assert problem.file.name == problem_file
    assert fix_mentions in problem.fix


@pytest.mark.parametrize(
    ("missing", "problem_file", "fix_mentions"),
    [
        ({"task.md": "---\n---\n"}, "task.md", "body"),
        ({"verifier/test.sh": None}, "test.sh", "verifier/test.sh"),
        ({"environment/Dockerfile": None}, "Dockerfile", "environment/Dockerfile"),
    ],
)
def test_missing_parts_of_a_native_task_are_reported(tmp_path, missing, problem_file, fix_mentions):
    problem = only_problem(write_task(tmp_path, {**NATIVE, **missing}))

    assert problem.file.name == problem_file
    assert fix_mentions in problem.fix


def test_folder_without_task_file_is_a_problem(tmp_path):
    problem = only_problem(write_task(tmp_path, {"instruction.md": "x"}))

    assert "neither task.toml nor task.md" in problem.message
    assert "task.toml" in problem.fix and "task.md" in problem.fix


def test_symlink_pointing_outside_the_task_is_a_problem(tmp_path):
    folder = split_task(tmp_path)
    (tmp_path / "secret.txt").write_text("outside")
    (folder / "environment" / "data.txt").symlink_to(tmp_path / "secret.txt")
    (folder / "environment" / "gone.txt").symlink_to(tmp_path / "nothing-here")

    problems = problems_of(folder)

    assert sorted(p.file.name for p in problems) == ["data.txt", "gone.txt"]
    assert all("copy" in p.fix for p in problems)


def test_symlink_inside_the_task_is_fine(tmp_path):
    folder = split_task(tmp_path)
    (folder / "environment" / "hello.sh").symlink_to(folder / "solution" / "solve.sh")

    assert load_task(folder).name == "task"


# --- multi-step ----------------------------------------------------------------------------

MULTI_STEP_TOML = """
multi_step_reward_strategy = "final"
[agent]
timeout_sec = 100
[verifier]
env = { LEVEL = "task" }

[[steps]]
name = "setup"
min_reward = 1.0

[[steps]]
name = "finish"
min_reward = { reward = 0.5, style = 0.2 }
[steps.agent]
turn_budget = 3
[steps.verifier]
timeout_sec = 45
env = { STEP = "finish" }
"""


def test_multi_step_task_is_parsed(tmp_path):
    folder = split_task(
        tmp_path,
        MULTI_STEP_TOML,
        instruction_dot_md=None,
        steps__setup__instruction_dot_md="Set it up.\n",
        steps__setup__tests__test_dot_sh="echo 1 > /logs/verifier/reward.txt\n",
        steps__finish__instruction_dot_md="Finish it.\n",
        steps__finish__solution__solve_dot_sh="true\n",
    )

    task = load_task(folder)

    assert task.instruction == ""
    assert task.multi_step_reward_strategy == "final"
    setup, finish = task.steps
    assert (setup.name, setup.instruction, setup.min_reward) == ("setup", "Set it up.", 1.0)
    assert setup.tests_dir == folder.resolve() / "steps" / "setup" / "tests"
    assert setup.solution_dir is None
    assert setup.agent == task.agent
    assert finish.min_reward == {"reward": 0.5, "style": 0.2}
    assert finish.tests_dir is None
    assert finish.solution_dir == folder.resolve() / "steps" / "finish" / "solution"
    assert finish.agent == AgentConfig(timeout_sec=100.0, turn_budget=3)
    assert finish.verifier.timeout_sec == 45.0
    assert finish.verifier.env == {"LEVEL": "task", "STEP": "finish"}


def test_multi_step_problems_are_reported(tmp_path):
    toml = (
        '[[steps]]\nname = "one"\nmin_reward = "high"\nagent = { timeout_secs = 5 }\n'
        '[[steps]]\nname = "one"\n'
        "[[steps]]\nname = 'bad/name'\n"
        "[[steps]]\nname = 'two'\nlevel = 1\n"
    )
    folder = split_task(
        tmp_path, toml, steps__one__instruction_dot_md="Go.\n", tests__test_dot_sh=None
    )

    problems = problems_of(folder)

    assert {(p.file.name, p.field) for p in problems} == {
        ("task.toml", "steps[0].min_reward"),
        ("task.toml", "steps[0].agent.timeout_secs"),
        ("task.toml", "steps[1].name"),  # duplicate
        ("task.toml", "steps[2].name"),  # not a folder name
        ("task.toml", "steps[3].level"),
        ("instruction.md", ""),  # steps/two/instruction.md
        ("test.sh", ""),  # steps/one/tests/test.sh: no shared tests/test.sh either
        ("test.sh", ""),  # steps/two/tests/test.sh
    }


def test_steps_must_be_tables(tmp_path):
    problem = only_problem(split_task(tmp_path, 'steps = ["a"]\n'))

    assert problem.field == "steps" and "[[steps]]" in problem.fix


# --- discovery and selection ---------------------------------------------------------------


def test_find_task_dirs_accepts_a_single_task_folder(tmp_path):
    folder = split_task(tmp_path)

    assert find_task_dirs(folder) == [folder]


@pytest.mark.parametrize("subfolder", ["", "tasks"])
def test_find_task_dirs_lists_task_folders_sorted(tmp_path, subfolder):
    base = tmp_path / subfolder if subfolder else tmp_path
    for name in ["zeta", "alpha", "mid"]:
        split_task(base, name=name)
    (base / "notes").mkdir()
    write_task(base, NATIVE, name=".hidden")

    assert [p.name for p in find_task_dirs(tmp_path)] == ["alpha", "mid", "zeta"]


@pytest.mark.parametrize("make", [lambda p: p / "missing", lambda p: p])
def test_find_task_dirs_refuses_a_folder_without_tasks(tmp_path, make):
    (tmp_path / "empty").mkdir()

    with pytest.raises(TaskError) as raised:
        find_task_dirs(make(tmp_path))

    (problem,) = raised.value.problems
    assert problem.file == make(tmp_path)
    assert "task.toml" in problem.fix and "tasks/" in problem.fix


@pytest.fixture
def task_tree(tmp_path: Path) -> Path:
    for name in ["hello-world", "python-pytest", "python-lint", "count-words"]:
        split_task(tmp_path, name=name)
    return tmp_path


@pytest.mark.parametrize(
    ("include", "exclude", "expected"),
    [
        ([], [], ["count-words", "hello-world", "python-lint", "python-pytest"]),
        (["hello-world"], [], ["hello-world"]),
        (["python-*"], [], ["python-lint", "python-pytest"]),
        (["python-*", "count-words"], [], ["count-words", "python-lint", "python-pytest"]),
        (["*"], ["python-*"], ["count-words", "hello-world"]),
        ([], ["python-lint", "count-*"], ["hello-world", "python-pytest"]),
        (["python-*t"], ["*lint"], ["python-pytest"]),
    ],
)
def test_include_and_exclude_select_tasks(task_tree, include, exclude, expected):
    tasks = load_tasks(task_tree, include=include, exclude=exclude)

    assert [t.name for t in tasks] == expected


def test_unmatched_include_suggests_the_closest_task(task_tree):
    with pytest.raises(TaskError) as raised:
        load_tasks(task_tree, include=["hello-wrld", "count-*"])

    (problem,) = raised.value.problems
    assert problem.field == "include"
    assert "'hello-wrld' matches no task" in problem.message
    assert "did you mean 'hello-world'?" in problem.message
    assert "--include hello-world" in problem.fix


def test_excluding_everything_is_a_problem(task_tree):
    with pytest.raises(TaskError) as raised:
        load_tasks(task_tree, exclude=["*"])

    assert "no task is left" in raised.value.problems[0].message


def test_problems_of_every_task_are_reported_together(tmp_path):
    split_task(tmp_path, name="good")
    split_task(tmp_path, "[agent]\ntimeout_sec = 'ten'\n", name="bad-type")
    split_task(tmp_path, name="no-docker", environment__Dockerfile=None)
    write_task(tmp_path, {**NATIVE, "verifier/test.sh": None}, name="native-no-verifier")

    with pytest.raises(TaskError) as raised:
        load_tasks(tmp_path)

    problems = raised.value.problems
    assert sorted(p.file.relative_to(tmp_path.resolve()).parts[0] for p in problems) == [
        "bad-type",
        "native-no-verifier",
        "no-docker",
    ]
    assert str(raised.value).count("fix:") == 3


def test_unmatched_include_and_task_problems_are_reported_together(tmp_path):
    split_task(tmp_path, "[agent]\ntimeout_sec = 0\n", name="broken")

    with pytest.raises(TaskError) as raised:
        load_tasks(tmp_path, include=["broken", "nope"])

    assert {p.field for p in raised.value.problems} == {"include", "agent.timeout_sec"}


# --- digests -------------------------------------------------------------------------------


def test_digests_are_stable_and_independent_of_location(tmp_path):
    one = load_task(split_task(tmp_path / "a"))
    two = load_task(split_task(tmp_path / "b"))

    assert task_digest(one) == task_digest(two) == task_digest(one)
    assert environment_digest(one) == environment_digest(two)
    assert task_digest(one).startswith("sha256:") and len(task_digest(one)) == 7 + 64


@pytest.mark.parametrize(
    ("change", "task_changes", "environment_changes"),
    [
        (lambda f: (f / "instruction.md").write_text("Something else.\n"), True, False),
        (lambda f: (f / "tests" / "test.sh").write_text("echo 0\n"), True, False),
        (lambda f: (f / "tests" / "extra.py").write_text(""), True, False),
        (
            lambda f: (f / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\n"),
            True,
            True,
        ),
        (lambda f: (f / "environment" / "data.txt").write_text("x"), True, True),
        (
            lambda f: (f / "environment" / "Dockerfile").rename(f / "environment" / "Dockerfile2"),
            True,
            True,
        ),
        (lambda f: (f / "environment" / "Dockerfile").chmod(0o755), True, True),
        (lambda f: (f / "environment" / "__pycache__").mkdir(), False, False),
    ],
)
def test_digests_detect_changes(tmp_path, change, task_changes, environment_changes):
    folder = split_task(tmp_path)
    (folder / "environment" / "Dockerfile").chmod(0o644)
    before = load_task(folder)
    task_before, env_before = task_digest(before), environment_digest(before)

    change(folder)

    # the digests read the folder, so the Task parsed before the change still points at it
    assert (task_digest(before) != task_before) is task_changes
    assert (environment_digest(before) != env_before) is environment_changes


def test_environment_digest_of_a_prebuilt_image_follows_the_image_name(tmp_path):
    toml = '[environment]\ndocker_image = "{}"\n'
    one = load_task(
        split_task(tmp_path, toml.replace("{}", "a:1"), name="one", environment__Dockerfile=None)
    )
    two = load_task(
        split_task(tmp_path, toml.replace("{}", "a:2"), name="two", environment__Dockerfile=None)
    )

    assert environment_digest(one) != environment_digest(two)


# --- the shipped examples ------------------------------------------------------------------


def test_example_tasks_load_without_problems():
    tasks = load_tasks(EXAMPLES)

    assert len(tasks) >= 7
    for task in tasks:
        solutions = [s.solution_dir for s in task.steps] or [task.solution_dir]  # each step's own
        assert all(d is not None for d in solutions), task.name
        assert {"difficulty", "category", "tags"} <= set(task.metadata), task.name
        assert os.access(task.tests_dir / "test.sh", os.X_OK), task.name
        assert all(os.access(d / "solve.sh", os.X_OK) for d in solutions if d), task.name
