"""Codex: the proxy's Responses endpoint (the only wire API Codex speaks) as a provider of its config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runs.agents.install import SPECS
from runs.agents.mcp import codex_servers, toml_tables
from runs.agents.model_agent import (
    MODEL_CONTEXT_TOKENS,
    MODEL_OUTPUT_TOKENS,
    ModelAgent,
    _short,
    cli_model_name,
)
from runs.agents.session_logs import codex_subagents
from runs.sandboxes.files import FileEntry
from runs.tasks.harbor_keys import McpServer
from runs.tasks.load import Task


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
        if servers := self.mcp_config(task.sandbox.mcp_servers):
            config += "\n" + toml_tables("mcp_servers", servers)
        return {f"{self.home}/config.toml": FileEntry(config.encode(), 0o644)}

    def skills_folder(self) -> str | None:
        return f"{self.home}/.agents/skills"  # $HOME/.agents/skills, as Harbor copies them

    def mcp_config(self, servers: tuple[McpServer, ...]) -> dict[str, Any] | None:
        return codex_servers(servers)

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

    def tool_titles(self, event: dict[str, Any]) -> list[str]:
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
