"""A job handed to the worker fleet: its secret env values (the agent's and the reviewer's) are
taken out of the request the database keeps, and given back to its coordinator."""

from __future__ import annotations

from runs.operations import fleet


def test_secret_agent_and_reviewer_values_are_split_out_and_come_back_apart():
    body = {
        "agent": "claude",
        "agent_env": {"MODE": "fast", "API_TOKEN": "sk-live-abcdefghijklmnop"},
        "reviewer_agent_env": {"STYLE": "strict", "NOTE": "sk-ant-api03-" + "Q" * 40},
    }

    public, secret = fleet._split(body)
    agent, reviewer = fleet._unsplit(secret)

    assert public["agent_env"] == {"MODE": "fast"}
    assert public["reviewer_agent_env"] == {"STYLE": "strict"}
    assert "sk-" not in str(public)
    assert agent == {"API_TOKEN": "sk-live-abcdefghijklmnop"}
    assert reviewer == {"NOTE": "sk-ant-api03-" + "Q" * 40}
