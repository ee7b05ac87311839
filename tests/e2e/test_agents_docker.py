"""Claude Code, OpenCode and Codex run by `bench run` in real sandboxes, every model call through the proxy.

The agents are the real CLIs (installed with npm on first use); `mock/oracle` makes each one run the
task's solution with its own shell tool, offline. A tiny upstream on 127.0.0.1 stands in for a paid
provider where a test needs to see what the proxy sends upstream.
"""

from __future__ import annotations

import html
import itertools
import json
import re
import secrets
import shutil
import string
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from proxy.providers import override_var
from tests.conftest import (
    EXAMPLES,
    REPO,
    job_dirs,
    make_agent,
    only_result,
    results_of,
    run_args,
    run_bench,
    write_task,
)
from tests.e2e.browser import Viewer
from tests.proxy.fake_upstream import (
    CHAT_USAGE,
    MESSAGES_USAGE,
    chat_body,
    chat_frames,
    message_body,
    messages_frames,
    sse,
)

pytestmark = pytest.mark.docker

AGENT_RUN_TIMEOUT = 1800  # the first run of each agent installs it with npm
PROVIDER_VARS = (
    "XIAOMI_API_KEY",
    "XIAOMI_BASE_URL",
    "XIAOMI_ANTHROPIC_BASE_URL",
    "DEEPSEEK_API_KEY",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "OPENAI_API_KEY",
)
REWARD_1 = "echo 1 > /logs/verifier/reward.txt\n"


def owned_containers(client, job: Path) -> list:
    return client.containers.list(all=True, filters={"label": f"benchflow.job_dir={job.resolve()}"})


def trajectory(job: Path, result: dict[str, Any]) -> list[dict[str, Any]]:
    path = job / result["rollout_name"] / "trajectory" / "llm_trajectory.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def user_texts(request: dict[str, Any]) -> list[str]:
    """The texts of the user's messages in one model request (Chat Completions or Responses)."""
    texts = []
    for message in request.get("messages") or request.get("input") or []:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        parts = [{"text": content}] if isinstance(content, str) else content or []
        texts += [part["text"] for part in parts if isinstance(part.get("text"), str)]
    return texts


def trial_page(tmp_path: Path, env: dict[str, str], trial: str) -> str:
    """The trial page of the run's only job under tmp_path/jobs, as `bench view` serves it."""
    viewer = Viewer(tmp_path, env, ["jobs"])
    try:
        jobs = urllib.request.urlopen(viewer.base + "/", timeout=60).read().decode()
        found = re.search(r'href="/jobs/([^/"]+)/"', jobs)
        assert found, jobs
        url = f"{viewer.base}/jobs/{found.group(1)}/{trial}/"
        return urllib.request.urlopen(url, timeout=60).read().decode()
    finally:
        viewer.stop()


def attempt_folders(job: Path) -> list[Path]:
    return sorted(p for p in job.iterdir() if p.is_dir() and (p / "config.json").is_file())


def run_agent_bench(args: list[str], *, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """`run_bench` with AGENT_RUN_TIMEOUT, time for the first run of an agent to install it."""
    return run_bench(args, env=env, cwd=cwd, timeout=AGENT_RUN_TIMEOUT)


def write_replies(tmp_path: Path, replies: list[dict[str, Any]]) -> Path:
    """The replies of a `mock/script:PATH` model, in tmp_path/replies.json."""
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies))
    return script


@pytest.fixture
def clean_env(bench_env):
    """bench_env without any provider key or login the host may have: each test sets what it needs."""
    for name in PROVIDER_VARS:
        bench_env.pop(name, None)
    return bench_env


def assert_agent_ran_through_proxy(job: Path, result: dict[str, Any]) -> None:
    ar = result["agent_result"]
    assert ar["total_tokens"] > 0 and ar["n_input_tokens"] > 0 and ar["n_output_tokens"] > 0, ar
    assert ar["total_tokens"] == ar["n_input_tokens"] + ar["n_output_tokens"]
    assert ar["cost_usd"] > 0  # mock/oracle has a price
    assert ar["usage_source"] == "provider_response"
    assert ar["price_source"]
    assert result["n_tool_calls"] >= 1 and result["last_tool_call"], result
    calls = trajectory(job, result)
    assert len(calls) == ar["n_calls"] >= 2  # the tool call, and the final answer after its result
    assert all(c["status"] == 200 and not c["refused"] for c in calls)
    assert sum(c["usage"]["total_tokens"] for c in calls) == ar["total_tokens"]


# -- 1 and 2: each agent passes the examples, its model calls counted and priced --------------------


