"""What an agent is to the runner: files placed in the sandbox and a command run there.

Every capability the runner uses is declared here with its default, so a job, a trial and the
checks before a job ask the agent, never probe it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runs.sandboxes.files import FileEntry
from runs.sandboxes.layers import AgentLayer
from runs.tasks.config import Step
from runs.tasks.harbor_keys import McpServer
from runs.tasks.load import Task

if TYPE_CHECKING:
    from runs.events import Event
    from runs.sandboxes.docker import Sandbox

AGENT_HOME = "/benchflow/agent"
# --agent-env variables that would point an agent's model calls somewhere of their own
BASE_URL_VARS = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "LLM_BASE_URL", "OPENAI_API_BASE")


class AgentError(Exception):
    """A user mistake in choosing or configuring the agent."""


@dataclass
class AgentCommand:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    workdir: str | None = None


@dataclass(frozen=True)
class NativeUsage:
    """What an agent that calls its provider directly (a login) logged of its own calls."""

    input_tokens: int  # cache reads and writes included
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    source: str  # agent_session_log | agent_result_line
    calls: int | None = None


class Agent:
    """Base agent: runs nothing. Subclasses say what to copy in and what to run."""

    name = "agent"
    needs_model = False  # must be given -m
    log_name = "agent.txt"
    session_store = "folder"  # how it keeps its session log: runs/agents/session_logs.py
    protocol: str | None = None  # the wire API it speaks to its model: messages | chat | responses
    # calls its provider with this machine's login, around the model proxy: no per-trial budget,
    # no dollars, usage from its own log
    login = False
    # runs the task's own solution (the oracle): a command it cannot find is the task's problem,
    # graded as the task left it, not the agent's install failing
    runs_task_solution = False

    def __init__(self, model: str | None = None, proxy_url: str = "") -> None:
        self.model = model or ""
        self.proxy_url = proxy_url  # the model proxy, as the sandbox reaches it

    def with_proxy(self, proxy_url: str) -> Agent:
        """This agent pointed at the model proxy once it listens (a copy; this one is unchanged)."""
        made = copy.copy(self)
        made.proxy_url = proxy_url
        return made

    def calls_proxy(self) -> bool:
        """Whether its model calls go through our proxy (and can be counted and budgeted)."""
        return self.needs_model and not self.login

    def install(self, emit: Callable[[Event], None]) -> None:
        """Fetch what it needs on the host before the first trial (once per version)."""

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

    def skills_folder(self) -> str | None:
        """Where in the sandbox it reads skills (a task's skills_dir is copied there); None when
        it reads none (the run says it runs without them)."""
        return None

    def mcp_config(self, servers: tuple[McpServer, ...]) -> dict[str, Any] | None:
        """The task's MCP servers in this agent's own config (runs/agents/mcp.py), which its
        files() write; None when it takes no MCP servers (the run says it runs without them)."""
        return None

    def command(self, task: Task, instruction: str) -> AgentCommand | None:
        return None

    def command_for_step(self, task: Task, step: Step, instruction: str) -> AgentCommand | None:
        """The command for one step of a multi-step task (`task` is the step's view of it)."""
        return self.command(task, instruction)

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

    def tool_titles(self, event: dict[str, Any]) -> list[str]:
        """Titles of the tool calls one JSON event of its output starts."""
        return []

    def tool_progress(self, event: dict[str, Any]) -> int:
        """Tool calls one JSON event starts (+) or reports finished (-): the idle watchdog gives a
        running tool three times the idle limit."""
        return 0

    def native_usage(
        self, sandbox: Sandbox, env: dict[str, str], session_id: str | None
    ) -> NativeUsage | None:
        """A login's usage from its own session log in the sandbox, after it stopped."""
        return None
