"""Agents that need a model: Claude Code, OpenCode and Codex, each talking only to our model proxy.

Each CLI is installed once per version on the host (runs/agents/install.py) and put into the
sandbox as an image layer over the task's image, built once per task image and version
(runs/sandboxes/layers.py): nothing is installed or copied per trial. BENCHFLOW_AGENT_MOUNT=1
mounts the folder read-only instead, which saves the layer's disk space (one copy of the binary
per task image).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from runs.agents.base import Agent, AgentCommand, AgentError
from runs.agents.install import SPECS, CliSpec, ensure_installed, mount_instead
from runs.agents.session_logs import claude_subagents, codex_subagents, opencode_subagents
from runs.sandboxes.files import FileEntry
from runs.sandboxes.layers import AgentLayer
from runs.tasks.load import Task

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

    def __init__(self) -> None:
        self.name = self.spec.name
        self.log_name = f"{self.spec.name}.txt"
        self.folder: Path | None = None
        self.proxy_url = ""  # set by the job once its proxy listens
        self.model = ""

    @property
    def home(self) -> str:
        return f"{HOME_ROOT}/{self.spec.name}"

    @property
    def binary(self) -> str:
        return f"{AGENTS_ROOT}/{self.spec.name}/{self.spec.binary_in_folder}"

    def writable_dirs(self) -> list[str]:
        return [HOME_ROOT, self.home]

    def install(self, log=print) -> None:
        self.folder = ensure_installed(self.spec, log)

    def _installed(self) -> Path:
        if self.folder is None:
            raise AgentError(
                f"{self.name} is not installed; the job installs it before the first trial"
            )
        return self.folder

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

    def model_env(self, key: str) -> dict[str, str]:
        """The variables that point the agent at the proxy; the key is the attempt's own."""
        raise NotImplementedError

    def command(self, task: Task, instruction: str) -> AgentCommand | None:
        env = {"HOME": self.home, **QUIET_ENV}
        return AgentCommand(
            self.argv(instruction), env=env, user=task.agent.user, workdir=task.sandbox.workdir
        )

    def argv(self, instruction: str) -> list[str]:
        """The CLI's command line; the instruction comes last, after `--`, so that one opening
        with "-" (a bullet list, "---") is not read as an option."""
        raise NotImplementedError

    def tool_title(self, event: dict[str, Any]) -> list[str]:
        """Titles of the tool calls one JSON event of the agent's output starts."""
        return []

    def tool_progress(self, event: dict[str, Any]) -> int:
        """Tool calls one JSON event starts (+) or reports finished (-): the idle watchdog gives a
        running tool three times the idle limit."""
        return 0


def _short(text: Any) -> str:
    first = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return first[:80]


def login_credentials(model: str, env: dict[str, str] | None = None) -> Path | str | None:
    """A Claude subscription login usable for -m sonnet: an OAuth token, or the credentials file.

    Only for bare Claude aliases and only when no API key is exported (an API key wins).
    """
    env = dict(os.environ) if env is None else env
    if "/" in model or env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN"):
        return None
    if not (model in ("sonnet", "opus", "haiku") or model.startswith("claude-")):
        return None
    if env.get("CLAUDE_CODE_OAUTH_TOKEN"):
        return "env:CLAUDE_CODE_OAUTH_TOKEN"
    path = Path(env.get("CLAUDE_CONFIG_DIR", Path.home() / ".claude")) / ".credentials.json"
    return path if path.is_file() else None


