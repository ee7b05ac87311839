"""Agents: what runs in the sandbox (runs/agents/registry.py resolves `-a NAME`)."""