def test_claude_passes_two_examples_at_j2_with_usage_tools_and_trajectory(
    docker_client, clean_env, tmp_path
):
    # when
    proc = run_agent_bench(
        run_args(
            "claude",
            "-m",
            "mock/oracle",
            "-j",
            "2",
            tasks=EXAMPLES,
            include=["hello-world", "no-network"],
        ),
        env=clean_env,
        cwd=tmp_path,
    )
    # then
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[PASS] hello-world (reward=1.00, tools=1)" in proc.stdout
    assert "[PASS] no-network (reward=1.00, tools=1)" in proc.stdout
    [job] = job_dirs(tmp_path / "jobs")
    results = results_of(job)
    assert sorted(r["task_name"] for r in results) == ["hello-world", "no-network"]
    for result in results:
        assert result["rewards"] == {"reward": 1.0} and result["error"] is None, result
        assert result["model"] == "mock/oracle" and result["agent_exit_code"] == 0
        assert_agent_ran_through_proxy(job, result)
        assert (job / result["rollout_name"] / "agent" / "claude.txt").is_file()
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["total"], summary["passed"], summary["errored"]) == (2, 2, 0)
    assert owned_containers(docker_client, job) == []
    # without a budget too, Claude Code's own session log is kept, and the trial page's stream
    # reads it with the proxy's calls merged in: each call once, with the proxy's tokens
    hello = next(r for r in results if r["task_name"] == "hello-world")
    assert hello["trial_budget"] is None
    sessions = job / hello["rollout_name"] / "agent" / "sessions"
    [log] = [p for p in sessions.rglob("*.jsonl") if "subagents" not in p.parts]
    page = trial_page(tmp_path, clean_env, hello["trial_name"])
    assert f"from {log.relative_to(job / hello['rollout_name'])} and the proxy's calls" in page
    calls = trajectory(job, hello)
    assert page.count('class="ev k-call') == len(calls)
    for n, call in enumerate(calls):
        usage = call["usage"]
        meta = f"{call['model']} · {usage['input_tokens']:,} in · {usage['output_tokens']:,} out"
        assert page.count(html.escape(meta)) == 1 and f'id="c{n}"' in page, meta
    assert page.count('class="ev k-tool') == 1 and 'class="st ok"' in page  # the oracle's Bash call
    # the CLI came in an image layer over the task image (both tasks share one), not a mount
    images = {
        json.loads((job / r["rollout_name"] / "sandbox.json").read_text())["image"] for r in results
    }
    assert images and all(
        i.startswith("benchflow-env:") and i.endswith("-claude-2.1.197") for i in images
    )
    for image in images:
        assert docker_client.images.get(image).labels["benchflow.agent"] == "claude-2.1.197"
    ids = {i: docker_client.images.get(i).id for i in images}
    # when: a second run of the same tasks
    again = run_agent_bench(
        run_args("claude", "-m", "mock/oracle", "--fresh", tasks=EXAMPLES, include=["hello-world"]),
        env=clean_env,
        cwd=tmp_path,
    )
    # then: it reuses the layered image as it was
    assert again.returncode == 0, again.stdout + again.stderr
    [second] = [j for j in job_dirs(tmp_path / "jobs") if j != job]
    rerun = only_result(second)
    image = json.loads((second / rerun["rollout_name"] / "sandbox.json").read_text())["image"]
    assert image in ids and docker_client.images.get(image).id == ids[image]


