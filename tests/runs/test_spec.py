"""One run spec: each setting declared once, and the command line, evaluation.json and a form agree."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from runs import spec as run_spec
from runs.spec import RunSpec


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench run", exit_on_error=False)
    run_spec.add_run_arguments(p)
    return p


def test_the_command_line_defaults_are_the_specs_defaults():
    args = parser().parse_args(["tasks"])

    assert run_spec.from_args(args) == RunSpec(tasks_dir=Path("tasks"))


def test_every_setting_has_its_option_on_the_command_line():
    flags = {s for a in parser()._actions for s in a.option_strings}
    for f, opt in run_spec.options():
        assert set(opt.flags) <= flags, f.name


def test_a_full_command_line_becomes_the_spec_it_names():
    args = parser().parse_args(
        "tasks -a codex -m mock/oracle -j 3 --warm-pool 2 --trials 2 -i a -i 'b*' --exclude c "
        "--jobs-dir out --job j1 --agent-env A=1 --ae TOKEN=sk-live-abcdefghijklmnop "
        "--retry-attempts 0 --agent-idle-timeout none --save-outputs --quiet --max-cost-usd 0.5 "
        "--max-tokens 100 --max-sandbox-seconds 60 --max-rollouts 9 --token-budget 50 "
        "--turn-budget 5".split()
    )

    spec = run_spec.from_args(args)

    assert spec == RunSpec(
        tasks_dir=Path("tasks"),
        agent="codex",
        model="mock/oracle",
        concurrency=3,
        warm_pool=2,
        trials=2,
        include=["a", "'b*'"],
        exclude=["c"],
        jobs_dir=Path("out"),
        job="j1",
        agent_env={"A": "1", "TOKEN": "sk-live-abcdefghijklmnop"},
        retry_attempts=0,
        agent_idle_timeout=None,
        save_outputs=True,
        quiet=True,
        max_cost_usd=0.5,
        max_tokens=100,
        max_sandbox_seconds=60.0,
        max_rollouts=9,
        token_budget=50,
        turn_budget=5,
    )


def test_what_evaluation_json_records_comes_back_without_secrets():
    spec = RunSpec(
        tasks_dir=Path("tasks"),
        agent="opencode",
        model="deepseek/deepseek-v4-flash",
        trials=3,
        include=["x"],
        agent_env={"MODE": "fast", "API_TOKEN": "sk-live-abcdefghijklmnop"},
        agent_idle_timeout=None,
        max_tokens=1000,
        turn_budget=7,
        save_outputs=True,
    )

    recorded = spec.recorded()
    back = RunSpec.from_recorded(recorded)

    assert recorded["agent_env"] == {"MODE": "fast"}
    assert recorded["agent_env_secret_keys"] == ["API_TOKEN"]
    assert recorded["budget"]["max_tokens"] == 1000 and recorded["environment"] == "docker"
    assert "sk-live" not in str(recorded)
    assert back == dataclasses.replace(spec, agent_env={"MODE": "fast"})


def test_a_setting_evaluation_json_lacks_keeps_its_default_and_overrides_win():
    back = RunSpec.from_recorded({"tasks_dir": "t", "agent": "oracle"}, concurrency=8)

    assert back.concurrency == 8 and back.retry_attempts == 2 and back.agent_idle_timeout == 600.0


@pytest.mark.parametrize(
    ("texts", "field", "says"),
    [
        ({"tasks_dir": "t", "concurrency": "0"}, "concurrency", "-j/--concurrency"),
        ({"tasks_dir": "t", "max_cost_usd": "free"}, "max_cost_usd", "expected a number"),
        ({"tasks_dir": "t", "agent_env": ["NOEQUALS"]}, "agent_env", "KEY=VALUE"),
        ({"tasks_dir": "t", "agent_idle_timeout": "soon"}, "agent_idle_timeout", "0 or none"),
        ({"agent": "oracle"}, "tasks_dir", "tasks folder"),
    ],
)
def test_a_forms_values_are_parsed_with_each_problem_beside_its_field(texts, field, says):
    spec, problems = run_spec.parse_form(texts)

    assert spec is None
    assert [p.field for p in problems] == [field] and says in str(problems[0])


def test_a_form_with_good_values_makes_the_spec():
    spec, problems = run_spec.parse_form(
        {
            "tasks_dir": "tasks",
            "agent": "oracle",
            "concurrency": "2",
            "max_tokens": "",
            "include": ["a", ""],
        }
    )

    assert problems == []
    assert spec == RunSpec(tasks_dir=Path("tasks"), agent="oracle", concurrency=2, include=["a"])


def test_values_out_of_range_are_problems_of_their_field():
    spec = RunSpec(tasks_dir=Path("t"), concurrency=0, max_cost_usd=-1.0)

    assert [p.field for p in run_spec.value_problems(spec)] == ["concurrency", "max_cost_usd"]


def test_the_reviewer_flags_have_benchflows_defaults_and_parse_into_the_spec():
    default = run_spec.from_args(parser().parse_args(["tasks"]))
    assert (default.reviewer_agent, default.reviewer_model, default.reviewer_sandbox) == (
        "opencode",
        None,
        "docker",
    )
    assert (default.reviewer_timeout_sec, default.reviewer_idle_timeout) == (1800.0, 600.0)
    assert (default.reviewer_concurrency, default.reviewer_open_network) == (4, False)

    args = parser().parse_args(
        "tasks --reviewer-model mock/oracle --reviewer-agent claude --reviewer-reasoning-effort "
        "high --reviewer-sandbox docker --reviewer-timeout-sec 300 --reviewer-idle-timeout none "
        "--reviewer-concurrency 2 --reviewer-image alpine:3 --reviewer-agent-env A=1 "
        "--reviewer-agent-env NOTE=sk-live-abcdefghijklmnop --reviewer-open-network".split()
    )
    spec = run_spec.from_args(args)

    assert spec == RunSpec(
        tasks_dir=Path("tasks"),
        reviewer_model="mock/oracle",
        reviewer_agent="claude",
        reviewer_reasoning_effort="high",
        reviewer_timeout_sec=300.0,
        reviewer_idle_timeout=None,
        reviewer_concurrency=2,
        reviewer_image="alpine:3",
        reviewer_agent_env={"A": "1", "NOTE": "sk-live-abcdefghijklmnop"},
        reviewer_open_network=True,
    )


def test_a_reviewer_sandbox_other_than_docker_is_refused_naming_the_flag():
    with pytest.raises(argparse.ArgumentError) as refused:
        parser().parse_args(["tasks", "--reviewer-sandbox", "modal"])

    assert "--reviewer-sandbox" in str(refused.value)
    assert "only docker is supported here, got 'modal'" in str(refused.value)
    problems = run_spec.value_problems(RunSpec(tasks_dir=Path("t"), reviewer_sandbox="daytona"))
    assert [p.field for p in problems] == ["reviewer_sandbox"]


def test_the_reviewer_settings_are_recorded_with_env_names_only_and_come_back():
    spec = RunSpec(
        tasks_dir=Path("tasks"),
        reviewer_model="mock/oracle",
        reviewer_timeout_sec=300.0,
        reviewer_image="alpine:3",
        reviewer_agent_env={"MODE": "strict", "NOTE": "sk-live-abcdefghijklmnop"},
    )

    recorded = spec.recorded()
    back = RunSpec.from_recorded(recorded)

    block = recorded["reviewer"]
    assert block["model"] == "mock/oracle" and block["timeout_sec"] == 300.0
    assert block["agent_env_keys"] == ["MODE", "NOTE"] and "agent_env" not in block
    assert "sk-live" not in str(recorded) and "strict" not in str(recorded)
    assert back == dataclasses.replace(spec, reviewer_agent_env={})
    assert "reviewer" not in RunSpec(tasks_dir=Path("t")).recorded()  # no review, no block
