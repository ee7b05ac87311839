"""Multi-step trials (runs/trials/steps.py): reward strategies, min_reward, budgets, and the step loop run
against a scripted agent and verifier (real Docker runs are in tests/e2e/test_multistep_docker.py)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from runs.agents.base import Agent, AgentCommand
from runs.agents.controls import OracleAgent
from runs.sandboxes.files import populate
from runs.spec import RunSpec
from runs.tasks.load import Task, load_task
from runs.trials.agent_run import AgentRun
from runs.trials.prepared import AttemptPlan, Prepared
from runs.trials.steps import (
    _trial_budget_record,
    budget_exhausted,
    meets_min_reward,
    run_steps,
    step_budget,
    step_tests_dirs,
    step_view,
    trial_reward,
)
from runs.trials.trial_budget import TrialBudget
from runs.trials.verifier import VerifierOutcome
from tests.conftest import trial_result

# --- pure parts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rewards", "min_reward", "met"),
    [
        ({"reward": 0.0}, None, True),  # no min_reward: always go on
        ({"reward": 1.0}, 1.0, True),
        ({"reward": 0.99}, 1.0, False),
        ({"reward": 1.0 - 1e-12}, 1.0, True),  # float noise is not a failure
        ({"reward": 0.5}, 0.5, True),
        ({"reward": 1.0, "quality": 0.5}, {"quality": 0.8}, False),  # a key can fail a full reward
        ({"reward": 0.2, "quality": 0.9}, {"quality": 0.8}, True),  # only the named keys count
        ({"reward": 1.0, "style": 0.3}, {"reward": 0.5, "style": 0.2}, True),
        ({"reward": 1.0, "style": 0.1}, {"reward": 0.5, "style": 0.2}, False),
        ({"reward": 1.0}, {"style": 0.0}, False),  # a key the verifier did not write is not met
    ],
)
def test_min_reward_is_held_against_reward_or_each_named_key(rewards, min_reward, met):
    assert meets_min_reward(rewards, min_reward) is met


@pytest.mark.parametrize(
    ("scores", "strategy", "reward"),
    [
        ([1.0, 1.0], "mean", 1.0),
        ([1.0, 0.0], "mean", 0.5),
        ([1.0, 0.5, 0.0], "mean", 0.5),
        ([1.0, None], "mean", 0.5),  # stopped early: the step not run counts 0
        ([0.0, None, None], "mean", 0.0),
        ([0.5, 0.75], "final", 0.75),
        ([1.0, 0.0], "final", 0.0),
        ([1.0, None], "final", 0.0),  # the final step never ran
        ([], "mean", 0.0),
    ],
)
def test_trial_reward_is_the_mean_or_the_final_step(scores, strategy, reward):
    assert trial_reward(scores, strategy) == pytest.approx(reward)


RUN, TASK = {"tokens": "run", "turns": None}, {"tokens": "task", "turns": "task"}


@pytest.mark.parametrize(
    ("trial", "own", "spent", "left"),
    [
        (
            TrialBudget(None, None, {"tokens": None, "turns": None}),
            (None, None),
            (500, 3),
            (None, None),
        ),
        (TrialBudget(1000, None, RUN), (None, None), (400, 2), (600, None)),  # the trial's rest
        (
            TrialBudget(1000, 10, TASK),
            (300, None),
            (400, 2),
            (300, 8),
        ),  # the step's own cap is less
        (TrialBudget(1000, 10, TASK), (900, 20), (400, 2), (600, 8)),  # ... or more: the rest wins
        (TrialBudget(None, None, {"tokens": None, "turns": None}), (None, 5), (0, 0), (None, 5)),
        (TrialBudget(100, 4, TASK), (None, None), (120, 4), (-20, 0)),
    ],
)
def test_each_step_gets_what_the_trial_budget_has_left(trial, own, spent, left):
    budget = step_budget(trial, own, spent)

    assert (budget.tokens, budget.turns) == left


def test_a_step_cap_alone_is_a_task_budget_and_a_run_budget_stays_the_runs():
    only_step = step_budget(
        TrialBudget(None, None, {"tokens": None, "turns": None}), (None, 5), (0, 0)
    )
    from_run = step_budget(TrialBudget(1000, None, RUN), (None, None), (0, 0))

    assert only_step.source == {"tokens": None, "turns": "task"}
    assert from_run.source == RUN


@pytest.mark.parametrize(
    ("tokens", "turns", "exhausted"),
    [(None, None, False), (1, None, False), (0, None, True), (None, -3, True), (50, 0, True)],
)
def test_budget_is_exhausted_when_any_measure_has_nothing_left(tokens, turns, exhausted):
    assert budget_exhausted(TrialBudget(tokens, turns, {})) is exhausted


def test_trial_budget_record_counts_every_step_and_the_stop_in_trial_terms():
    # given step 2 stopped by the proxy after 50 tokens of its own, 100 tokens spent before it
    result = {
        "agent_result": {"total_tokens": 150, "n_calls": 3},
        "error": "trial budget reached: the token budget of 120 is spent ...",
        "error_category": "trial_budget",
        "trial_budget": {
            "budget": {"tokens": 120, "turns": None},
            "source": {"tokens": "run", "turns": None},
            "used": {"tokens": 50, "turns": 1},
            "stopped_by": "tokens",
            "stopped_at": {"tokens": 50, "turns": 1},
        },
    }
    trial = TrialBudget(220, None, {"tokens": "run", "turns": None})
    typed = trial_result("stepped", **result)
    # when
    _trial_budget_record(typed, trial, (100, 2))
    # then
    result = typed.to_json()
    record = result["trial_budget"]
    assert record["budget"] == {"tokens": 220, "turns": None}
    assert record["used"] == {"tokens": 150, "turns": 3}
    assert record["stopped_at"] == {"tokens": 150, "turns": 3}
    assert "token budget of 220 is spent (150 tokens, 3 turns used" in result["error"]


# --- a task's steps as the runner sees them --------------------------------------------------

STEPS_TOML = """
multi_step_reward_strategy = "{strategy}"
[agent]
timeout_sec = 100
prompt_prefix = "Be brief."

