"""The error table as data: each failure category, how to recognise it, what happens, what to say.

`runs/errors.py` holds the functions that read it (classify, retries, causes, `bench explain`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Fault = Literal["task", "agent", "infrastructure", "setup"]
Kind = Literal["agent", "verifier", "trial"]

FAULT_WORDS: dict[str, str] = {
    "task": "task problem",
    "agent": "agent problem",
    "infrastructure": "infrastructure problem",
    "setup": "setup problem",
}


@dataclass(frozen=True)
class Marker:
    """Texts that must all appear (lower-cased) in a message; lower `step` is checked first."""

    step: int
    all_of: tuple[str, ...]


@dataclass(frozen=True)
class ErrorClass:
    """One category: how to recognise it, what happens to the trial, and what to tell the user."""

    name: str
    kind: Kind  # agent: classify(); verifier: classify_verifier(); trial: set by the reader
    retried: bool
    graded: bool  # does the verifier still grade the attempt
    fault: Fault
    markers: tuple[Marker, ...]
    cause: str  # the Outcomes cause label
    next: str  # the next step; {job}, {task} (its folder) and {name} are filled in where known
    explain: str  # the paragraph `bench explain CLASS` prints


def _m(step: int, *texts: str) -> tuple[Marker, ...]:
    return tuple(Marker(step, (t,)) for t in texts)


def _gated(step: int, gates: tuple[str, ...], texts: tuple[str, ...]) -> tuple[Marker, ...]:
    return tuple(Marker(step, (g, t)) for g in gates for t in texts)


_ACP = ("acp error", "was rejected as invalid")
_AUTH = (
    "permission_denied",
    "leaked",
    "failed to authenticate",
    "invalid bearer token",
    "invalid api key",
    "was rejected as invalid",
    "unauthorized",
    "provider auth failed",
    "http 401",
    "http 403",
)
_INFRA = (
    "connection lost",
    "connection reset",
    "connection refused",
    "broken pipe",
    "sandbox not found",
    "workspace not found",
    "api connection",
    "api timeout",
    "temporarily unavailable",
    "command timed out after",
    "no route to host",
)
_DEP_INSTALL = (
    "dependency install failed",
    "failed to download `",
    "failed to fetch:",
    "error sending request for url",
    "failed to lookup address information",
    "no solution found",
    "could not find a version",
    "resolution impossible",
)
_RESUME = "`bench eval resume {job}` reruns it"

ERROR_CLASSES: tuple[ErrorClass, ...] = (
    ErrorClass(
        "trial_budget",
        "agent",
        retried=False,
        graded=True,
        fault="setup",
        markers=_m(5, "trial budget reached", "trial_budget_spent"),
        cause="the trial spent its token or turn budget",
        next="trial_budget in each trial's result.json has what it used; raise --token-budget or "
        "--turn-budget if the task needs more",
        explain="The model proxy refused the trial's next model call (HTTP 400 trial_budget_spent)"
        " because the trial had used its --token-budget or --turn-budget; the agent was "
        "stopped and the verifier graded what it left. The trial counts 0 unless its tests"
        " passed, and it is never retried. result.json's trial_budget records the budget, "
        "where it came from, what was used (subagents included) and which measure stopped "
        "it; its subagents field says what the agent's subagents used (Claude Code, Codex, OpenCode), from the "
        "agent's own session log, which the trial keeps in agent/sessions.",
    ),
    ErrorClass(
        "usage_limit",
        "agent",
        retried=False,
        graded=False,
        fault="setup",
        markers=_m(6, "usage limit reached"),
        cause="usage limit on the agent's login",
        next="switch to another login or wait for the reset, then `bench eval resume {job}`; "
        "`bench doctor` shows each login's headroom",
        explain="A subscription login (Claude or Codex) hit its usage window. The trial is "
        "unscored and not retried. The agent's own message (result.json's error) says when"
        " the window resets; BenchFlow's usage_limit_info, when present, has the login, "
        "the window and the reset.",
    ),
    ErrorClass(
        "agent_integration",
        "agent",
        retried=False,
        graded=False,
        fault="setup",
        markers=_m(7, "agent integration failure"),
        cause="the agent integration broke",
        next="integration_failure_info in result.json says why",
        explain="The agent did nothing useful after the prompt (no tool call, no text, no output "
        "tokens), or could not be started as configured: a rejected login (agent_auth), a "
        "model it does not offer (agent_model), a broken install (agent_install), or a "
        "budgeted trial whose agent bypasses the model proxy (agent_budget). Its reward is"
        " withheld; not retried.",
    ),
    ErrorClass(
        "budget_cancelled",
        "agent",
        retried=False,
        graded=False,
        fault="setup",
        markers=_m(8, "cancelled by budget", "cancelled by the job budget", "budget_cancelled"),
        cause="the job budget cancelled it or kept it from starting",
        next="resume the job to run it with a cap that fits, or start a new job with --fresh",
        explain="The job's --max-cost-usd, --max-tokens, --max-sandbox-seconds or --max-rollouts "
        "cap was reached, so this trial was cancelled while running or never started. It "
        "is listed apart in summary.json (budget.cancelled, budget.not_started, not_run) "
        "and is not a failure. One cancelled while running leaves no result.json; its "
        "attempt's timing.json has cancelled_by and what its agent spent (agent_result).",
    ),
    ErrorClass(
        "attempt_disk",
        "agent",
        retried=False,
        graded=False,
        fault="agent",
        markers=_m(9, "attempt folder grew past"),
        cause="the attempt wrote more than --max-attempt-mb into its folder",
        next="look at the largest files of the attempt's agent/, verifier/ and artifacts/; raise "
        "--max-attempt-mb if the task needs that much (0 turns the cap off)",
        explain="The agent, or the tests, wrote into /logs (bind-mounted on the attempt folder) "
        "until the folder passed --max-attempt-mb (1024 MB by default): the attempt was "
        "stopped there, its sandbox removed, and it is not graded. Not retried: another "
        "attempt would most likely write as much. What was written stays in the folder, "
        "which passes the cap by what was written between two looks at its size.",
    ),
    ErrorClass(
        "idle_timeout",
        "agent",
        retried=True,
        graded=True,
        fault="agent",
        markers=_m(10, "agent idle for"),
        cause="the agent went silent and the idle watchdog stopped it",
        next="look at the agent's log (agent/*.txt) for what it was waiting on; raise "
        "--agent-idle-timeout for agents that think long between outputs (0 or none turns "
        "the watchdog off)",
        explain="The idle watchdog stopped the agent: it printed nothing (no tool call, message or "
        "thought) and made no model call for --agent-idle-timeout seconds (600 by default), "
        "or three times that while a tool call or model call of its was still running. "
        "idle_timeout_info in result.json says which limit applied. The verifier graded "
        "what it left, and the attempt is retried in a new sandbox (--retry-attempts). "
        "It watches claude, opencode and codex; oracle and script: agents have only the "
        "task's timeout.",
    ),
    ErrorClass(
        "install_failure",
        "agent",
        retried=True,
        graded=False,
        fault="infrastructure",
        markers=_m(20, "install failed"),
        cause="the agent's install failed",
        next="`bench doctor` checks npm and the agent layers; result.json's error has the last "
        "lines of npm's output or of the layer build",
        explain="Installing the agent CLI failed: npm on this machine (once per CLI version), or "
        "the build of the agent's layer over the task image, usually a network, registry "
        "or disk hiccup. Retried in a new sandbox.",
    ),
    ErrorClass(
        "pipe_closed",
        "agent",
        retried=True,
        graded=True,
        fault="infrastructure",
        markers=_m(30, "closed stdout", "pty closed by the peer", "pty readline timeout"),
        cause="the connection to the agent closed",
        next=_RESUME,
        explain="The agent process's stdout (or its PTY) closed mid-run: the process died or the "
        "transport dropped. Retried in a new sandbox; result.json's error and the agent's "
        "log (agent/<agent>.txt) say how it ended.",
    ),
    ErrorClass(
        "suspected_api_error",
        "agent",
        retried=False,
        graded=False,
        fault="setup",
        markers=_m(40, "suspected provider api error"),
        cause="the agent did nothing (no tokens, no tool calls)",
        next="check the model id and the login with `bench doctor`, then `bench eval resume {job}`",
        explain="The agent ended with zero tokens and zero tool calls and the proxy saw no "
        "successful call: most often a wrong model id or a dead credential. Not retried.",
    ),
    ErrorClass(
        "api_error",
        "agent",
        retried=True,
        graded=False,
        fault="infrastructure",
        markers=_m(41, "provider api error", "circuit breaker open"),
        cause="the model provider's API failed",
        next="`bench eval resume {job}` reruns it; result.json's error has the HTTP status and "
        "the provider's message",
        explain="Every model call the proxy forwarded failed. The message reads `provider api "
        "error [<kind>/<transient|permanent>] HTTP <status>`: transient ones (rate limits,"
        " 5xx) are retried, permanent ones (auth, quota, unknown model, rejected request) "
        "are not, and 5 identical permanent failures in a row open the circuit breaker, "
        "which skips the rest.",
    ),
    ErrorClass(
        "provider_auth",
        "agent",
        retried=False,
        graded=False,
        fault="setup",
        markers=_gated(50, _ACP, _AUTH),
        cause="the model provider refused the credential",
        next="`bench doctor` checks each login and key",
        explain="The provider answered 401/403 or called the key invalid. Not retried: another "
        "attempt would be refused the same way.",
    ),
    ErrorClass(
        "provider_rate_limit",
        "agent",
        retried=False,
        graded=False,
        fault="infrastructure",
        markers=_gated(
            51,
            ("acp error",),
            ("provider rate limited", "rate limit", "too many requests", "http 429"),
        ),
        cause="the model provider rate-limited the run",
        next="lower --concurrency, then `bench eval resume {job}`",
        explain="The provider refused calls for exceeding its rate limit and the agent gave up. "
        "Not retried within the job; lower -j and resume.",
    ),
    ErrorClass(
        "infra_failure",
        "agent",
        retried=True,
        graded=False,
        fault="infrastructure",
        markers=_gated(52, ("acp error",), ("provider unavailable", "http 503")) + _m(80, *_INFRA),
        cause="the sandbox or its transport failed",
        next=_RESUME,
        explain="A connection was lost, reset or refused, the sandbox vanished, or the provider "
        "was unavailable (HTTP 503). Retried in a new sandbox.",
    ),
    ErrorClass(
        "provider_rejected",
        "agent",
        retried=False,
        graded=False,
        fault="agent",
        markers=_gated(53, ("acp error",), ("http 400", "provider rejected request")),
        cause="the model provider rejected the request (often a context too long)",
        next="read the error in the trial's result.json; a model with a larger context, or a "
        "shorter prompt",
        explain="The provider answered 400 to a call the agent made, most often because the "
        "context grew past the model's window. Not retried.",
    ),
    ErrorClass(
        "agent_protocol",
        "agent",
        retried=True,
        graded=False,
        fault="agent",
        markers=_m(
            54,
            "agent protocol error",
            "acp protocol error",
            "protocol error",
            "invalid json-rpc",
            "malformed json-rpc",
            "json-rpc parse error",
        ),
        cause="the agent broke the ACP protocol",
        next="`bench eval resume {job}` reruns it; the agent's log (agent/<agent>.txt) has its "
        "side",
        explain="The agent sent a malformed or unexpected ACP (JSON-RPC) message, or the handshake"
        " failed. Usually a transient glitch in the agent process; retried in a new "
        "sandbox.",
    ),
    ErrorClass(
        "acp_error",
        "agent",
        retried=True,
        graded=False,
        fault="agent",
        markers=_m(55, "acp error"),
        cause="the agent reported an error",
        next="the agent's log (agent/<agent>.txt in the trial folder) has its side",
        explain="The agent answered the prompt with an ACP error that names no provider problem. "
        "Retried in a new sandbox.",
    ),
    ErrorClass(
        "image_build",
        "agent",
        retried=False,
        graded=False,
        fault="setup",
        markers=_m(
            60,
            "image build failed",
            "failed to build image",
            "docker build failed",
            "error building image",
            "build path",
            "dockerfile not found",
            "cannot locate specified dockerfile",
        ),
        cause="the task's Docker image did not build",
        next="the build's whole output is saved in {job}/builds/{name}.log; fix the task's "
        "Dockerfile, or build the missing base images (`bench doctor --fix`), then `bench eval "
        "resume {job}`",
        explain="The sandbox image for the task failed to build: a broken Dockerfile, a missing "
        "build path, or a base image this machine does not have (no registry is reachable "
        "here; scripts/setup.sh builds the bases). Not retried: it would fail the same "
        "way.",
    ),
    ErrorClass(
        "sandbox_config",
        "agent",
        retried=False,
        graded=False,
        fault="task",
        markers=_m(59, "sandbox config refused"),
        cause="Docker refused the sandbox's settings",
        next="`bench tasks check {task}`; result.json's error has Docker's message naming the "
        "setting",
        explain="Docker answered the sandbox's creation with HTTP 400: a setting of the task (its "
        "user, workdir, environment, a resource figure) that Docker will refuse every time. Not "
        "retried: another attempt would be refused the same way. CPUs and memory beyond this "
        "machine's are not such a case: the sandbox gets what there is, and result.json's "
        "sandbox_resources records both figures.",
    ),
    ErrorClass(
        "worker_setup",
        "agent",
        retried=True,
        graded=False,
        fault="setup",
        markers=(),
        cause="a worker could not run the attempt",
        next="the worker's log and result.json's error (a job folder, task or secret not on that "
        "machine)",
        explain="A `bench worker` could not run the attempt at all: the job folder or the task is "
        "not at the same path on its machine, the job's secret --agent-env value is not in its "
        "environment, or the agent would not install there. Retried, possibly on another worker.",
    ),
    ErrorClass(
        "sandbox_setup",
        "agent",
        retried=True,
        graded=False,
        fault="infrastructure",
        markers=_m(
            61,
            "sandbox startup",
            "sandbox creation",
            "failed to resolve source metadata",
            "pull access denied",
            "manifest unknown",
        ),
        cause="the sandbox did not start",
        next="`bench doctor`; result.json's error has Docker's message",
        explain="Creating or starting the sandbox failed (Docker daemon, registry metadata, "
        "resources). Retried in a new sandbox.",
    ),
    ErrorClass(
        "environment_setup",
        "agent",
        retried=True,
        graded=False,
        fault="task",
        markers=_m(58, "environment setup failed"),
        cause="the task's setup commands or healthcheck failed",
        next="result.json's error names the command and its exit; agent/setup.txt holds the "
        "setup commands' output; `bench tasks check {task}`",
        explain="Before the agent started, one of the task's setup commands (BenchFlow's "
        "setup_commands) failed or took longer than its timeout_sec, or its healthcheck "
        "(Harbor's [environment.healthcheck]) never passed: the environment the agent would "
        "have worked in was not ready, so nothing was graded. Retried in a new sandbox, as a "
        "service can be slow to start; a failure every time is the task's.",
    ),
    ErrorClass(
        "timeout",
        "agent",
        retried=False,
        graded=True,
        fault="agent",
        # only the agent's own time limit: "connection timed out" and the like are no reason to
        # raise a timeout
        markers=_m(70, "prompt exceeded wall-clock budget", "agent timed out after"),
        cause="the agent ran out of time",
        next="raise the task's agent timeout ([agent] timeout_sec in task.toml, agent.timeout_sec "
        "in task.md)",
        explain="The agent used its whole wall-clock timeout. The verifier still grades what it "
        "left (a missing reward counts 0); never retried.",
    ),
    ErrorClass(
        "other",
        "agent",
        retried=False,
        graded=False,
        fault="infrastructure",
        markers=(),
        cause="other error",
        next="the trial's result.json and the run's log have the details",
        explain="An error no marker recognises. Not retried; read result.json's error.",
    ),
    ErrorClass(
        "verifier_image_build",
        "verifier",
        retried=False,
        graded=False,
        fault="setup",
        markers=_m(95, "image build failed for the verifier"),
        cause="the separate verifier's image did not build",
        next="the build's whole output is saved in {job}/builds/{name}.verifier.log; fix the "
        "task's tests/Dockerfile, or build or load the images it names (`bench doctor --fix`), "
        "then `bench eval resume {job}`",
        explain="The task's verifier runs in a container of its own ([verifier] environment_mode"
        ' = "separate"), and its image (tests/Dockerfile, or [verifier.environment] '
        "docker_image) could not be built or found here. It is built before the agent starts, "
        "so no agent ran for a verdict nothing could give; the trial is a verifier error, not "
        "the agent's failure, and is not retried: it would fail the same way. The error names "
        "the Dockerfile and its line, or the image no registry here serves.",
    ),
    ErrorClass(
        "verifier_infra",
        "verifier",
        retried=True,
        graded=False,
        fault="infrastructure",
        markers=_m(
            100,
            "separate verifier",
            "failed to add tests directory",
            "failed to download verifier directory",
            "failed to download llm-judge input",
            "verifier setup failed",
        )
        + _gated(101, ("verifier crashed",), _INFRA),
        cause="the verifier's sandbox failed",
        next="`bench eval resume {job}` scores it again",
        explain="BenchFlow's own verifier machinery failed (copying tests in, the separate "
        "verifier's container, a dropped connection). Retried; resume scores it again.",
    ),
    ErrorClass(
        "verifier_timeout",
        "verifier",
        retried=True,
        graded=False,
        fault="task",
        markers=_m(110, "verifier timed out"),
        cause="the verifier timed out",
        next="raise the task's verifier timeout (task.md verifier.timeout_sec)",
        explain="The tests ran past the verifier timeout (600 s unless the task sets one). Retried"
        " once more like other verifier failures of our own; a slow test suite needs a "
        "larger timeout.",
    ),
    ErrorClass(
        "verifier_dep_install",
        "verifier",
        retried=False,
        graded=False,
        fault="task",
        markers=_m(120, *_DEP_INSTALL),
        cause="the verifier's dependency install failed",
        next="pin or bake the verifier's dependencies into the image; `bench tasks check {task}`",
        explain="test.sh installs packages at grading time and the install failed, so any reward "
        "it wrote is ignored. Bake the dependencies into the task image.",
    ),
    ErrorClass(
        "verifier_unreachable",
        "verifier",
        retried=False,
        graded=False,
        fault="setup",
        markers=_m(115, "verifier could not reach a host"),
        cause="the tests could not reach a host",
        next="the error quotes the line naming the host; bake what the tests fetch into the task "
        "image, or run where that host is reachable (only Debian's and Ubuntu's archives, PyPI and npm "
        "answer here)",
        explain="The tests printed that a host name did not resolve or no route led to it (curl's "
        "'Could not resolve host', pip's 'Temporary failure in name resolution', ...), and did "
        "not pass. Whatever reward they wrote is withheld: it says nothing about the agent's "
        "work. Not retried: the host is as unreachable on the next attempt. A task whose "
        "network_mode is no-network says so in the error.",
    ),
    ErrorClass(
        "verifier_bad_reward",
        "verifier",
        retried=False,
        graded=False,
        fault="task",
        markers=_m(
            130,
            "invalid reward",
            "reward out of range",
            "could not parse reward",
            "reward is not a number",
            "reward must be",
        ),
        cause="the verifier wrote a reward that is not a number in [0, 1]",
        next="`bench tasks check {task}`; the verifier must write one number in [0, 1]",
        explain="reward.txt or reward.json held something other than a finite number between 0 and"
        " 1.",
    ),
    ErrorClass(
        "verifier_no_reward",
        "verifier",
        retried=False,
        graded=False,
        fault="task",
        markers=_m(
            140,
            "no reward file",
            "reward file not found",
            "did not write a reward",
            "rewardfilenotfound",
        ),
        cause="the verifier wrote no reward",
        next="`bench tasks check {task}`; the verifier must write /logs/verifier/reward.txt or "
        "reward.json",
        explain="The tests ran but left no /logs/verifier/reward.txt or reward.json.",
    ),
    ErrorClass(
        "verifier_failure",
        "verifier",
        retried=False,
        graded=False,
        fault="task",
        markers=_m(150, "verifier crashed"),
        cause="the verifier crashed",
        next="`bench tasks check {task}`; the trial's verifier/test-stdout.txt has the output",
        explain="The task's test script crashed before it produced a verdict.",
    ),
    ErrorClass(
        "verifier_other",
        "verifier",
        retried=False,
        graded=False,
        fault="task",
        markers=(),
        cause="the verifier failed",
        next="the trial's verifier/ folder has the output",
        explain="A verifier error no marker recognises; the verifier/ folder has the output.",
    ),
    ErrorClass(
        "no_verdict",
        "trial",
        retried=False,
        graded=False,
        fault="infrastructure",
        markers=(),
        cause="no verdict was recorded (no reward and no error)",
        next=_RESUME,
        explain="result.json has neither a reward nor an error: the attempt stopped between the "
        "agent and the verifier. Resume runs it again.",
    ),
    ErrorClass(
        "corrupt_result",
        "trial",
        retried=True,
        graded=False,
        fault="infrastructure",
        markers=(),
        cause="result.json is corrupt or half-written (not a JSON object)",
        next=_RESUME,
        explain="The attempt folder has a result.json that is not a JSON object: it was cut off "
        "while written (a full disk, a copy that stopped) or edited by hand. The attempt counts as "
        "unscored; resume runs the trial again.",
    ),
    ErrorClass(
        "interrupted",
        "trial",
        retried=True,
        graded=False,
        fault="infrastructure",
        markers=(),
        cause="the attempt was interrupted before it wrote result.json",
        next=_RESUME,
        explain="The attempt folder has no result.json: the run was stopped (Ctrl-C, SIGTERM, a "
        "crash) while it ran. It still counts as a rollout started; resume runs the trial "
        "again.",
    ),
)
