"""The agents users name with `-a`, resolved before a job exists, with the run's model."""

from __future__ import annotations

import difflib
from pathlib import Path

from runs.agents.base import Agent, AgentError
from runs.agents.claude import ClaudeAgent, login_credentials
from runs.agents.codex import CodexAgent
from runs.agents.controls import NopAgent, OracleAgent, ScriptAgent
from runs.agents.logins import login_refused
from runs.agents.model_agent import ModelAgent
from runs.agents.opencode import OpenCodeAgent

CONTROL_AGENTS: dict[str, type[Agent]] = {"oracle": OracleAgent, "nop": NopAgent}
MODEL_AGENTS: dict[str, type[ModelAgent]] = {
    "claude": ClaudeAgent,
    "opencode": OpenCodeAgent,
    "codex": CodexAgent,
}
ALIASES: dict[str, str] = {
    "claude-agent-acp": "claude",
    "claude-code": "claude",
    "codex-acp": "codex",
}


def known_agent_names() -> list[str]:
    return [*CONTROL_AGENTS, *MODEL_AGENTS, "script:PATH"]


def resolve_agent(
    name: str,
    *,
    model: str | None = None,
    cwd: Path | None = None,
    login_lent_by: str | None = None,
) -> Agent:
    """The agent for `-a NAME -m MODEL`; an unknown name raises AgentError with a did-you-mean.

    `-a claude` with a bare Claude alias and no API key uses this machine's Claude login, whose
    calls go around the proxy (runs/agents/claude.py login_credentials). `login_lent_by` names
    whose login that would be when its owner did not lend it (runs/agents/logins.py): then an
    AgentError says so.
    """
    if name.startswith("script:"):
        path = Path(name[len("script:") :]).expanduser()
        if cwd is not None and not path.is_absolute():
            path = cwd / path
        if not path.is_file():
            raise AgentError(
                f"-a {name}: no script at {path}; fix: pass script:PATH with the path of an executable script"
            )
        return ScriptAgent(path, name=name, model=model)
    if name in CONTROL_AGENTS:
        return CONTROL_AGENTS[name]()
    canonical = ALIASES.get(name, name)
    if canonical == "claude":
        login = bool(model) and login_credentials(model or "") is not None
        if login and login_lent_by is not None:
            raise AgentError(login_refused(model or "", login_lent_by))
        return ClaudeAgent(model, login=login)
    if canonical in MODEL_AGENTS:
        return MODEL_AGENTS[canonical](model)
    names = [n for n in known_agent_names() if n != "script:PATH"] + list(ALIASES)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    if not close:
        # transposed letters ("oracel") score low in difflib's ratio; compare sorted letters too
        close = [n for n in names if sorted(n) == sorted(name)][:1]
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise AgentError(
        f"unknown agent {name!r}; {hint}known agents: {', '.join(known_agent_names())}"
    )
