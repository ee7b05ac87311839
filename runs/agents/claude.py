"""Claude Code: the proxy's Anthropic Messages endpoint, or this machine's Claude login around it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from runs.agents.base import AgentCommand, NativeUsage
from runs.agents.install import SPECS
from runs.agents.login_usage import native_usage_of, read_session_usage
from runs.agents.mcp import claude_servers
from runs.agents.model_agent import ModelAgent, _short, cli_model_name
from runs.agents.session_logs import claude_subagents
from runs.sandboxes.docker import Sandbox
from runs.sandboxes.files import FileEntry
from runs.tasks.harbor_keys import McpServer
from runs.tasks.load import Task


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

    def __init__(self, model: str | None = None, proxy_url: str = "", login: bool = False) -> None:
        super().__init__(model, proxy_url)
        # a subscription login (runs/agents/registry.py decides): its calls go straight to
        # Anthropic, not through the proxy
        self.login = login

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
        files = {
            f"{self.config_dir}/settings.json": FileEntry(
                json.dumps(settings, indent=2).encode(), 0o644
            )
        }
        if servers := self.mcp_config(task.sandbox.mcp_servers):
            # its user scope (CLAUDE_CONFIG_DIR/.claude.json): loaded with no trust prompt, unlike
            # a project's .mcp.json; writable, as Claude Code keeps its state in the same file
            user = {"mcpServers": servers}
            files[f"{self.config_dir}/.claude.json"] = FileEntry(json.dumps(user).encode(), 0o666)
        return files

    def skills_folder(self) -> str | None:
        return f"{self.config_dir}/skills"  # CLAUDE_CONFIG_DIR/skills, as Harbor copies them

    def mcp_config(self, servers: tuple[McpServer, ...]) -> dict[str, Any] | None:
        return claude_servers(servers)

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
        # the login, and its gateway if any
        for name in (
            "CLAUDE_CODE_OAUTH_TOKEN",
            "ANTHROPIC_BASE_URL",
        ):
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

    def tool_titles(self, event: dict[str, Any]) -> list[str]:
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

    def native_usage(
        self, sandbox: Sandbox, env: dict[str, str], session_id: str | None
    ) -> NativeUsage | None:
        config_dir = env.get("CLAUDE_CONFIG_DIR")
        if not config_dir or not session_id:
            return None
        usage = read_session_usage(sandbox, config_dir, session_id)
        return None if usage is None else native_usage_of(usage, "agent_session_log")