[[steps]]
name = "one"
{one}

[[steps]]
name = "two"
[steps.agent]
timeout_sec = 5
[steps.verifier]
timeout_sec = 7

[[steps]]
name = "three"
"""


def multi_step_task(
    root: Path, *, strategy: str = "mean", one: str = "", shared_tests: bool = True
) -> Task:
    folder = root / "stepped"
    files = {
        "task.toml": STEPS_TOML.format(strategy=strategy, one=one),
        "environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
        "steps/one/instruction.md": "Do one.\n",
        "steps/one/tests/expected.txt": "1\n",
        "steps/one/solution/solve.sh": "echo 1\n",
        "steps/two/instruction.md": "Do two.\n",
        "steps/two/tests/test.sh": "echo own\n",
        "steps/three/instruction.md": "Do three.\n",
        "steps/three/tests/test.sh": "echo own\n",
        "steps/one/tests/test.sh": None if shared_tests else "echo own\n",
        "tests/test.sh": "echo shared\n" if shared_tests else None,
    }
    for rel, text in files.items():
        if text is not None:
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
    return load_task(folder)


def test_a_step_sees_its_own_prompt_agent_and_verifier_settings(tmp_path):
    task = multi_step_task(tmp_path)
    one, two, _ = task.steps

    view = step_view(task, two)

    assert view.instruction == "Do two."
    assert (view.agent.timeout_sec, view.agent.prompt_prefix) == (5.0, "Be brief.")
    assert view.verifier.timeout_sec == 7.0
    assert view.steps == ()
    assert step_view(task, one).solution_dir == one.solution_dir
    assert view.sandbox == task.sandbox


def test_a_steps_tests_are_layered_over_the_tasks(tmp_path):
    task = multi_step_task(tmp_path)
    one, two, _ = task.steps
    alone = multi_step_task(tmp_path / "alone", shared_tests=False)

    assert step_tests_dirs(task, one) == [task.tests_dir, one.tests_dir]
    assert step_tests_dirs(alone, alone.steps[0]) == [alone.steps[0].tests_dir]


class ScriptedAgent(Agent):
    name = "scripted"
    log_name = "scripted.txt"

    def command(self, task: Task, instruction: str) -> AgentCommand | None:
        return AgentCommand(["do", instruction])


class StepAwareAgent(ScriptedAgent):
    def command_for_step(self, task, step, instruction):
        return AgentCommand(["solve", step.name])


def test_an_agent_with_a_step_hook_gets_it_called_and_others_run_unchanged(tmp_path):
    task = multi_step_task(tmp_path)
    plain, aware = ScriptedAgent(), StepAwareAgent()
    step = task.steps[1]

    assert plain.command_for_step(step_view(task, step), step, "x").argv == ["do", "x"]
    assert aware.command_for_step(step_view(task, step), step, "x").argv == ["solve", "two"]


def test_the_oracle_runs_each_steps_own_solve_sh_else_the_shared_one(tmp_path):
    # given a task with a shared solution/solve.sh, and a solve.sh for step one only
    task = multi_step_task(tmp_path)
    (task.path / "solution").mkdir()
    (task.path / "solution" / "solve.sh").write_text("echo shared\n")
    task = load_task(task.path)
    one, two, _ = task.steps
    oracle = OracleAgent()
    # when
    mounts = oracle.mounts(task)
    argv = [oracle.command_for_step(step_view(task, s), s, "").argv for s in (one, two)]
    # then: no mount inside the read-only /solution (Docker cannot make one there)
    assert mounts == {
        "/solution": (task.solution_dir, "ro"),
        "/solution-steps/one": (one.solution_dir, "ro"),
    }
    assert argv == [["bash", "/solution-steps/one/solve.sh"], ["bash", "/solution/solve.sh"]]
    assert oracle.check_task(task) is None


def test_the_oracle_refuses_a_step_with_no_solution_to_run(tmp_path):
    task = multi_step_task(tmp_path)  # only step one has a solve.sh, and there is no shared one

    problem = OracleAgent().check_task(task)

    assert problem is not None and "steps/two/solution/solve.sh" in problem


# --- the step loop, against a scripted agent and verifier -------------------------------------


class FakeSandbox:
    id = "fake"

    def __init__(self):
        self.put: list[dict] = []

    def put_files(self, files, dirs=()):
        self.put.append(files)


class FakeRunner:
    """The parts of AttemptRunner that run_steps uses."""

    def __init__(self, job_dir: Path, agent: Agent, spec: RunSpec | None = None):
        self.job_dir, self.agent, self.proxy = job_dir, agent, None
        self.spec = spec or RunSpec(tasks_dir=job_dir)
        self.seen: list[tuple[str, dict]] = []

    def emit_phase(self, prepared, phase, step=None):
        self.seen.append(("phase", {"phase": phase, "step": step}))

    def on_tool(self, prepared):
        return lambda title: self.seen.append(("tool_call", {"title": title}))

    def staging(self, attempt_dir: Path) -> Path:
        path = self.job_dir / ".staging" / attempt_dir.name
        (path / "tests").mkdir(parents=True, exist_ok=True)
        return path

    async def call(self, fn, *args):
        return fn(*args)

    def judged(self, prepared, task, result):
        return contextlib.nullcontext(None)  # no verifier here asks for a model


class Script:
    """What the scripted agent and verifier do at each step, and what each saw."""

    def __init__(
        self, rewards: dict[str, dict | None], timeouts: tuple[str, ...] = (), errors=None
    ):
        self.rewards, self.timeouts, self.errors = rewards, timeouts, errors or {}
        self.refused: tuple[str, ...] = ()
        self.agent_turns: list[dict] = []
        self.graded: list[str] = []

    async def run_agent(
        self, *, agent, task, instruction, sandbox, attempt_dir, budget, command=None, **_
    ):
        step = instruction.rsplit("Do ", 1)[1].rstrip(".")
        staged = attempt_dir.parent / ".staging" / attempt_dir.name / "tests"
        self.agent_turns.append(
            {
                "step": step,
                "instruction": instruction,
                "argv": (command or agent.command(task, instruction)).argv,
                "timeout": task.agent.timeout_sec,
                "tests_visible": sorted(p.name for p in staged.iterdir()),
                "verifier_visible": sorted(p.name for p in (attempt_dir / "verifier").iterdir()),
            }
        )
        log = attempt_dir / "agent" / agent.log_name
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as fh:
            fh.write(f"agent did {step}\n")
        refused = "a budget it would go around" if step in self.refused else None
        timed_out = step in self.timeouts
        return AgentRun(
            ran=refused is None,
            timed_out=timed_out,
            timeout_s=task.agent.timeout_sec,
            refused=refused,
        )

    async def run_verifier(self, sandbox, task, attempt_dir, *, tests_dirs, staged_tests, judge):
        step = tests_dirs[-1].parent.name
        self.graded.append(step)
        populate(staged_tests, tests_dirs)
        out = attempt_dir / "verifier"
        out.mkdir(parents=True, exist_ok=True)
        with (out / "test-stdout.txt").open("a") as fh:
            fh.write(f"graded {step} with {sorted(p.name for p in staged_tests.iterdir())}\n")
        rewards = self.rewards.get(step)
        if rewards is not None:
            (out / "reward.txt").write_text(str(rewards["reward"]))
            return VerifierOutcome(rewards, None, None, 0, 0.1)
        error, category = self.errors.get(
            step, ("No reward file found at ...", "verifier_no_reward")
        )
        return VerifierOutcome(None, error, category, 0, 0.1)


async def run_script(tmp_path, monkeypatch, task: Task, script: Script, agent: Agent | None = None):
    monkeypatch.setattr("runs.trials.steps.run_agent", script.run_agent)
    monkeypatch.setattr("runs.trials.steps.run_verifier", script.run_verifier)
    job_dir = tmp_path / "job"
    attempt_dir = job_dir / "stepped__abcd1234"
    for sub in ("agent", "verifier", "artifacts"):
        (attempt_dir / sub).mkdir(parents=True)
    runner = FakeRunner(job_dir, agent or ScriptedAgent())
    plan = AttemptPlan(task, "stepped__1", 0, 1, "sha256:x")
    prepared = Prepared(plan, attempt_dir, "now", time.monotonic(), sandbox=FakeSandbox())
    result = trial_result("stepped")
    await run_steps(runner, prepared, result)  # type: ignore[arg-type]
    return result.to_json(), attempt_dir, prepared, runner


ONE = {"reward": 1.0}


async def test_steps_run_in_order_each_graded_with_its_own_tests(tmp_path, monkeypatch):
    task = multi_step_task(tmp_path)
    script = Script({"one": ONE, "two": {"reward": 0.5}, "three": ONE})

    result, attempt_dir, prepared, runner = await run_script(tmp_path, monkeypatch, task, script)

    assert [t["step"] for t in script.agent_turns] == ["one", "two", "three"] == script.graded
    assert script.agent_turns[0]["instruction"] == "Be brief.\n\nDo one."
    assert [t["timeout"] for t in script.agent_turns] == [100.0, 5.0, 100.0]
    assert result["rewards"] == {
        "reward": pytest.approx(2.5 / 3),
        "one": 1.0,
        "two": 0.5,
        "three": 1.0,
    }
    assert [s["reward"] for s in result["steps"]] == [1.0, 0.5, 1.0]
    assert all(s["ran"] and not s["stopped_early"] for s in result["steps"])
    assert result["n_prompts"] == 3
    # each step's verifier output apart; the trial's verifier/ is the last step's
    stdout = (attempt_dir / "steps" / "one" / "verifier" / "test-stdout.txt").read_text()
    assert stdout == "graded one with ['expected.txt', 'test.sh']\n"
    assert (
        attempt_dir / "verifier" / "test-stdout.txt"
    ).read_text() == "graded three with ['test.sh']\n"
    assert (
        attempt_dir / "steps" / "two" / "agent" / "scripted.txt"
    ).read_text() == "agent did two\n"
    assert (attempt_dir / "agent" / "scripted.txt").read_text().count("agent did") == 3
    assert set(prepared.timing.to_json()) >= {"agent_execution", "verifier"}
    assert [d["phase"] for k, d in runner.seen if k == "phase"] == ["agent", "verifier"] * 3


async def test_the_next_agent_turn_sees_neither_the_tests_nor_their_output(tmp_path, monkeypatch):
    task = multi_step_task(tmp_path)
    script = Script({"one": ONE, "two": ONE, "three": ONE})

    await run_script(tmp_path, monkeypatch, task, script)

    assert all(t["tests_visible"] == [] and t["verifier_visible"] == [] for t in script.agent_turns)


async def test_a_step_below_min_reward_stops_the_trial(tmp_path, monkeypatch):
    task = multi_step_task(tmp_path, one="min_reward = { quality = 0.8 }")
    script = Script({"one": {"reward": 1.0, "quality": 0.5}, "two": ONE, "three": ONE})

    result, attempt_dir, _, _ = await run_script(tmp_path, monkeypatch, task, script)

    assert script.graded == ["one"]
    assert result["rewards"] == {"reward": pytest.approx(1 / 3), "one": 1.0}
    one, two, three = result["steps"]
    assert one["stopped_early"] and one["rewards"] == {"reward": 1.0, "quality": 0.5}
    assert not two["ran"] and two["reward"] is None and not (attempt_dir / "steps" / "two").exists()
    assert (attempt_dir / "verifier" / "reward.txt").is_file()  # the last graded step's, kept


async def test_final_strategy_scores_the_last_step_and_zero_when_it_never_ran(
    tmp_path, monkeypatch
):
    finished = multi_step_task(tmp_path / "a", strategy="final")
    stopped = multi_step_task(tmp_path / "b", strategy="final", one="min_reward = 1.0")

    done, *_ = await run_script(
        tmp_path / "a",
        monkeypatch,
        finished,
        Script({"one": {"reward": 0.0}, "two": ONE, "three": ONE}),
    )
    cut, *_ = await run_script(
        tmp_path / "b", monkeypatch, stopped, Script({"one": {"reward": 0.5}})
    )

    assert done["rewards"]["reward"] == 1.0
    assert cut["rewards"] == {"reward": 0.0, "one": 0.5}


async def test_a_step_verifier_error_is_the_trials_and_names_the_step(tmp_path, monkeypatch):
    task = multi_step_task(tmp_path)
    errors = {"two": ("verifier timed out after 7s", "verifier_timeout")}
    script = Script({"one": ONE, "two": None, "three": ONE}, errors=errors)

    result, *_ = await run_script(tmp_path, monkeypatch, task, script)

    assert result["rewards"] is None
    assert result["verifier_error"] == "step 'two': verifier timed out after 7s"
    assert result["verifier_error_category"] == "verifier_timeout"
    assert script.graded == ["one", "two"]
    assert result["steps"][1]["verifier_error"] == "verifier timed out after 7s"
    assert not result["steps"][2]["ran"]


async def test_a_timed_out_step_without_reward_counts_zero_and_the_trial_goes_on(
    tmp_path, monkeypatch
):
    task = multi_step_task(tmp_path)
    script = Script({"one": ONE, "two": None, "three": ONE}, timeouts=("two",))

    result, *_ = await run_script(tmp_path, monkeypatch, task, script)

    assert result["rewards"] == {
        "reward": pytest.approx(2 / 3),
        "one": 1.0,
        "two": 0.0,
        "three": 1.0,
    }
    assert result["steps"][1]["agent_timed_out"] and result["verifier_error"] is None


async def test_an_agent_with_a_step_hook_runs_each_steps_command(tmp_path, monkeypatch):
    task = multi_step_task(tmp_path)
    script = Script({"one": ONE, "two": ONE, "three": ONE})

    await run_script(tmp_path, monkeypatch, task, script, agent=StepAwareAgent())

    assert [t["argv"] for t in script.agent_turns] == [
        ["solve", "one"],
        ["solve", "two"],
        ["solve", "three"],
    ]


async def test_an_agent_refused_before_it_started_leaves_the_trial_without_reward(
    tmp_path, monkeypatch
):
    task = multi_step_task(tmp_path)
    script = Script({"one": ONE, "two": ONE, "three": ONE})
    script.refused = ("two",)

    result, *_ = await run_script(tmp_path, monkeypatch, task, script)

    assert result["rewards"] is None
    assert script.graded == ["one"]
    assert [s["ran"] for s in result["steps"]] == [True, False, False]
