"""MCP servers and skills a task declares, given to the real agent CLIs, offline.

tests/tasksets/mcp-tools/ declares two servers of one tiny MCP server (the standard library's
JSON-RPC): `notes` over stdio, which the agent starts in its sandbox, and `almanac` over
streamable HTTP in a sidecar. The mock model (`mock/script:FILE`) calls each server's tool by the
name the agent offers it under; the requests the agent sent through the proxy show that it listed
both tools and got both answers back. tests/tasksets/setup-keys/ has a skills_dir, copied where
each CLI reads skills: each tells the model of the skill.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, job_dirs, only_result, run_args, run_bench

pytestmark = pytest.mark.docker

FIXTURE = REPO / "tests" / "tasksets" / "mcp-tools"
AGENT_RUN_TIMEOUT = 1800  # the first run of each agent installs it with npm

# each CLI's names for the two servers' get_word tool
TOOL_NAMES = {
    "claude": ("mcp__notes__get_word", "mcp__almanac__get_word"),
    "opencode": ("notes_get_word", "almanac_get_word"),
    "codex": ("mcp__notes.get_word", "mcp__almanac.get_word"),
}


def requests(job: Path, result: dict) -> list[dict]:
    path = job / result["rollout_name"] / "trajectory" / "llm_trajectory.jsonl"
    return [json.loads(line)["request"] for line in path.read_text().splitlines() if line.strip()]


def offered(request: dict) -> set[str]:
    names = set()
    for tool in request.get("tools") or []:
        if tool.get("type") == "namespace":  # Codex: a server's tools in a namespace
            names |= {f"{tool['name']}.{t.get('name')}" for t in tool.get("tools") or []}
        else:
            names.add(tool.get("name") or (tool.get("function") or {}).get("name"))
    return names


@pytest.mark.parametrize("agent", ["claude", "opencode", "codex"])
def test_the_agent_lists_and_calls_the_tasks_stdio_and_http_mcp_servers(
    docker_client, bench_env, tmp_path, agent
):
    # given the task, and a model that calls each server's tool, then finishes the task
    shutil.copytree(FIXTURE, tmp_path / "tasks" / FIXTURE.name)
    stdio_tool, http_tool = TOOL_NAMES[agent]
    script = tmp_path / "replies.json"
    script.write_text(
        json.dumps([{"tool": stdio_tool}, {"tool": http_tool}, {"shell": "touch /app/done"}])
    )
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"):
        bench_env.pop(name, None)
    # when the real CLI runs it
    proc = run_bench(
        run_args(agent, "-m", f"mock/script:{script}"),
        env=bench_env,
        cwd=tmp_path,
        timeout=AGENT_RUN_TIMEOUT,
    )
    # then it offered both servers' tools to the model, and sent back what each answered
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "takes no MCP servers" not in proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["rewards"] == {"reward": 1.0}, result
    sent = requests(job, result)
    assert any({stdio_tool, http_tool} <= offered(r) for r in sent), [offered(r) for r in sent]
    conversation = json.dumps(sent[-1])
    assert "The word of the day is lighthouse." in conversation  # notes, over stdio
    assert "The word of the day is barometer." in conversation  # almanac, in its sidecar


@pytest.mark.parametrize("agent", ["claude", "opencode", "codex"])
def test_the_agent_tells_its_model_of_the_tasks_skills(docker_client, bench_env, tmp_path, agent):
    # given a task whose image holds a skill in its skills_dir (the instruction does not name it)
    shutil.copytree(REPO / "tests" / "tasksets" / "setup-keys", tmp_path / "tasks" / "setup-keys")
    assert (
        "word-of-the-day" not in (tmp_path / "tasks" / "setup-keys" / "instruction.md").read_text()
    )
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"text": "Done."}]))
    # when the real CLI runs it
    proc = run_bench(
        run_args(agent, "-m", f"mock/script:{script}"),
        env=bench_env,
        cwd=tmp_path,
        timeout=AGENT_RUN_TIMEOUT,
    )
    # then its request to the model lists the skill, copied from skills_dir to where it reads skills
    assert "takes no skills" not in proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["error"] is None, result
    assert any("word-of-the-day" in json.dumps(r) for r in requests(job, result))
