"""`bench run` on multi-step tasks (`[[steps]]`) in real Docker: every step in one sandbox, each graded."""

from __future__ import annotations

import json

import pytest

from tests.conftest import (
    EXAMPLES,
    job_dirs,
    make_agent,
    only_result,
    run_args,
    run_bench,
    write_task,
)

pytestmark = pytest.mark.docker


def containers_of(client, result: dict) -> list:
    """The trial's containers still there (by attempt: job names can clash with other runs')."""
    label = f"benchflow.attempt={result['rollout_name']}"
    return client.containers.list(all=True, filters={"label": label})


def test_oracle_passes_every_step_of_the_example_in_one_sandbox(docker_client, bench_env, tmp_path):
    # when
    proc = run_bench(
        run_args("oracle", tasks=EXAMPLES, include=["multi-step"]), env=bench_env, cwd=tmp_path
    )
    # then
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[PASS] multi-step (reward=1.00, tools=0)" in proc.stdout
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)  # one attempt: one sandbox for both steps
    assert result["rewards"] == {"reward": 1.0, "create": 1.0, "append": 1.0}
    assert [(s["name"], s["ran"], s["reward"]) for s in result["steps"]] == [
        ("create", True, 1.0),
        ("append", True, 1.0),
    ]
    assert all(s["verifier_error"] is None and not s["stopped_early"] for s in result["steps"])
    assert all(s["timing"]["agent_execution"] is not None for s in result["steps"])
    assert result["n_prompts"] == 2
    folder = job / result["rollout_name"]
    sandbox = json.loads((folder / "sandbox.json").read_text())
    assert sandbox["sandbox_id"] == result["sandbox_id"]
    for step in ("create", "append"):
        assert (folder / "steps" / step / "verifier" / "reward.txt").read_text().strip() == "1"
    assert (folder / "verifier" / "reward.txt").read_text().strip() == "1"  # the last step's
    assert (folder / "agent" / "oracle.txt").is_file()
    assert set(result["timing"]) >= {"environment_setup", "agent_execution", "verifier", "total"}
    assert containers_of(docker_client, result) == []


def test_nop_fails_the_first_step_and_stops_there(docker_client, bench_env, tmp_path):
    proc = run_bench(
        run_args("nop", tasks=EXAMPLES, include=["multi-step"]), env=bench_env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr  # a wrong answer is scored, not an error
    assert "[FAIL] multi-step (reward=0.00, tools=0)" in proc.stdout
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["rewards"] == {"reward": 0.0, "create": 0.0}
    create, append = result["steps"]
    assert create["ran"] and create["reward"] == 0.0 and create["stopped_early"]  # min_reward = 1.0
    assert not append["ran"] and append["reward"] is None
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["failed"], summary["errored"], summary["verifier_errored"]) == (1, 0, 0)
    assert containers_of(docker_client, result) == []


STOPPING_TOML = """
[[steps]]
name = "first"
min_reward = { quality = 0.8 }

[[steps]]
name = "second"
"""