@pytest.mark.parametrize("bullet", [False, True], ids=["plain", "bullet"])
@pytest.mark.parametrize("agent", ["opencode", "codex"])
def test_opencode_and_codex_pass_through_the_proxy(
    docker_client, clean_env, tmp_path, agent, bullet
):
    tasks = EXAMPLES
    # an instruction.md opening with a list item, which the CLI must not read as an option, with
    # spaces, double quotes and a newline, which must reach the model as written (OpenCode quoted
    # a message argument holding a space and escaped its quotes)
    if bullet:
        tasks = tmp_path / "tasks"
        shutil.copytree(EXAMPLES / "hello-world", tasks / "hello-world")
        instruction = tasks / "hello-world" / "instruction.md"
        written = f'- {instruction.read_text().strip()}\nThen say "done".'
        instruction.write_text(written + "\n")  # the runner strips the file's text, nothing more
    proc = run_agent_bench(
        run_args(agent, "-m", "mock/oracle", tasks=tasks, include=["hello-world"]),
        env=clean_env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[PASS] hello-world (reward=1.00, tools=1)" in proc.stdout
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["rewards"] == {"reward": 1.0} and result["error"] is None, result
    assert_agent_ran_through_proxy(job, result)
    assert (job / result["rollout_name"] / "agent" / f"{agent}.txt").is_file()
    if bullet:  # the instruction reached the model whole and unchanged
        assert written in user_texts(trajectory(job, result)[-1]["request"])
    assert owned_containers(docker_client, job) == []


def test_agent_mount_instead_of_a_layer_runs_the_task_image_as_it_is(
    docker_client, clean_env, tmp_path
):
    # given BENCHFLOW_AGENT_MOUNT=1, which trades the layer's disk space for a read-only mount
    clean_env["BENCHFLOW_AGENT_MOUNT"] = "1"
    # when
    proc = run_agent_bench(
        run_args("opencode", "-m", "mock/oracle", tasks=EXAMPLES, include=["hello-world"]),
        env=clean_env,
        cwd=tmp_path,
    )
    # then the trial passes in the plain task image
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["rewards"] == {"reward": 1.0}, result
    image = json.loads((job / result["rollout_name"] / "sandbox.json").read_text())["image"]
    assert image.startswith("benchflow-env:") and "opencode" not in image


# -- 3: per-trial budgets ----------------------------------------------------------------------------


def test_turn_budget_of_one_stops_claude_after_one_forwarded_call(
    docker_client, clean_env, tmp_path
):
    # given a task whose solution runs in the agent's one tool call
    write_task(
        tmp_path / "tasks",
        "hello",
        solve_sh="echo hello > /app/hello.txt\n",
        test_sh='[ "$(cat /app/hello.txt)" = hello ] && echo 1 > /logs/verifier/reward.txt '
        "|| echo 0 > /logs/verifier/reward.txt\n",
    )
    # when
    proc = run_agent_bench(
        run_args("claude", "-m", "mock/oracle", "--turn-budget", "1"), env=clean_env, cwd=tmp_path
    )
    # then: the one forwarded call was the solution's tool call, the next was refused
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    assert len(attempt_folders(job)) == 1  # a budget stop is never retried
    result = only_result(job)
    calls = trajectory(job, result)
    assert [(c["status"], c["refused"]) for c in calls] == [(200, False), (400, True)]
    assert calls[1]["error"] == "trial_budget_spent"
    agent_log = (job / result["rollout_name"] / "agent" / "claude.txt").read_text()
    # what the agent was told
    assert "400 trial_budget_spent: the turn budget of 1 is spent" in agent_log
    tokens = calls[0]["usage"]["total_tokens"]
    budget = dict(result["trial_budget"])
    # from the agent's own events: one call, its own, not a subagent's (its tokens as Claude Code
    # adds them up, which need not be the proxy's figure to the token)
    subagents = budget.pop("subagents")
    assert (subagents["turns"], subagents["tokens"], subagents["of_turns"]) == (0, 0, 1), subagents
    assert subagents["of_tokens"] > 0
    # and its session log is kept with the trial, as for any trial with a budget
    assert list((job / result["rollout_name"] / "agent" / "sessions").rglob("*.jsonl"))
    assert budget == {
        "budget": {"tokens": None, "turns": 1},
        "source": {"tokens": None, "turns": "run"},
        "used": {"tokens": tokens, "turns": 1},
        "stopped_by": "turns",
        "stopped_at": {"tokens": tokens, "turns": 1},
        "refused_calls": 1,
    }
    assert result["error_category"] == "trial_budget"
    # the solution ran before the stop, so the verifier's pass counts
    assert result["rewards"] == {"reward": 1.0}
    stop = f"[hello] trial budget reached: the turn budget of 1 is spent ({tokens:,} tokens, 1 turn"
    assert stop in proc.stdout, proc.stdout
    assert (
        "used when the model proxy refused the next call); the agent was stopped and the verifier "
        "graded what it left"
    ) in proc.stdout
    assert (
        "[PASS] hello (reward=1.00, tools=1) (trial budget reached: the turn budget of 1"
        in proc.stdout
    )
    summary = json.loads((job / "summary.json").read_text())
    assert summary["budget_stops"] == 1
    assert owned_containers(docker_client, job) == []


def test_turn_budget_spent_before_the_work_is_done_fails_the_trial(
    docker_client, clean_env, tmp_path
):
    # given a task that needs two tool calls, and a scripted mock model that makes them one per turn
    write_task(
        tmp_path / "tasks",
        "two-steps",
        test_sh="[ -f /app/a.txt ] && [ -f /app/b.txt ] && echo 1 > /logs/verifier/reward.txt "
        "|| echo 0 > /logs/verifier/reward.txt\n",
    )
    script = write_replies(
        tmp_path, [{"shell": "echo a > /app/a.txt"}, {"shell": "echo b > /app/b.txt"}]
    )
    # when
    proc = run_agent_bench(
        run_args("claude", "-m", f"mock/script:{script}", "--turn-budget", "1"),
        env=clean_env,
        cwd=tmp_path,
    )
    # then: only the first step ran; the trial is scored 0, not errored, not retried
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    assert len(attempt_folders(job)) == 1
    result = only_result(job)
    assert result["rewards"] == {"reward": 0.0}
    assert result["error_category"] == "trial_budget"
    assert (
        result["trial_budget"]["stopped_by"] == "turns"
        and result["trial_budget"]["refused_calls"] >= 1
    )
    assert "[two-steps] trial budget reached: the turn budget of 1 is spent" in proc.stdout
    assert (
        "[FAIL] two-steps (reward=0.00, tools=1) (trial budget reached: the turn budget of 1"
        in proc.stdout
    )
    summary = json.loads((job / "summary.json").read_text())
    assert summary["budget_stops"] == 1 and summary["failed"] == 1 and summary["errored"] == 0
    assert owned_containers(docker_client, job) == []


def test_task_turn_budget_applies_and_the_runs_replaces_it(docker_client, clean_env, tmp_path):
    # given a task that sets its own turn budget of 1
    write_task(
        tmp_path / "tasks",
        "budgeted",
        toml="[agent]\nturn_budget = 1\n",
        solve_sh="echo hello > /app/hello.txt\n",
        test_sh=REWARD_1,
    )
    # when run without --turn-budget: the task's budget holds
    proc = run_agent_bench(
        run_args("claude", "-m", "mock/oracle", jobs_dir="task-jobs"), env=clean_env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = only_result(job_dirs(tmp_path / "task-jobs")[0])
    budget = result["trial_budget"]
    assert budget["budget"] == {"tokens": None, "turns": 1}
    assert budget["source"] == {"tokens": None, "turns": "task"}
    assert budget["stopped_by"] == "turns"
    # when run with --turn-budget 5: the run's budget replaces the task's, and the agent finishes within it
    proc = run_agent_bench(
        run_args("claude", "-m", "mock/oracle", "--turn-budget", "5", jobs_dir="run-jobs"),
        env=clean_env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = only_result(job_dirs(tmp_path / "run-jobs")[0])
    budget = result["trial_budget"]
    assert budget["budget"] == {"tokens": None, "turns": 5}
    assert budget["source"] == {"tokens": None, "turns": "run"}
    assert (
        budget["stopped_by"] is None
        and budget["stopped_at"] is None
        and budget["refused_calls"] == 0
    )
    assert budget["used"]["turns"] == result["agent_result"]["n_calls"] == 2
    assert result["error"] is None and result["rewards"] == {"reward": 1.0}
    assert "trial budget reached" not in proc.stdout


def test_budgeted_task_refuses_an_agent_whose_calls_bypass_the_proxy(
    docker_client, clean_env, tmp_path
):
    # given a task with its own turn budget, and a script agent without -m (it may call a model of its own)
    write_task(
        tmp_path / "tasks",
        "budgeted",
        toml="[agent]\nturn_budget = 1\n",
        solve_sh="echo hello > /app/hello.txt\n",
        test_sh="[ -f /app/hello.txt ] && echo 1 > /logs/verifier/reward.txt "
        "|| echo 0 > /logs/verifier/reward.txt\n",
    )
    agent = make_agent(
        tmp_path,
        "own-model.sh",
        "#!/bin/bash\ntouch /logs/agent/started\necho hello > /app/hello.txt\n",
    )
    # when
    proc = run_bench(run_args(f"script:{agent}"), env=clean_env, cwd=tmp_path)
    # then the trial is refused before its agent starts, as an agent integration failure, not retried
    [job] = job_dirs(tmp_path / "jobs")
    assert len(attempt_folders(job)) == 1, proc.stdout + proc.stderr
    result = only_result(job)
    assert not (job / result["rollout_name"] / "agent" / "started").exists()
    assert result["error_category"] == "agent_integration", result
    assert result["error"].startswith("agent integration failure [agent_budget]")
    assert result["integration_failure_info"]["cause"] == "agent_budget"
    assert result["rewards"] is None  # not graded: it never ran
    assert "[ERR] budgeted (agent integration failure [agent_budget]" in proc.stdout
    assert proc.returncode == 1
    # no budget-stop line: the agent never ran
    assert "[budgeted] trial budget reached" not in proc.stdout
    # and an agent that calls no model runs the same task as usual
    proc = run_bench(run_args("oracle", jobs_dir="oracle-jobs"), env=clean_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[PASS] budgeted (reward=1.00, tools=0)" in proc.stdout


# -- 4: the upstream key stays on the host ---------------------------------------------------------


class FakeUpstream(ThreadingHTTPServer):
    """OpenAI Chat Completions and Anthropic Messages on 127.0.0.1, with fixed usage; records requests."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _UpstreamHandler)
        self.requests: list[dict[str, Any]] = []
        self.models = {KNOWN_MODEL}  # any other model gets a 404, as DeepSeek answers
        self.frame_pause = 0.0  # seconds between a stream's frames
        self.replies: list[
            Callable[[str], list[bytes]]
        ] = []  # the next streamed Messages answers, in order
        # each Messages answer has an id of its own, as the API's do
        self.message_ids = itertools.count(1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


KNOWN_MODEL = "deepseek-v4-flash"  # the fake upstream answers 404 for any other model


class _UpstreamHandler(BaseHTTPRequestHandler):
    """The proxy tests' answers (tests/proxy/fake_upstream.py), served from a thread."""

    server: FakeUpstream

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.server.requests.append(
            {
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
            }
        )
        model = body.get("model", "m")
        path = urlsplit(self.path).path
        if model not in self.server.models and "*" not in self.server.models:
            error = {
                "error": {"message": f"Model Not Exist: {model}", "type": "invalid_request_error"}
            }
            self._send(404, json.dumps(error).encode())
        elif path.endswith("/messages"):
            own_id = f'"msg_{next(self.server.message_ids)}"'.encode()
            if body.get("stream"):
                frames = (
                    self.server.replies.pop(0)(model)
                    if self.server.replies
                    else messages_frames(model)
                )
                self._send(
                    200, [f.replace(b'"msg_up"', own_id) for f in frames], "text/event-stream"
                )
            else:
                self._send(
                    200, json.dumps(message_body(model)).encode().replace(b'"msg_up"', own_id)
                )
        elif path.endswith("/chat/completions"):
            if body.get("stream"):
                self._send(200, chat_frames(model, True), "text/event-stream")
            else:
                self._send(200, json.dumps(chat_body(model)).encode())
        else:
            self.send_error(404)

    def _send(
        self, status: int, data: bytes | list[bytes], content_type: str = "application/json"
    ) -> None:
        frames = [data] if isinstance(data, bytes) else data
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(sum(len(f) for f in frames)))
        self.end_headers()
        for n, frame in enumerate(frames):
            if n:
                time.sleep(self.server.frame_pause)
            self.wfile.write(frame)
            self.wfile.flush()


def tool_call_frames(model: str, command: str) -> list[bytes]:
    """A streamed Messages answer of two content blocks, a text and a Bash tool call, with the usual
    usage (Claude Code logs such a message once per block)."""
    start = {
        **message_body(model),
        "content": [],
        "stop_reason": None,
        "usage": {**MESSAGES_USAGE, "output_tokens": 1},
    }
    call = json.dumps({"command": command, "description": "run it"})
    events = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Running it."},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_up", "name": "Bash", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": call},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": MESSAGES_USAGE["output_tokens"]},
        },
        {"type": "message_stop"},
    ]
    return [sse(e, e["type"]) for e in events]