class ClaudeAgent(ModelAgent):
    spec = SPECS["claude"]
    login = False  # a subscription login: calls go straight to Anthropic, not through the proxy

    @property
    def needs_proxy(self) -> bool:
        return not self.login

    @property
    def config_dir(self) -> str:
        """CLAUDE_CONFIG_DIR in the sandbox: its settings, sessions and a login's credentials."""
        return f"{self.home}/.claude"

    def writable_dirs(self) -> list[str]:
        # made here, not by Docker for the credentials' mount (root, 755): the agent user writes in it
        return [*super().writable_dirs(), self.config_dir]

    @property
    def session_logs(self) -> str:
        return f"{self.config_dir}/projects"  # <cwd>/<session>.jsonl, its subagents' in <session>/subagents/

    def subagents_from(self, files: list[Path]) -> dict[str, int] | None:
        # its printed events mark a subagent's calls too, but carry a call's usage before its end
        return claude_subagents(files)

    def files(self, task: Task, instruction: str) -> dict[str, FileEntry]:
        # WebFetch otherwise first asks api.anthropic.com whether it may fetch the domain, outside the
        # proxy (CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC does not turn that off)
        settings = {"skipWebFetchPreflight": True}
        return {
            f"{self.config_dir}/settings.json": FileEntry(
                json.dumps(settings, indent=2).encode(), 0o644
            )
        }

    def mounts(self, task: Task) -> dict[str, tuple[Path, str]]:
        mounts = super().mounts(task)
        creds = login_credentials(self.model) if self.login else None
        if isinstance(creds, Path):
            mounts[f"{self.config_dir}/.credentials.json"] = (creds, "ro")
        return mounts

    def command(self, task: Task, instruction: str) -> AgentCommand | None:
        command = super().command(task, instruction)
        if command is not None and self.login:
            command.env.update(self.login_env())
        return command

    def login_env(self) -> dict[str, str]:
        env = {
            "IS_SANDBOX": "1",
            "CLAUDE_CONFIG_DIR": self.config_dir,
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        for name in (
            "CLAUDE_CODE_OAUTH_TOKEN",
            "ANTHROPIC_BASE_URL",
        ):  # the login, and its gateway if any
            if os.environ.get(name):
                env[name] = os.environ[name]
        return env

    def loopback_ports(self) -> list[int]:
        """A login's gateway on this machine's 127.0.0.1 (ANTHROPIC_BASE_URL) is relayed into the sandbox."""
        if not self.login:
            return []
        url = urlsplit(os.environ.get("ANTHROPIC_BASE_URL", ""))
        if url.hostname in ("127.0.0.1", "localhost") and url.port:
            return [url.port]
        return []

    def model_env(self, key: str) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": self.proxy_url,
            "ANTHROPIC_AUTH_TOKEN": key,
            "ANTHROPIC_MODEL": cli_model_name(self.model),
            "IS_SANDBOX": "1",  # lets --dangerously-skip-permissions run as root inside the sandbox
            "CLAUDE_CONFIG_DIR": self.config_dir,
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }

    def argv(self, instruction: str) -> list[str]:
        return [
            self.binary,
            "-p",
            "--dangerously-skip-permissions",
            "--model",
            cli_model_name(self.model),
            "--output-format",
            "stream-json",
            "--verbose",
            "--",
            instruction,
        ]

    def tool_title(self, event: dict[str, Any]) -> list[str]:
        if event.get("type") != "assistant":
            return []
        content = (event.get("message") or {}).get("content") or []
        titles = []
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                args = block.get("input") or {}
                titles.append(
                    _short(
                        args.get("command")
                        or args.get("file_path")
                        or args.get("pattern")
                        or block.get("name")
                    )
                )
        return titles

    def tool_progress(self, event: dict[str, Any]) -> int:
        # an assistant message starts its tool_use blocks; the user message with their
        # tool_result blocks reports them finished
        kind = event.get("type")
        if kind not in ("assistant", "user"):
            return 0
        content = (event.get("message") or {}).get("content")
        block_type = "tool_use" if kind == "assistant" else "tool_result"
        n = (
            sum(1 for b in content if isinstance(b, dict) and b.get("type") == block_type)
            if isinstance(content, list)
            else 0
        )
        return n if kind == "assistant" else -n


