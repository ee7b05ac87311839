"""What an agent is to the runner: files placed in the sandbox and a command run there."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from runs.sandboxes.files import FileEntry
from runs.sandboxes.layers import AgentLayer
from runs.tasks.load import Task

AGENT_HOME = "/benchflow/agent"


class AgentError(Exception):
    """A user mistake in choosing or configuring the agent."""


@dataclass
class AgentCommand:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    workdir: str | None = None


class Agent:
    """Base agent: runs nothing. Subclasses say what to copy in and what to run."""

    name = "agent"
    needs_model = False
    log_name = "agent.txt"
    session_store = "folder"  # how it keeps it: runs/session_logs.keep_session_logs

    @property
    def session_logs(self) -> str | None:
        """The folder of its own session log in the sandbox, if it keeps one."""
        return None

    def subagents_from(self, files: list[Path]) -> dict[str, int] | None:
        """What its subagents used, from its session log files (trial_budget.subagents); None when
        the log cannot tell."""
        return None

    def files(self, task: Task, instruction: str) -> dict[str, FileEntry]:
        return {}

    def command(self, task: Task, instruction: str) -> AgentCommand | None:
        return None

    def model_env(self, key: str) -> dict[str, str]:
        """Variables pointing the agent at the model proxy with its attempt's key."""
        return {}

    def writable_dirs(self) -> list[str]:
        """Folders made world-writable in the sandbox before the agent starts (its HOME)."""
        return []

    def loopback_ports(self) -> list[int]:
        """Ports on the host's 127.0.0.1 the agent reaches on its sandbox's own 127.0.0.1."""
        return []

    def image_layer(self) -> AgentLayer | None:
        """Files the agent needs in every sandbox, as a cached layer over the task's image."""
        return None

    def mounts(self, task: Task) -> dict[str, tuple[Path, str]]:
        """Host folders bind-mounted into the sandbox: container path -> (host path, ro|rw)."""
        return {}

    def check_task(self, task: Task) -> str | None:
        """A reason this agent cannot run `task` (checked before a job exists), or None."""
        return None