@pytest.fixture
def fake_upstream() -> Iterator[FakeUpstream]:
    server = FakeUpstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


CALL_THE_PROXY = """#!/bin/bash
env > /logs/agent/env.txt
python3 -c '
import json, os, urllib.request
body = {"model": os.environ["BENCHFLOW_MODEL"], "messages": [{"role": "user", "content": "hi"}]}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
                             headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                                      "Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=60).read().decode())
'
"""


# Starts a streamed chat completion through the proxy, reads its first frame, and waits to be stopped.
START_A_STREAM = """#!/bin/bash
python3 -c '
import json, os, time, urllib.request
body = {"model": os.environ["BENCHFLOW_MODEL"], "stream": True, "messages": [{"role": "user", "content": "hi"}]}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
                             headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                                      "Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=60).readline().decode(), flush=True)
time.sleep(600)
'
"""


def random_text(n: int) -> str:
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(n))


def test_upstream_key_reaches_the_upstream_and_nothing_else(
    docker_client, clean_env, tmp_path, fake_upstream
):
    # given a provider key the host exports, and the provider pointed at a local upstream
    upstream_key = f"sk-bench-secret-{random_text(32)}"
    agent_token = f"tok-{random_text(24)}"
    clean_env["DEEPSEEK_API_KEY"] = upstream_key
    clean_env[override_var("deepseek")] = fake_upstream.url
    clean_env[override_var("deepseek", anthropic=True)] = fake_upstream.url
    write_task(
        tmp_path / "tasks",
        "py",
        dockerfile="FROM python:3.11-slim\nWORKDIR /app\n",
        test_sh=REWARD_1,
    )
    agent = make_agent(tmp_path, "agent.sh", CALL_THE_PROXY)
    # when an agent in the sandbox calls the model through the proxy
    proc = run_agent_bench(
        run_args(
            f"script:{agent}",
            "-m",
            "deepseek/deepseek-v4-flash",
            "--agent-env",
            "OPENAI_ORG=visible",
            "--agent-env",
            f"MY_TOKEN={agent_token}",
        ),
        env=clean_env,
        cwd=tmp_path,
    )
    # then the call was made, counted, and sent upstream with the host's key
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["rewards"] == {"reward": 1.0} and result["agent_exit_code"] == 0, result
    assert result["agent_result"]["total_tokens"] == CHAT_USAGE["total_tokens"]
    assert result["agent_result"]["n_calls"] == 1
    [upstream_call] = fake_upstream.requests
    assert upstream_call["path"] == "/chat/completions"
    assert upstream_call["headers"].get("authorization") == f"Bearer {upstream_key}"
    assert upstream_call["body"]["model"] == "deepseek-v4-flash"
    # and the key is nowhere else: not the job folder, not the sandbox, not the index, not the console
    env_dump = (job / result["rollout_name"] / "agent" / "env.txt").read_text()
    assert "OPENAI_ORG=visible" in env_dump  # the dump is real
    assert upstream_key not in env_dump and "DEEPSEEK_API_KEY" not in env_dump
    for path in (tmp_path / "jobs").rglob("*"):
        if path.is_file():
            assert upstream_key.encode() not in path.read_bytes(), path
    # the index's every row (SQLite under the state folder, or the run's PostgreSQL database)
    dump = subprocess.run(
        [sys.executable, "manage.py", "dumpdata", "runs"],
        env=clean_env,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert dump.returncode == 0, dump.stderr
    assert result["rollout_name"] in dump.stdout  # the dump holds this job
    assert upstream_key not in dump.stdout and agent_token not in dump.stdout
    # and on SQLite, not even in the file's free pages
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert upstream_key.encode() not in data and agent_token.encode() not in data, path
    assert upstream_key not in proc.stdout + proc.stderr
    assert agent_token not in proc.stdout + proc.stderr
    # and a secret-looking --agent-env value is not recorded, a plain one is
    config = (job / result["rollout_name"] / "config.json").read_text()
    evaluation = (job / "evaluation.json").read_text()
    for text in (config, evaluation):
        assert agent_token not in text
        assert "visible" in text
    assert json.loads(config)["agent_env"] == {"OPENAI_ORG": "visible"}
    assert "MY_TOKEN" in json.loads(evaluation)["agent_env_secret_keys"]
    assert owned_containers(docker_client, job) == []


def test_a_call_still_streaming_at_the_agent_timeout_is_counted(
    docker_client, clean_env, tmp_path, fake_upstream
):
    # given an agent whose one call streams for about 7 s, and a task that stops its agent after 3 s
    clean_env["DEEPSEEK_API_KEY"] = f"sk-bench-secret-{random_text(32)}"
    clean_env[override_var("deepseek")] = fake_upstream.url
    fake_upstream.frame_pause = 1.0
    write_task(
        tmp_path / "tasks",
        "slow",
        dockerfile="FROM python:3.11-slim\nWORKDIR /app\n",
        toml="[agent]\ntimeout_sec = 3\n",
        test_sh=REWARD_1,
    )
    agent = make_agent(tmp_path, "agent.sh", START_A_STREAM)
    # when
    proc = run_agent_bench(
        run_args(f"script:{agent}", "-m", "deepseek/deepseek-v4-flash"),
        env=clean_env,
        cwd=tmp_path,
    )
    # then the agent was stopped mid-call, and the call it left is counted in full
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["error_category"] == "timeout", result
    assert "chatcmpl-up" in (job / result["rollout_name"] / "agent" / "script.txt").read_text()
    assert result["agent_result"]["total_tokens"] == CHAT_USAGE["total_tokens"], result[
        "agent_result"
    ]
    assert result["agent_result"]["n_calls"] == 1 and "usage_incomplete_info" not in result
    [call] = trajectory(job, result)
    assert call["usage"]["total_tokens"] == CHAT_USAGE["total_tokens"]


def test_claude_login_calls_its_gateway_directly_with_usage_from_its_own_log(
    docker_client, clean_env, tmp_path, fake_upstream
):
    # given a Claude login (an OAuth token, no API key) whose gateway is on this machine's loopback
    token = f"oauth-token-{random_text(24)}"
    clean_env["CLAUDE_CODE_OAUTH_TOKEN"] = token
    clean_env["ANTHROPIC_BASE_URL"] = fake_upstream.url
    fake_upstream.models = {"*"}
    write_task(tmp_path / "tasks", "chat", test_sh=REWARD_1)
    # when a per-trial budget is asked for, the run is refused before a job exists
    refused = run_bench(
        run_args("claude", "-m", "sonnet", "--token-budget", "5000"), env=clean_env, cwd=tmp_path
    )
    assert refused.returncode == 2 and "Claude login" in refused.stdout + refused.stderr
    assert not (tmp_path / "jobs").exists() or job_dirs(tmp_path / "jobs") == []
    # when it runs without one, its first answer a tool call and its second the final text
    fake_upstream.replies = [lambda model: tool_call_frames(model, "echo hello > /app/hello.txt")]
    proc = run_agent_bench(run_args("claude", "-m", "sonnet"), env=clean_env, cwd=tmp_path)
    # then the real CLI called the gateway itself, with the login's token, not through the proxy
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["agent_exit_code"] == 0 and result["error"] is None, result
    assert result["model"] == "sonnet"
    calls = [c for c in fake_upstream.requests if urlsplit(c["path"]).path == "/v1/messages"]
    assert calls and all(c["headers"].get("authorization") == f"Bearer {token}" for c in calls)
    # -m sonnet, as Claude names it
    assert all(c["body"]["model"].startswith("claude-sonnet") for c in calls)
    assert not (job / result["rollout_name"] / "trajectory" / "llm_trajectory.jsonl").exists()
    # and usage comes from the agent's own log: what the gateway reported for every call, dollars unknown
    ar = result["agent_result"]
    assert ar["usage_source"] == "agent_session_log" and ar["cost_usd"] is None
    assert len(calls) == 2 and result["n_tool_calls"] == 1
    assert_login_usage(ar, len(calls))
    # and the token is in no file of the job
    for path in (tmp_path / "jobs").rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path


def assert_login_usage(ar: dict[str, Any], n: int) -> None:
    """agent_result is what the fake gateway reported for n Messages calls (input includes the cache's)."""
    cache_read, cache_write = (
        MESSAGES_USAGE["cache_read_input_tokens"],
        MESSAGES_USAGE["cache_creation_input_tokens"],
    )
    assert (
        ar["n_calls"],
        ar["n_input_tokens"],
        ar["n_output_tokens"],
        ar["n_cache_read_tokens"],
        ar["n_cache_creation_tokens"],
        ar["total_tokens"],
    ) == (
        n,
        n * (MESSAGES_USAGE["input_tokens"] + cache_read + cache_write),
        n * MESSAGES_USAGE["output_tokens"],
        n * cache_read,
        n * cache_write,
        n * sum(MESSAGES_USAGE.values()),
    ), ar


def test_claude_login_stopped_at_its_timeout_keeps_the_usage_of_the_calls_it_made(
    docker_client, clean_env, tmp_path, fake_upstream
):
    # given a Claude login whose gateway answers its first call with a tool call that never ends
    clean_env["CLAUDE_CODE_OAUTH_TOKEN"] = f"oauth-token-{random_text(24)}"
    clean_env["ANTHROPIC_BASE_URL"] = fake_upstream.url
    fake_upstream.models = {"*"}
    fake_upstream.replies = [lambda model: tool_call_frames(model, "sleep 600")]
    write_task(tmp_path / "tasks", "stuck", toml="[agent]\ntimeout_sec = 15\n", test_sh=REWARD_1)
    # when the task's timeout stops the agent in its tool call
    proc = run_agent_bench(run_args("claude", "-m", "sonnet"), env=clean_env, cwd=tmp_path)
    # then the agent never printed its final result line
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["error_category"] == "timeout", result
    agent_log = (job / result["rollout_name"] / "agent" / "claude.txt").read_text()
    assert "sleep 600" in agent_log and '"type":"result"' not in agent_log
    # and its usage is still there, from its session log
    calls = [c for c in fake_upstream.requests if urlsplit(c["path"]).path == "/v1/messages"]
    assert len(calls) == 1
    assert result["agent_result"]["usage_source"] == "agent_session_log"
    assert_login_usage(result["agent_result"], 1)
    assert owned_containers(docker_client, job) == []


def test_claude_on_a_paid_provider_sends_the_host_key_upstream_only(
    docker_client, clean_env, tmp_path, fake_upstream
):
    # given Claude Code on DeepSeek's Anthropic endpoint, pointed at a local upstream
    upstream_key = f"sk-bench-secret-{random_text(32)}"
    clean_env["DEEPSEEK_API_KEY"] = upstream_key
    clean_env[override_var("deepseek")] = fake_upstream.url
    clean_env[override_var("deepseek", anthropic=True)] = fake_upstream.url
    write_task(tmp_path / "tasks", "chat", test_sh=REWARD_1)
    # when
    proc = run_agent_bench(
        run_args("claude", "-m", "deepseek/deepseek-v4-flash"), env=clean_env, cwd=tmp_path
    )
    # then Claude Code's streamed calls went upstream with the host's key, and were counted
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["agent_exit_code"] == 0 and result["error"] is None, result
    assert fake_upstream.requests, "no call reached the upstream"
    for call in fake_upstream.requests:
        assert urlsplit(call["path"]).path == "/v1/messages" and call["body"]["stream"] is True
        assert call["headers"].get("authorization") == f"Bearer {upstream_key}"
        assert call["body"]["model"] == "deepseek-v4-flash"
    n = len(fake_upstream.requests)
    assert result["agent_result"]["n_calls"] == n
    per_call = sum(MESSAGES_USAGE.values())  # input, cache read, cache write and output
    assert result["agent_result"]["total_tokens"] == per_call * n
    assert result["agent_result"]["usage_source"] == "provider_response"
    # and the key is in no file of the job, the index, or the console
    for path in [*(tmp_path / "jobs").rglob("*"), *(tmp_path / "state").rglob("*")]:
        if path.is_file():
            assert upstream_key.encode() not in path.read_bytes(), path
    assert upstream_key not in proc.stdout + proc.stderr
    assert owned_containers(docker_client, job) == []


def test_a_model_the_provider_rejects_is_an_error_not_a_silent_fail(
    docker_client, clean_env, tmp_path, fake_upstream
):
    # given a model id the provider does not know (it answers 404)
    clean_env["DEEPSEEK_API_KEY"] = f"sk-bench-secret-{random_text(32)}"
    clean_env[override_var("deepseek", anthropic=True)] = fake_upstream.url
    write_task(
        tmp_path / "tasks",
        "hello",
        solve_sh="echo hello > /app/hello.txt\n",
        test_sh="[ -f /app/hello.txt ] && echo 1 > /logs/verifier/reward.txt "
        "|| echo 0 > /logs/verifier/reward.txt\n",
    )
    # when
    proc = run_agent_bench(
        run_args("claude", "-m", "deepseek/deepseek-v9-typo"), env=clean_env, cwd=tmp_path
    )
    # then the trial says why it did nothing, and is not retried: the same call would be rejected again
    [job] = job_dirs(tmp_path / "jobs")
    assert len(attempt_folders(job)) == 1, proc.stdout + proc.stderr
    result = only_result(job)
    assert fake_upstream.requests and all(
        c["body"]["model"] == "deepseek-v9-typo" for c in fake_upstream.requests
    )
    assert result["rewards"] == {"reward": 0.0}
    assert result["error_category"] == "api_error", result
    assert result["error"].startswith("provider api error [rejected/permanent] HTTP 404"), result[
        "error"
    ]
    assert "Model Not Exist" in result["error"]
    assert (
        "[FAIL] hello (reward=0.00, tools=0) (provider api error [rejected/permanent] HTTP 404"
        in proc.stdout
    )


# -- 5: refusals before a job exists ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("_case", "args", "env", "says"),
    [
        (
            "claude_xiaomi_without_key",
            ["-a", "claude", "-m", "xiaomi/mimo-v2.6-flash"],
            {},
            ["export XIAOMI_API_KEY"],
        ),
        (
            "unpriced_cost_cap",
            ["-a", "opencode", "-m", "xiaomi/mimo-v2.6-flash", "--max-cost-usd", "1"],
            {"XIAOMI_API_KEY": "test-key", "XIAOMI_BASE_URL": "http://127.0.0.1:9/v1"},
            ["--max-cost-usd", "no price", "--max-tokens"],
        ),
        (
            "codex_on_a_chat_only_provider",
            ["-a", "codex", "-m", "xiaomi/mimo-v2.6-flash"],
            {"XIAOMI_API_KEY": "test-key", "XIAOMI_BASE_URL": "http://127.0.0.1:9/v1"},
            ["OpenAI Responses", "fix:"],
        ),
        (
            "turn_budget_script_without_model",
            ["-a", "script:x.sh", "--turn-budget", "3"],
            {},
            ["--turn-budget", "script agent without -m", "fix:"],
        ),
        ("claude_without_model", ["-a", "claude"], {}, ["-a claude needs a model", "pass -m"]),
        (
            "base_url_for_a_model_agent",
            [
                "-a",
                "codex",
                "-m",
                "mock/oracle",
                "--agent-env",
                "OPENAI_BASE_URL=http://127.0.0.1:9/v1",
            ],
            {},
            [
                "--agent-env OPENAI_BASE_URL",
                "only through the model proxy",
                "-m openai-compatible/MODEL",
            ],
        ),
    ],
)
def test_run_is_refused_before_a_job_exists(clean_env, tmp_path, _case, args, env, says):
    make_agent(tmp_path, "x.sh", "#!/bin/bash\ntrue\n")
    clean_env.update(env)
    proc = run_bench(
        ["run", str(EXAMPLES), "-i", "hello-world", *args, "--jobs-dir", "jobs"],
        env=clean_env,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    for text in says:
        assert text in proc.stderr, proc.stderr
    assert not (tmp_path / "jobs").exists()


def test_idle_watchdog_gives_a_running_tool_3x_and_stops_a_silent_one(
    docker_client, clean_env, tmp_path
):
    # given Claude Code and a scripted model whose tool calls run 4 s, then 60 s, with a 2 s idle limit
    write_task(
        tmp_path / "tasks",
        "slow-tool",
        test_sh="[ -f /app/a.txt ] && echo 1 > /logs/verifier/reward.txt "
        "|| echo 0 > /logs/verifier/reward.txt\n",
    )
    script = write_replies(
        tmp_path,
        [{"shell": "sleep 4; echo a > /app/a.txt"}, {"shell": "sleep 60"}, {"text": "done"}],
    )
    # when
    t0 = time.monotonic()
    proc = run_agent_bench(
        run_args(
            "claude",
            "-m",
            f"mock/script:{script}",
            "--agent-idle-timeout",
            "2",
            "--retry-attempts",
            "0",
        ),
        env=clean_env,
        cwd=tmp_path,
    )
    # then the 4 s tool outlived 2 s of silence (a running tool has 6 s), the 60 s one was stopped at
    # about 6 s, and the trial was graded on what it left
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["error_category"] == "idle_timeout", result
    assert re.fullmatch(
        r"Agent idle for 6s with no new tool call, message, or thought "
        r"\(last activity [67]s ago, 2 tool calls so far\)",
        result["error"],
    ), result["error"]
    assert (
        result["idle_timeout_info"]["pending"] is True
        and result["idle_timeout_info"]["idle_timeout_sec"] == 2
    )
    assert result["rewards"] == {"reward": 1.0}
    assert result["agent_result"]["n_calls"] == 2
    config = json.loads((job / result["rollout_name"] / "config.json").read_text())
    assert config["agent_idle_timeout_sec"] == 2
    assert time.monotonic() - t0 < 60
    summary = json.loads((job / "summary.json").read_text())
    assert summary["idle_timeout"] == 1
    assert "idle_timeouts=1" in proc.stdout
    assert owned_containers(docker_client, job) == []


def test_opencode_grep_and_glob_work_in_a_sandbox_without_network(
    docker_client, clean_env, tmp_path
):
    # given a no-network task with a file to find, and a scripted model calling OpenCode's grep and glob
    # tools (which run rg; OpenCode would download one from GitHub, which no sandbox reaches)
    write_task(
        tmp_path / "tasks",
        "find",
        toml='[environment]\nnetwork_mode = "no-network"\n',
        dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\nRUN mkdir -p /app/docs && "
        "echo 'the needle-42 is here' > /app/docs/notes.txt\n",
        test_sh=REWARD_1,
    )
    script = write_replies(
        tmp_path,
        [
            {"tool": "grep", "args": {"pattern": "needle-42", "path": "/app"}},
            {"tool": "glob", "args": {"pattern": "**/*.txt", "path": "/app"}},
        ],
    )
    # when
    proc = run_agent_bench(
        run_args("opencode", "-m", f"mock/script:{script}"), env=clean_env, cwd=tmp_path
    )
    # then both tools found the file, and none failed for want of ripgrep
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["error"] is None and result["n_tool_calls"] == 2, result
    messages = trajectory(job, result)[-1]["request"]["messages"]
    grep_out, glob_out = [str(m["content"]) for m in messages if m.get("role") == "tool"]
    assert "/app/docs/notes.txt" in grep_out and "needle-42 is here" in grep_out, grep_out
    assert "/app/docs/notes.txt" in glob_out, glob_out
    assert "ripgrep" not in grep_out + glob_out
    assert owned_containers(docker_client, job) == []


def run_budgeted_script(
    tmp_path: Path, env: dict[str, str], agent: str, replies: list[dict[str, Any]]
) -> tuple[Path, dict[str, Any]]:
    """One trial of a task that passes, the agent driven by a mock/script of `replies`, with a token
    budget too large to stop it; returns its job and result, which must have no error."""
    write_task(tmp_path / "tasks", "t", test_sh=REWARD_1)
    script = write_replies(tmp_path, replies)
    proc = run_agent_bench(
        run_args(agent, "-m", f"mock/script:{script}", "--token-budget", "1000000"),
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [job] = job_dirs(tmp_path / "jobs")
    result = only_result(job)
    assert result["error"] is None, result
    return job, result


def test_codex_sub_agent_use_comes_from_its_session_logs_which_a_budgeted_trial_keeps(
    docker_client, clean_env, tmp_path
):
    # given a scripted model that has Codex spawn a sub-agent and wait for it (tools of its
    # multi_agent_v1 namespace), when it runs in a trial with a token budget too large to stop it
    job, result = run_budgeted_script(
        tmp_path,
        clean_env,
        "codex",
        [
            {"tool": "multi_agent_v1.spawn_agent", "args": {"message": "Say hello."}},
            {
                "tool": "multi_agent_v1.wait_agent",
                "args": {"targets": ["$LAST_OUTPUT.agent_id"], "timeout_ms": 60000},
            },
            {"text": "hello"},
        ],
    )
    # then the calls were the main thread's spawn, the sub-agent's answer, the main thread's wait and
    # its answer; the proxy counted them, and Codex's own logs say which was the sub-agent's
    calls = trajectory(job, result)
    assert len(calls) == 4, [c["usage"] for c in calls]
    sub_calls = [c for c in calls if "multi_agent_v1" not in json.dumps(c["request"].get("tools"))]
    assert len(sub_calls) == 1, [c["request"].get("tools") for c in calls]
    tb = result["trial_budget"]
    assert tb["subagents"] == {
        "turns": 1,
        "tokens": sub_calls[0]["usage"]["total_tokens"],
        "of_turns": 4,
        "of_tokens": tb["used"]["tokens"],
    }, tb
    # the log is kept in the trial's folder: one rollout file per thread
    rollouts = list((job / result["rollout_name"] / "agent" / "sessions").rglob("rollout-*.jsonl"))
    assert len(rollouts) >= 2, rollouts
    assert owned_containers(docker_client, job) == []


def test_claude_subagent_use_comes_from_its_session_log_call_for_call(
    docker_client, clean_env, tmp_path
):
    # given a scripted model that has Claude Code run a subagent (its Agent tool waits for it), when it
    # runs in a trial with a token budget too large to stop it
    job, result = run_budgeted_script(
        tmp_path,
        clean_env,
        "claude",
        [
            {
                "tool": "Agent",
                "args": {
                    "description": "say hello",
                    "prompt": "Say hello.",
                    "subagent_type": "general-purpose",
                },
            },
            {"text": "hello"},
        ],
    )
    # then the calls were the main agent's, its subagent's, then the main agent's answer
    calls = trajectory(job, result)
    assert len(calls) == 3, [c["usage"] for c in calls]
    # and Claude Code's log, kept with the trial, says which was the subagent's, to the token
    tb = result["trial_budget"]
    assert tb["subagents"] == {
        "turns": 1,
        "tokens": calls[1]["usage"]["total_tokens"],
        "of_turns": 3,
        "of_tokens": tb["used"]["tokens"],
    }, tb
    sessions = job / result["rollout_name"] / "agent" / "sessions"
    assert list(sessions.rglob("subagents/*.jsonl")), list(sessions.rglob("*"))


def test_opencode_subagent_use_comes_from_its_session_store_call_for_call(
    docker_client, clean_env, tmp_path
):
    # given a scripted model that has OpenCode run a subagent (its task tool waits for it), when it
    # runs in a trial with a token budget too large to stop it
    job, result = run_budgeted_script(
        tmp_path,
        clean_env,
        "opencode",
        [
            {
                "tool": "task",
                "args": {
                    "description": "say hello",
                    "prompt": "Say hello.",
                    "subagent_type": "general",
                },
            },
            {"text": "hello"},
        ],
    )
    # then the agent's calls were the main session's, its subagent's, then the main session's answer
    # (beside them, OpenCode's session-title call, which no session holds)
    calls = [c for c in trajectory(job, result) if c["request"].get("tools")]
    assert len(calls) == 3, [c["usage"] for c in calls]
    # and OpenCode's store, kept with the trial as one line per message, says which was the subagent's
    tb = result["trial_budget"]
    assert tb["subagents"] == {
        "turns": 1,
        "tokens": calls[1]["usage"]["total_tokens"],
        "of_turns": 3,
        "of_tokens": sum(c["usage"]["total_tokens"] for c in calls),
    }, tb
    kept = job / result["rollout_name"] / "agent" / "sessions" / "opencode-messages.jsonl"
    assert any(json.loads(line)["parent"] for line in kept.read_text().splitlines())
    # and the trial page's stream reads that store with the proxy's calls merged in: every call
    # once, with the proxy's tokens (the subagent's nested under the task call that started it)
    page = trial_page(tmp_path, clean_env, result["trial_name"])
    assert "from agent/sessions/opencode-messages.jsonl and the proxy's calls" in page
    all_calls = trajectory(job, result)
    metas = [
        f"{c['model']} · {c['usage']['input_tokens']:,} in · {c['usage']['output_tokens']:,} out"
        for c in all_calls
    ]
    for meta in metas:
        assert page.count(html.escape(meta)) == metas.count(meta), meta
    assert 'class="ev k-tool t-task' in page and "subagent events</span>" in page