def test_a_step_below_its_min_reward_key_stops_the_trial(docker_client, bench_env, tmp_path):
    # given a first step scoring reward 1 but quality 0.5 against a quality floor of 0.8
    task = write_task(
        tmp_path / "tasks",
        "stopper",
        toml=STOPPING_TOML,
        test_sh="echo 1 > /logs/verifier/reward.txt\n",  # shared: the second step would pass
    )
    (task / "instruction.md").unlink()
    for step, solve in (
        ("first", "echo first > /app/log.txt\n"),
        ("second", "echo second >> /app/log.txt\n"),
    ):
        (task / "steps" / step / "solution").mkdir(parents=True)
        (task / "steps" / step / "instruction.md").write_text(f"Do the {step} step.\n")
        (task / "steps" / step / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
    (task / "steps" / "first" / "tests").mkdir()
    (task / "steps" / "first" / "tests" / "test.sh").write_text(
        '#!/bin/bash\necho \'{"reward": 1, "quality": 0.5}\' > /logs/verifier/reward.json\n'
    )
    # when
    proc = run_bench(run_args("oracle"), env=bench_env, cwd=tmp_path)
    # then: the second step never ran and counts 0 in the mean
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[FAIL] stopper (reward=0.50" in proc.stdout
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["rewards"] == {"reward": 0.5, "first": 1.0}
    first, second = result["steps"]
    assert first["rewards"] == {"reward": 1.0, "quality": 0.5} and first["stopped_early"]
    assert not second["ran"]
    folder = job / result["rollout_name"]
    assert not (folder / "steps" / "second").exists()
    assert result["n_prompts"] == 1
    assert containers_of(docker_client, result) == []


def test_each_step_gives_the_agent_its_own_instruction(docker_client, bench_env, tmp_path):
    # given a script agent that records the instruction it gets, and a last step that checks both
    task = write_task(
        tmp_path / "tasks",
        "prompts",
        toml='[agent]\nprompt_prefix = "Hi."\n[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n',
        test_sh="echo 1 > /logs/verifier/reward.txt\n",
    )
    for step in ("one", "two"):
        (task / "steps" / step).mkdir(parents=True)
        (task / "steps" / step / "instruction.md").write_text(f"Step {step}.\n")
    (task / "steps" / "two" / "tests").mkdir()
    (task / "steps" / "two" / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        "want=$'Hi.\\n\\nStep one.\\nHi.\\n\\nStep two.'\n"
        'if [ "$(cat /app/prompts.txt)" = "$want" ] && [ "$(cat /app/args.txt)" = "$want" ]; then\n'
        "  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n"
    )
    agent = make_agent(
        tmp_path,
        "agent.sh",
        '#!/bin/bash\ncat "$BENCHFLOW_INSTRUCTION_FILE" >> /app/prompts.txt\n'
        'echo >> /app/prompts.txt\nprintf "%s\\n" "$1" >> /app/args.txt\n',
    )
    # when
    proc = run_bench(run_args(f"script:{agent}"), env=bench_env, cwd=tmp_path)
    # then
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = only_result(job_dirs(tmp_path / "jobs")[0])
    assert result["rewards"] == {"reward": 1.0, "one": 1.0, "two": 1.0}, proc.stdout
    assert containers_of(docker_client, result) == []


def test_a_step_verifier_error_is_the_trials_and_names_the_step(docker_client, bench_env, tmp_path):
    task = write_task(
        tmp_path / "tasks",
        "broken-step",
        toml='[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n',
        test_sh="echo 1 > /logs/verifier/reward.txt\n",
    )
    for step in ("one", "two"):
        (task / "steps" / step).mkdir(parents=True)
        (task / "steps" / step / "instruction.md").write_text(f"Step {step}.\n")
    (task / "steps" / "two" / "tests").mkdir()
    (task / "steps" / "two" / "tests" / "test.sh").write_text("#!/bin/bash\nexit 0\n")  # no reward

    proc = run_bench(run_args("nop", "--retry-attempts", "0"), env=bench_env, cwd=tmp_path)

    assert proc.returncode == 1, proc.stdout + proc.stderr  # a verifier error is an error
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["rewards"] is None
    assert result["verifier_error"].startswith("step 'two': No reward file found")
    assert result["verifier_error_category"] == "verifier_no_reward"
    assert [s["reward"] for s in result["steps"]] == [1.0, None]
    assert containers_of(docker_client, result) == []


def test_a_steps_healthcheck_runs_before_its_agent_and_its_artifacts_are_kept_apart(
    docker_client, bench_env, tmp_path
):
    # given the example, its second step waiting for what the first made and declaring an artifact
    import shutil

    task = tmp_path / "tasks" / "multi-step"
    shutil.copytree(EXAMPLES / "multi-step", task)
    toml = (task / "task.toml").read_text()
    toml = toml.replace(
        '[[steps]]\nname = "append"',
        '[[steps]]\nname = "append"\nartifacts = ["/app/notes.txt"]\n'
        '[steps.healthcheck]\ncommand = "test -s /app/notes.txt"\ninterval_sec = 0.5\nretries = 2',
    )
    toml += '\n[[steps]]\nname = "never"\n[steps.healthcheck]\ncommand = "exit 1"\ninterval_sec = 0.5\nretries = 2\n'
    (task / "task.toml").write_text(toml)
    (task / "steps" / "never").mkdir()
    (task / "steps" / "never" / "instruction.md").write_text("Nothing.\n")
    shutil.copytree(task / "steps" / "append" / "solution", task / "steps" / "never" / "solution")
    # when the oracle runs it
    proc = run_bench(run_args("oracle", "--retry-attempts", "0"), env=bench_env, cwd=tmp_path)
    assert job_dirs(tmp_path / "jobs"), proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    # then the second step's healthcheck passed and its artifact sits under its own folder; the
    # third step's never passed: the trial errs naming it, before that step's agent ran
    folder = job / result["rollout_name"]
    assert (folder / "steps" / "append" / "artifacts" / "app" / "notes.txt").read_text()
    assert [(s["name"], s["ran"]) for s in result["steps"]] == [
        ("create", True),
        ("append", True),
        ("never", False),
    ]
    assert result["error_category"] == "environment_setup"
    assert result["error"].startswith(
        "environment setup failed: step 'never': the task's healthcheck 'exit 1' failed"
    )
