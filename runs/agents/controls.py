"""Agents without a model: the task's oracle solution, nothing at all, or a local script."""

from __future__ import annotations

from pathlib import Path

from runs.agents.base import AGENT_HOME, Agent, AgentCommand
from runs.sandboxes.files import FileEntry
from runs.tasks.config import Step
from runs.tasks.load import Task

SOLUTION_DIR = "/solution"
STEP_SOLUTIONS_DIR = (
    "/solution-steps"  # not /solution/steps: no mount can be made inside a read-only one
)


class OracleAgent(Agent):
    """Runs the task's solve.sh in the workdir as the task's agent user."""

    name = "oracle"
    log_name = "oracle.txt"
    runs_task_solution = True

    def mounts(self, task: Task) -> dict[str, tuple[Path, str]]:
        # read-only, straight from the task folder: nothing to copy
        found: dict[str, tuple[Path, str]] = (
            {SOLUTION_DIR: (task.solution_dir, "ro")} if task.solution_dir else {}
        )
        for step in task.steps:  # each step's own solution, for command_for_step
            if step.solution_dir is not None and _has_solve(step.solution_dir):
                found[f"{STEP_SOLUTIONS_DIR}/{step.name}"] = (step.solution_dir, "ro")
        return found

    def command(self, task: Task, instruction: str) -> AgentCommand | None:
        return AgentCommand(
            ["bash", f"{SOLUTION_DIR}/solve.sh"], user=task.agent.user, workdir=task.sandbox.workdir
        )

    def command_for_step(self, task: Task, step: Step, instruction: str) -> AgentCommand | None:
        """The step's solve.sh, else the task's shared one (`task` is the step's view of the task)."""
        if not _has_solve(step.solution_dir):
            return self.command(task, instruction)
        script = f"{STEP_SOLUTIONS_DIR}/{step.name}/solve.sh"
        return AgentCommand(["bash", script], user=task.agent.user, workdir=task.sandbox.workdir)

    def check_task(self, task: Task) -> str | None:
        if task.steps:
            bare = [s.name for s in task.steps if not _has_solve(s.solution_dir)]
            if bare and task.solution_dir is None:
                return (
                    f"{task.path}: the oracle agent needs steps/{bare[0]}/solution/solve.sh (or a shared "
                    f"solution/solve.sh); fix: add it, or leave this task out with --exclude {task.name}"
                )
            return None
        if task.solution_dir is None or not (task.solution_dir / "solve.sh").is_file():
            where = "oracle/solve.sh" if task.layout == "native" else "solution/solve.sh"
            return f"{task.path}: the oracle agent needs {where}; fix: add it, or leave this task out with --exclude {task.name}"
        return None


def _has_solve(folder: Path | None) -> bool:
    return folder is not None and (folder / "solve.sh").is_file()


class NopAgent(Agent):
    """Does nothing: a control run graded on the untouched workspace."""

    name = "nop"
    log_name = "nop.txt"


class ScriptAgent(Agent):
    """Copies a local script into the sandbox and runs it as the agent, with the instruction."""

    name = "script"
    log_name = "script.txt"

    def __init__(self, path: Path, *, name: str | None = None, model: str | None = None):
        super().__init__(model)
        self.path = path
        self.name = name or f"script:{path.name}"

    def calls_proxy(self) -> bool:
        """With -m its calls go through the proxy; without, it may call a model of its own."""
        return bool(self.model)

    def model_env(self, key: str) -> dict[str, str]:
        """With -m, the script may call the model through the proxy, in either API's variables."""
        return {
            "BENCHFLOW_PROXY_URL": self.proxy_url,
            "BENCHFLOW_PROXY_KEY": key,
            "BENCHFLOW_MODEL": self.model,
            "OPENAI_BASE_URL": f"{self.proxy_url}/v1",
            "OPENAI_API_KEY": key,
            "ANTHROPIC_BASE_URL": self.proxy_url,
            "ANTHROPIC_AUTH_TOKEN": key,
        }

    def files(self, task: Task, instruction: str) -> dict[str, FileEntry]:
        return {
            f"{AGENT_HOME}/script": FileEntry(self.path.read_bytes(), 0o755),
            f"{AGENT_HOME}/instruction.md": FileEntry(instruction.encode(), 0o644),
        }

    def command(self, task: Task, instruction: str) -> AgentCommand | None:
        return AgentCommand(
            [f"{AGENT_HOME}/script", instruction],
            env={"BENCHFLOW_INSTRUCTION_FILE": f"{AGENT_HOME}/instruction.md"},
            user=task.agent.user,
            workdir=task.sandbox.workdir,
        )
