"""OpenCode: the proxy's Chat Completions endpoint as an OpenAI-compatible provider of its config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runs.agents.install import SPECS
from runs.agents.mcp import opencode_servers
from runs.agents.model_agent import (
    AGENTS_ROOT,
    MODEL_CONTEXT_TOKENS,
    MODEL_OUTPUT_TOKENS,
    ModelAgent,
    _short,
    cli_model_name,
)
from runs.agents.session_logs import opencode_subagents
from runs.sandboxes.files import FileEntry
from runs.tasks.harbor_keys import McpServer
from runs.tasks.load import Task


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
        if servers := self.mcp_config(task.sandbox.mcp_servers):
            config["mcp"] = servers
        return {
            f"{self.home}/opencode.json": FileEntry(json.dumps(config, indent=2).encode(), 0o644),
            self._instruction_file: FileEntry(instruction.encode(), 0o644),
            # where OpenCode looks for rg when the image has none on its PATH (else it downloads one)
            f"{self._rg_dir}/rg": FileEntry(b"", link=f"{AGENTS_ROOT}/{self.spec.name}/rg"),
        }

    def skills_folder(self) -> str | None:
        return f"{self.home}/.config/opencode/skills"  # $XDG_CONFIG_HOME/opencode/skills

    def mcp_config(self, servers: tuple[McpServer, ...]) -> dict[str, Any] | None:
        return opencode_servers(servers)

    @property
    def _instruction_file(self) -> str:
        return f"{self.home}/instruction.md"

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
        """`run` reading the instruction on its stdin, from the file files() wrote, with no message
        argument: it joins its message arguments with spaces after wrapping each one that holds a
        space in double quotes and escaping the quotes inside, so an instruction given as an
        argument reached the model as `"Fix it."`, and `print("hi")` as `print(\\"hi\\")`. A
        stdin that is not a terminal it reads whole and, with no argument, sends as it is. A file
        rather than a pipe from an argument, because one argument may not pass 128 KiB on Linux.
        (`instruction` is that of files(): the runner gives both the same.)"""
        return [
            "sh",
            "-c",
            'exec "$0" run -m "$1" --format json < "$2"',
            self.binary,
            f"benchflow/{cli_model_name(self.model)}",
            self._instruction_file,
        ]

    def tool_titles(self, event: dict[str, Any]) -> list[str]:
        if event.get("type") != "tool_use":
            return []
        part = event.get("part") or {}
        args = (part.get("state") or {}).get("input") or {}
        return [_short(args.get("command") or args.get("filePath") or part.get("tool") or "tool")]

    def tool_progress(self, event: dict[str, Any]) -> int:
        # OpenCode reports a tool call only once it is done, inside a step (the model call and the
        # tools it asks for): an open step is pending work
        return {"step_start": 1, "step_finish": -1}.get(str(event.get("type")), 0)
