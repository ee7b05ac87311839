"""Agents that need a model (Claude Code, OpenCode, Codex): filled in with the model proxy."""

from __future__ import annotations

from runs.agents.base import Agent

AGENTS: dict[str, type[Agent]] = {}
ALIASES: dict[str, str] = {}


def make(name: str) -> Agent:
    return AGENTS[ALIASES.get(name, name)]()
