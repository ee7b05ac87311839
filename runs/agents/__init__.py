"""The agent registry: names users pass to `-a`, resolved before a job exists."""

from __future__ import annotations

import difflib
from pathlib import Path

from runs.agents.base import Agent, AgentError
from runs.agents.controls import NopAgent, OracleAgent, ScriptAgent

CONTROL_AGENTS: dict[str, type[Agent]] = {"oracle": OracleAgent, "nop": NopAgent}
MODEL_AGENTS: tuple[str, ...] = ()  # filled by runs.agents.cli_agents when model agents load


def known_agent_names() -> list[str]:
    from runs.agents import cli_agents

    return [*CONTROL_AGENTS, *cli_agents.AGENTS, "script:PATH"]


def resolve_agent(name: str, *, cwd: Path | None = None) -> Agent:
    """The agent for `-a NAME`; an unknown name raises AgentError with a did-you-mean."""
    if name.startswith("script:"):
        path = Path(name[len("script:") :]).expanduser()
        if cwd is not None and not path.is_absolute():
            path = cwd / path
        if not path.is_file():
            raise AgentError(
                f"-a {name}: no script at {path}; fix: pass script:PATH with the path of an executable script"
            )
        agent = ScriptAgent(path)
        agent.name = name
        return agent
    if name in CONTROL_AGENTS:
        return CONTROL_AGENTS[name]()
    from runs.agents import cli_agents

    if name in cli_agents.AGENTS or name in cli_agents.ALIASES:
        return cli_agents.make(name)
    names = [n for n in known_agent_names() if n != "script:PATH"] + list(cli_agents.ALIASES)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    if not close:
        # transposed letters ("oracel") score low in difflib's ratio; compare sorted letters too
        close = [n for n in names if sorted(n) == sorted(name)][:1]
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise AgentError(
        f"unknown agent {name!r}; {hint}known agents: {', '.join(known_agent_names())}"
    )
