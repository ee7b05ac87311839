"""Hole 10, a host's Claude login enters the sandbox: `bench run` on one's own machine says before
it starts that the agent will hold the login; a job launched from `bench serve` (and an attempt on
a `bench worker`) may use the machine's login only where its admin set
BENCHFLOW_ALLOW_CLAUDE_LOGIN=1. The launch form's refusal over HTTP is in test_env_serve.py."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from runs.agents.base import AgentError
from runs.agents.claude import ClaudeAgent
from runs.agents.logins import LOGIN_SETTING
from runs.agents.registry import resolve_agent
from runs.jobs import preflight
from runs.jobs.console import Reporter
from runs.operations import run as operations_run
from runs.problems import UserError
from runs.spec import RunSpec
from tests.conftest import EXAMPLES

TOKEN = "sk-ant-oat01-login-of-this-machine-0123456789abcdef"


@pytest.fixture
def logged_in(monkeypatch, tmp_path):
    """This machine has a Claude login (a token) and no API key."""
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", TOKEN)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "no-claude-dir"))
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", LOGIN_SETTING):
        monkeypatch.delenv(name, raising=False)


def _spec(tmp_path: Path) -> RunSpec:
    return RunSpec(
        tasks_dir=EXAMPLES,
        agent="claude",
        model="sonnet",
        include=["hello-world"],
        jobs_dir=tmp_path / "jobs",
    )


def test_a_job_from_bench_serve_may_not_use_the_servers_login(logged_in, tmp_path):
    found = preflight.check_run(_spec(tmp_path), on_server=True)
    (problem,) = [p for p in found.problems if p.field == "agent"]
    assert "Claude login of the server" in problem.text and LOGIN_SETTING in problem.text
    assert TOKEN not in problem.text


def test_the_admin_may_lend_the_servers_login(logged_in, tmp_path, monkeypatch):
    monkeypatch.setenv(LOGIN_SETTING, "1")
    found = preflight.check_run(_spec(tmp_path), on_server=True)
    assert found.agent is not None and found.agent.login
    assert not [p for p in found.problems if p.field == "agent"]


def test_a_worker_lends_its_login_only_where_its_admin_allowed(logged_in):
    with pytest.raises(AgentError, match="Claude login of this worker"):
        resolve_agent("claude", model="sonnet", login_lent_by="this worker")
    assert resolve_agent("claude", model="sonnet").login


def test_bench_run_says_before_it_starts_that_the_agent_will_hold_the_login(
    logged_in, tmp_path, monkeypatch
):
    out = io.StringIO()

    def stop_before_the_install(self, emit):
        raise AgentError("stopped by the test before any install")

    monkeypatch.setattr(operations_run, "docker_client", lambda: object())
    monkeypatch.setattr(
        operations_run, "host_resources", lambda client: preflight.HostResources(8, 1 << 14)
    )
    monkeypatch.setattr(ClaudeAgent, "install", stop_before_the_install)
    monkeypatch.setattr("runs.workers.choose.choose", lambda workers, broker: None)
    with pytest.raises(UserError, match="stopped by the test"):
        operations_run.run_job(
            _spec(tmp_path),
            setup_django=lambda: None,
            reporter=Reporter(stream=out, err=out),
        )
    said = out.getvalue()
    assert "runs on this machine's Claude login" in said and "$CLAUDE_CODE_OAUTH_TOKEN" in said
    assert TOKEN not in said
