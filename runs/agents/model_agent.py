"""What the three model CLIs (Claude Code, OpenCode, Codex) share: each talks only to our model proxy.

Each CLI is installed once per version on the host (runs/agents/install.py) and put into the
sandbox as an image layer over the task's image, built once per task image and version
(runs/sandboxes/layers.py): nothing is installed or copied per trial. BENCHFLOW_AGENT_MOUNT=1
mounts the folder read-only instead, which saves the layer's disk space (one copy of the binary
per task image).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runs.agents.base import Agent, AgentCommand, AgentError
from runs.agents.install import CliSpec, ensure_installed, installed_folder, mount_instead
from runs.sandboxes.layers import AgentLayer
from runs.tasks.load import Task

if TYPE_CHECKING:
    from runs.events import Event

AGENTS_ROOT = "/opt/benchflow/agents"
HOME_ROOT = "/opt/benchflow/home"  # not under /tmp: Codex refuses to make its helper commands (apply_patch) there
QUIET_ENV = {"NO_COLOR": "1", "TERM": "dumb", "CI": "1"}
# The context window (when to compact) and output cap told to OpenCode, and to Codex for models it
# does not know: within what every provider we route to serves.
MODEL_CONTEXT_TOKENS = 128_000
MODEL_OUTPUT_TOKENS = 8192


def cli_model_name(model: str) -> str:
    """What the CLI is told its model is; the proxy routes by the attempt's model, not this."""
    bare = model.split("/", 1)[-1]
    return "".join(c if c.isalnum() or c in "-._" else "-" for c in bare) or "model"


class ModelAgent(Agent):
    """A CLI agent given the proxy's URL and a key of its own attempt in its native variables."""

    needs_model = True
    spec: CliSpec

    def __init__(self, model: str | None = None, proxy_url: str = "") -> None:
        super().__init__(model, proxy_url)
        self.name = self.spec.name
        self.log_name = f"{self.spec.name}.txt"
        self.protocol = self.spec.protocol

    @property
    def home(self) -> str:
        return f"{HOME_ROOT}/{self.spec.name}"

    @property
    def binary(self) -> str:
        return f"{AGENTS_ROOT}/{self.spec.name}/{self.spec.binary_in_folder}"

    def writable_dirs(self) -> list[str]:
        return [HOME_ROOT, self.home]

    def install(self, emit: Callable[[Event], None]) -> None:
        ensure_installed(self.spec, emit)

    def _installed(self) -> Path:
        folder = installed_folder(self.spec)
        if folder is None:
            raise AgentError(
                f"{self.name} is not installed; the job installs it before the first trial"
            )
        return folder

    def image_layer(self) -> AgentLayer | None:
        if mount_instead():
            return None
        return AgentLayer(
            self.spec.layer_name, self._installed(), f"{AGENTS_ROOT}/{self.spec.name}"
        )

    def mounts(self, task: Task) -> dict[str, tuple[Path, str]]:
        if not mount_instead():
            return {}
        return {f"{AGENTS_ROOT}/{self.spec.name}": (self._installed(), "ro")}

    def command(self, task: Task, instruction: str) -> AgentCommand | None:
        env = {"HOME": self.home, **QUIET_ENV}
        return AgentCommand(
            self.argv(instruction), env=env, user=task.agent.user, workdir=task.sandbox.workdir
        )

    def argv(self, instruction: str) -> list[str]:
        """The CLI's command line; the instruction comes last, after `--`, so that one opening
        with "-" (a bullet list, "---") is not read as an option. It must reach the model as
        written: OpenCode, which alters an argument, reads it on its stdin instead."""
        raise NotImplementedError


def _short(text: Any) -> str:
    first = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return first[:80]