class OpenCodeAgent(ModelAgent):
    spec = SPECS["opencode"]

    def files(self, task: Task, instruction: str) -> dict[str, FileEntry]:
        config = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                "benchflow": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "BenchFlow model proxy",
                    "options": {
                        "baseURL": f"{self.proxy_url}/v1",
                        "apiKey": "{env:BENCHFLOW_PROXY_KEY}",
                    },
                    "models": {
                        cli_model_name(self.model): {
                            "name": cli_model_name(self.model),
                            "tool_call": True,
                            # Without a limit OpenCode asks for 32000 output tokens, which providers with a
                            # lower cap reject, and takes a context of 0, which turns auto-compaction off.
                            "limit": {
                                "context": MODEL_CONTEXT_TOKENS,
                                "output": MODEL_OUTPUT_TOKENS,
                            },
                        }
                    },
                }
            },
            "model": f"benchflow/{cli_model_name(self.model)}",
            "small_model": f"benchflow/{cli_model_name(self.model)}",
            # `run` rejects whatever would ask: its defaults ask before reading *.env files and
            # before going on after the same tool call repeats (doom_loop)
            "permission": {
                "bash": "allow",
                "edit": "allow",
                "external_directory": "allow",
                "read": "allow",
                "doom_loop": "allow",
            },
            "autoupdate": False,
            "share": "disabled",
        }
        return {
            f"{self.home}/opencode.json": FileEntry(json.dumps(config, indent=2).encode(), 0o644),
            # where OpenCode looks for rg when the image has none on its PATH (else it downloads one)
            f"{self._rg_dir}/rg": FileEntry(b"", link=f"{AGENTS_ROOT}/{self.spec.name}/rg"),
        }

    @property
    def _rg_dir(self) -> str:
        return f"{self.home}/.cache/opencode/bin"  # $XDG_CACHE_HOME/opencode/bin

    def writable_dirs(self) -> list[str]:
        # made before the link goes in, so that the agent's user may write its caches there
        return [
            *super().writable_dirs(),
            f"{self.home}/.cache",
            f"{self.home}/.cache/opencode",
            self._rg_dir,
        ]

    def model_env(self, key: str) -> dict[str, str]:
        h = self.home
        return {
            "BENCHFLOW_PROXY_KEY": key,
            "OPENCODE_CONFIG": f"{h}/opencode.json",
            "XDG_CONFIG_HOME": f"{h}/.config",
            "XDG_DATA_HOME": f"{h}/.local/share",
            "XDG_CACHE_HOME": f"{h}/.cache",
            "XDG_STATE_HOME": f"{h}/.local/state",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_PURE": "1",  # no external plugins
            # It still installs @opencode-ai/plugin into its config folder at every start, with
            # npm's own code: offline, npm fails at once instead of reaching the registry.
            "npm_config_offline": "true",
            # the task's own opencode.json could move the proxy's URL, deny tools or add plugins
            # (this also skips the project's AGENTS.md, which OpenCode reads as instructions)
            "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
        }

    session_store = "opencode-db"

    @property
    def session_logs(self) -> str:
        return f"{self.home}/.local/share/opencode"  # $XDG_DATA_HOME/opencode: its SQLite store

    def subagents_from(self, files: list[Path]) -> dict[str, int] | None:
        return opencode_subagents(files)

    def argv(self, instruction: str) -> list[str]:
        return [
            self.binary,
            "run",
            "-m",
            f"benchflow/{cli_model_name(self.model)}",
            "--format",
            "json",
            "--",
            instruction,
        ]

    def tool_title(self, event: dict[str, Any]) -> list[str]:
        if event.get("type") != "tool_use":
            return []
        part = event.get("part") or {}
        args = (part.get("state") or {}).get("input") or {}
        return [_short(args.get("command") or args.get("filePath") or part.get("tool") or "tool")]

    def tool_progress(self, event: dict[str, Any]) -> int:
        # OpenCode reports a tool call only once it is done, inside a step (the model call and the
        # tools it asks for): an open step is pending work
        return {"step_start": 1, "step_finish": -1}.get(str(event.get("type")), 0)


class CodexAgent(ModelAgent):
    spec = SPECS["codex"]

    def files(self, task: Task, instruction: str) -> dict[str, FileEntry]:
        config = f"""model = "{cli_model_name(self.model)}"
{self._model_limits()}model_provider = "benchflow"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.benchflow]
name = "BenchFlow model proxy"
base_url = "{self.proxy_url}/v1"
env_key = "BENCHFLOW_PROXY_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[features]
plugins = false
apps = false
"""
        return {f"{self.home}/config.toml": FileEntry(config.encode(), 0o644)}

    def _model_limits(self) -> str:
        """Codex knows OpenAI's models; for any other ("Model metadata for `x` not found.
        Defaulting to fallback metadata") it is told the window OpenCode is told, and to compact
        the conversation before the window is full."""
        if self.model.startswith("openai/"):
            return ""
        return (
            f"model_context_window = {MODEL_CONTEXT_TOKENS}\n"
            f"model_auto_compact_token_limit = {MODEL_CONTEXT_TOKENS - 2 * MODEL_OUTPUT_TOKENS}\n"
        )

    def model_env(self, key: str) -> dict[str, str]:
        return {"BENCHFLOW_PROXY_KEY": key, "CODEX_HOME": self.home}

    @property
    def session_logs(self) -> str:
        return f"{self.home}/sessions"  # $CODEX_HOME/sessions: one rollout file per thread

    def subagents_from(self, files: list[Path]) -> dict[str, int] | None:
        return codex_subagents(files)

    def argv(self, instruction: str) -> list[str]:
        return [
            self.binary,
            "exec",
            "--dangerously-bypass-approvals-and-sandbox",
            "--skip-git-repo-check",
            "--json",
            "--",
            instruction,
        ]

    def tool_title(self, event: dict[str, Any]) -> list[str]:
        if event.get("type") != "item.started":
            return []
        item = event.get("item") or {}
        kind = item.get("type")
        if kind in ("agent_message", "reasoning", "error", None):
            return []
        return [_short(item.get("command") or item.get("tool") or kind)]

    def tool_progress(self, event: dict[str, Any]) -> int:
        kind = event.get("type")
        if kind not in ("item.started", "item.completed"):
            return 0
        if (event.get("item") or {}).get("type") in ("agent_message", "reasoning", "error", None):
            return 0
        return 1 if kind == "item.started" else -1


AGENTS: dict[str, type[ModelAgent]] = {
    "claude": ClaudeAgent,
    "opencode": OpenCodeAgent,
    "codex": CodexAgent,
}
ALIASES: dict[str, str] = {
    "claude-agent-acp": "claude",
    "claude-code": "claude",
    "codex-acp": "codex",
}


def make(name: str) -> Agent:
    return AGENTS[ALIASES.get(name, name)]()
