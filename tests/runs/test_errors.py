"""The error table: classification, retry and grading rules, causes, `bench explain`, breaker."""

from __future__ import annotations

import pytest

from runs import errors
from runs.errors import CircuitBreaker

AGENT_MESSAGES = [
    (
        "Agent idle for 600s with no new tool call, message, or thought (last activity 612s ago, 15 tool calls so far)",
        "idle_timeout",
    ),
    ("Agent install failed (exit 1): npm ERR! network", "install_failure"),
    ("agent process closed stdout unexpectedly", "pipe_closed"),
    ("PTY closed by the peer", "pipe_closed"),
    ("PTY readline timeout after 30s", "pipe_closed"),
    ("suspected provider api error: 0 tokens and 0 tool calls", "suspected_api_error"),
    ("provider api error [rate_limit/transient] HTTP 429: slow down", "api_error"),
    ("provider api error [auth/permanent] HTTP 401: invalid key", "api_error"),
    ("skipped: api-error circuit breaker open ([auth:401] x5 consecutive)", "api_error"),
    ("ACP error -32603: Invalid API key (HTTP 401)", "provider_auth"),
    ("Your key was rejected as invalid", "provider_auth"),
    ("ACP error: provider rate limited (HTTP 429)", "provider_rate_limit"),
    ("ACP error: Too Many Requests", "provider_rate_limit"),
    ("ACP error: provider unavailable (HTTP 503)", "infra_failure"),
    ("ACP error: provider rejected request (HTTP 400): context too long", "provider_rejected"),
    ("ACP error -32600: protocol error", "agent_protocol"),
    ("agent protocol error: malformed JSON-RPC message", "agent_protocol"),
    ("ACP error -32000: tool crashed", "acp_error"),
    ("Sandbox startup failed: image build failed: step 3/7", "image_build"),
    ("docker build failed: build path tasks/x/environment does not exist", "image_build"),
    ("Sandbox startup failed: no space left on device", "sandbox_setup"),
    ("sandbox creation timed out", "sandbox_setup"),
    ("prompt exceeded wall-clock budget of 900s", "timeout"),
    ("Agent timed out after 900s", "timeout"),
    ("command timed out after 30s", "infra_failure"),
    ("Connection reset by peer", "infra_failure"),
    ("usage limit reached on login me@example.com (5-hour window)", "usage_limit"),
    ("agent integration failure [agent_auth]: login expired", "agent_integration"),
    (
        "trial budget reached: the token budget of 60,000 is spent (63,260 tokens, 6 turns used)",
        "trial_budget",
    ),
    ("ACP error: HTTP 400 trial_budget_spent: tokens", "trial_budget"),
    ("cancelled by budget: budget reached: 200 tokens spent of a 150 cap", "budget_cancelled"),
    ("something nobody expected", "other"),
    ("", "other"),
]


@pytest.mark.parametrize(("message", "category"), AGENT_MESSAGES)
def test_classify_matches_benchflow_markers_in_their_order(message, category):
    assert errors.classify(message) == category


@pytest.mark.parametrize(
    ("message", "category"),
    [
        ("separate verifier sandbox failed to start", "verifier_infra"),
        ("verifier crashed: failed to add tests directory", "verifier_infra"),
        ("verifier crashed: connection reset", "verifier_infra"),
        ("verifier timed out after 600s", "verifier_timeout"),
        (
            "verifier crashed: dependency install failed (see verifier/test-stdout.txt)",
            "verifier_dep_install",
        ),
        (
            "verifier crashed: rc=1; no reward file\ndependency install failed",
            "verifier_dep_install",
        ),
        ("invalid reward 'abc' in reward.txt", "verifier_bad_reward"),
        ("reward out of range: 1.5", "verifier_bad_reward"),
        ("verifier crashed: rc=1; no reward file", "verifier_no_reward"),
        ("verifier crashed: exit 2", "verifier_failure"),
        ("the verifier said no", "verifier_other"),
    ],
)
def test_classify_verifier_matches_markers(message, category):
    assert errors.classify_verifier(message) == category


def test_every_class_has_fault_cause_next_and_explanation():
    for cls in errors.ERROR_CLASSES:
        assert cls.fault in errors.FAULT_WORDS, cls.name
        assert cls.cause and cls.next and len(cls.explain) > 40, cls.name


def test_class_names_are_unique_and_cover_the_brief():
    names = [c.name for c in errors.ERROR_CLASSES]
    assert len(names) == len(set(names))
    for needed in (
        "idle_timeout",
        "install_failure",
        "pipe_closed",
        "suspected_api_error",
        "api_error",
        "provider_auth",
        "provider_rate_limit",
        "infra_failure",
        "provider_rejected",
        "acp_error",
        "sandbox_setup",
        "timeout",
        "usage_limit",
        "agent_integration",
        "trial_budget",
        "budget_cancelled",
        "image_build",
        "agent_protocol",
        "other",
        "verifier_infra",
        "verifier_timeout",
        "verifier_dep_install",
        "verifier_failure",
        "verifier_no_reward",
        "verifier_bad_reward",
        "verifier_other",
    ):
        assert needed in names


@pytest.mark.parametrize(
    ("name", "retried"),
    [
        # retried: dropped connections, failed installs, idle timeouts, agent protocol errors,
        # our own verifier failures
        ("pipe_closed", True),
        ("infra_failure", True),
        ("install_failure", True),
        ("idle_timeout", True),
        ("agent_protocol", True),
        ("sandbox_setup", True),
        ("verifier_infra", True),
        ("verifier_timeout", True),
        # not retried: wall clock, rejected login, rate limit, usage limit, budget stops
        ("timeout", False),
        ("provider_auth", False),
        ("provider_rate_limit", False),
        ("usage_limit", False),
        ("trial_budget", False),
        ("budget_cancelled", False),
        ("image_build", False),
        ("provider_rejected", False),
        ("suspected_api_error", False),
        ("agent_integration", False),
        ("verifier_failure", False),
        ("other", False),
    ],
)
def test_retried_classes_follow_the_seed_page(name, retried):
    assert errors.is_retried(name) is retried


def test_timeout_and_trial_budget_are_still_graded():
    assert errors.lookup("timeout").graded and errors.lookup("trial_budget").graded
    assert not errors.lookup("provider_auth").graded


@pytest.mark.parametrize(
    ("message", "transient"),
    [
        ("provider api error [rate_limit/transient] HTTP 429", True),
        ("provider api error [server/transient] HTTP 502", True),
        ("provider api error [auth/permanent] HTTP 401", False),
        (None, False),
    ],
)
def test_api_errors_are_retried_only_when_transient(message, transient):
    assert errors.api_error_is_transient(message) is transient
    assert errors.is_retried("api_error", message) is transient


def _result(reward=None, error=None, verifier_error=None, **extra):
    return {
        "rewards": None if reward is None else {"reward": reward},
        "error": error,
        "verifier_error": verifier_error,
        **extra,
    }


@pytest.mark.parametrize(
    ("result", "retry"),
    [
        (_result(error="Agent install failed"), True),
        (_result(error="Connection reset by peer"), True),
        (_result(error="provider api error [server/transient] HTTP 503"), True),
        (_result(error="provider api error [auth/permanent] HTTP 401"), False),
        (_result(error="Agent timed out after 900s"), False),
        (_result(reward=0.0, error="Agent timed out after 900s"), False),
        (_result(reward=0.0), False),  # a wrong answer
        (_result(reward=0.0, error="trial budget reached: the token budget of 60,000"), False),
        # a retryable error beats a fallback reward only for idle, pipe and infra failures
        (_result(reward=0.0, error="Agent idle for 600s"), True),
        (_result(reward=0.0, error="agent closed stdout"), True),
        (_result(reward=0.0, error="Connection lost"), True),
        (_result(reward=1.0, error="Agent idle for 600s"), False),  # a pass is kept
        (_result(reward=0.0, error="ACP error -32000: boom"), False),
        (_result(verifier_error="verifier timed out after 600s"), True),
        (_result(verifier_error="separate verifier sandbox died"), True),
        (_result(verifier_error="verifier crashed: exit 2"), False),
        (_result(), False),
        (_result(error="x", error_category="install_failure"), True),  # stored category wins
    ],
)
def test_should_retry_follows_the_retry_policy(result, retry):
    assert errors.should_retry(result) is retry


@pytest.mark.parametrize(
    ("attempt", "seconds"), [(0, 1), (1, 2), (3, 8), (4, 16), (5, 30), (9, 30)]
)
def test_backoff_doubles_up_to_thirty_seconds(attempt, seconds):
    assert errors.backoff_seconds(attempt) == seconds


def test_lookup_normalises_names_and_suggest_offers_close_ones():
    assert errors.lookup("Trial-Budget").name == "trial_budget"
    assert errors.lookup("nope") is None
    assert errors.suggest("trial_budgt")[0] == "trial_budget"
    assert errors.suggest("zzzzzz") == []


def test_explain_text_says_whose_problem_retry_grading_cause_and_next():
    text = errors.explain_text("trial_budget")
    assert text.startswith("trial_budget: the trial spent its token or turn budget")
    assert "Whose problem: setup problem" in text
    assert "Retried:       no" in text
    assert "Graded:        yes" in text
    assert "raise --token-budget or --turn-budget" in text
    assert "HTTP 400 trial_budget_spent" in text


def test_explain_text_for_api_error_says_transient_only():
    assert "only when transient" in errors.explain_text("api_error")


def test_explain_of_an_integration_cause_explains_its_class():
    text = errors.explain_text("agent_budget")
    assert text.startswith("agent_integration: ") and "(agent_budget)" in text


def test_explain_texts_name_no_command_or_flag_bench_lacks():
    # `bench explain` must point at things that exist here (BenchFlow's own are named as such)
    for cls in errors.ERROR_CLASSES:
        text = cls.next + " " + cls.explain
        assert (
            "install-stdout" not in text
            and "--timeout " not in text
            and "--agent-start" not in text
        )
        for field in ("api_error_info", "sandbox_startup_info", "transport_error_info"):
            assert field not in text, (cls.name, field)
    # idle_timeout_info is written now (by the idle watchdog): its class may point at it
    assert "idle_timeout_info" in errors.explain_text("idle_timeout")


def test_explain_text_for_an_unknown_class_suggests_names():
    text = errors.explain_text("idle_timout")
    assert text.startswith("Unknown error class 'idle_timout'. Did you mean: idle_timeout")
    assert "Known classes:" in text


@pytest.mark.parametrize(
    ("result", "key", "label", "fault"),
    [
        (
            _result(error="ACP error: Invalid API key (HTTP 401)"),
            "provider_auth",
            "the model provider refused the credential",
            "setup",
        ),
        (
            _result(error="agent integration failure [agent_install]: npm exited 1"),
            "agent_integration:agent_install",
            "the agent integration broke: its install or runtime is broken",
            "infrastructure",
        ),
        (
            _result(
                error="x",
                error_category="agent_integration",
                integration_failure_info={"cause": "agent_auth"},
            ),
            "agent_integration:agent_auth",
            "the agent integration broke: its login or billing failed",
            "setup",
        ),
        (
            _result(error="agent closed stdout", transport_error_info={"process_exit_code": 137}),
            "pipe_closed:exit",
            "the agent process exited with code 137",
            "agent",
        ),
        (
            _result(
                error="usage limit reached", usage_limit_info={"login": "me", "window": "5-hour"}
            ),
            "usage_limit",
            "usage limit on login me, 5-hour window",
            "setup",
        ),
        (
            _result(verifier_error="verifier timed out"),
            "verifier_timeout",
            "the verifier timed out",
            "task",
        ),
        (
            _result(),
            "no_verdict",
            "no verdict was recorded (no reward and no error)",
            "infrastructure",
        ),
        (
            None,
            "interrupted",
            "the attempt was interrupted before it wrote result.json",
            "infrastructure",
        ),
        (_result(error="weird\n  thing"), "other", "other error: weird thing", "infrastructure"),
    ],
)
def test_cause_of_names_the_cause_and_whose_problem(result, key, label, fault):
    cause = errors.cause_of(result, job="jobs/j")
    assert (cause.key, cause.label, cause.fault) == (key, label, fault)


def test_cause_of_a_scored_result_is_none_and_next_fills_the_job():
    assert errors.cause_of(_result(reward=0.0, error="Agent timed out")) is None
    cause = errors.cause_of(_result(error="ACP error: rate limit"), job="jobs/j")
    assert cause.next == "lower --concurrency, then `bench eval resume jobs/j`"
    assert cause.headline() == "the model provider rate-limited the run (infrastructure problem)"


PERMANENT = _result(error="provider api error [auth/permanent] HTTP 401: bad key")


def test_breaker_opens_after_five_identical_permanent_provider_failures():
    breaker = CircuitBreaker(threshold=5)
    assert [breaker.record(PERMANENT) for _ in range(5)] == [False] * 4 + [True]
    assert breaker.open and breaker.is_open
    assert (
        breaker.skip_error()
        == "skipped: api-error circuit breaker open ([auth:401] x5 consecutive)"
    )
    assert errors.classify(breaker.skip_error()) == "api_error"


@pytest.mark.parametrize(
    "interruption",
    [
        _result(reward=1.0),
        _result(error="provider api error [quota/permanent] HTTP 402"),
        _result(error="provider api error [rate_limit/transient] HTTP 429"),
        _result(error="Agent idle for 600s"),
    ],
)
def test_breaker_counts_only_consecutive_identical_failures(interruption):
    breaker = CircuitBreaker(threshold=3)
    for result in (PERMANENT, PERMANENT, interruption, PERMANENT, PERMANENT):
        breaker.record(result)
    assert not breaker.is_open


@pytest.mark.parametrize(("env", "threshold"), [("0", 0), ("3", 3), ("junk", 5), (None, 5)])
def test_breaker_threshold_comes_from_the_environment(monkeypatch, env, threshold):
    if env is None:
        monkeypatch.delenv("BENCHFLOW_API_ERROR_BREAKER_THRESHOLD", raising=False)
    else:
        monkeypatch.setenv("BENCHFLOW_API_ERROR_BREAKER_THRESHOLD", env)
    assert CircuitBreaker().threshold == threshold


def test_breaker_threshold_zero_never_opens():
    breaker = CircuitBreaker(threshold=0)
    assert not any(breaker.record(PERMANENT) for _ in range(20))


@pytest.mark.parametrize(
    ("message", "fingerprint"),
    [
        ("provider api error [auth/permanent] HTTP 401", "auth:401"),
        ("provider api error [rate_limit/transient] HTTP 429", None),
        ("ACP error: Invalid API key (HTTP 403)", "provider_auth:403"),
        ("agent integration failure [agent_auth]: expired", "agent_integration:agent_auth"),
        ("agent integration failure [empty_trajectory]: nothing", None),
        ("Agent idle for 600s", None),
    ],
)
def test_provider_fingerprint(message, fingerprint):
    assert errors.provider_fingerprint(message) == fingerprint


@pytest.mark.parametrize(
    ("message", "category"),
    [
        ("agent timed out after 30s (prompt exceeded wall-clock budget)", "timeout"),
        ("curl: (28) Connection timed out after 5000 milliseconds", "other"),
        ("sandbox config refused by Docker: invalid mount config", "sandbox_config"),
    ],
)
def test_only_the_agents_own_time_limit_is_a_timeout(message: str, category: str) -> None:
    assert errors.classify(message) == category


def test_an_unreachable_host_in_the_tests_is_its_own_class() -> None:
    message = "verifier could not reach a host: curl: (6) Could not resolve host: x.invalid"
    assert errors.classify_verifier(message) == "verifier_unreachable"
    text = errors.explain_text("verifier_unreachable")
    assert "Retried:       no" in text and "Graded:        no" in text
    assert "could not reach a host" in text


def test_a_sandbox_setting_docker_refuses_is_not_retried() -> None:
    result = {"error": "sandbox config refused by Docker: x", "error_category": "sandbox_config"}
    assert not errors.should_retry(result)


@pytest.mark.parametrize(
    ("result", "log"),
    [
        (
            {"error": "image build failed for task t (...)", "error_category": "image_build"},
            "t.log",
        ),
        (
            {
                "verifier_error": "image build failed for the verifier of task t (...)",
                "verifier_error_category": "verifier_image_build",
            },
            "t.verifier.log",
        ),
    ],
)
def test_an_image_that_did_not_build_points_first_at_its_saved_build_log(result, log) -> None:
    cause = errors.cause_of(result, job="jobs/j", task="/sets/tasks/t")
    assert cause is not None and cause.next.startswith(
        f"the build's whole output is saved in jobs/j/builds/{log}; "
    )
    assert cause.fault == "setup"


def test_a_verifier_image_build_failure_is_the_verifiers_own_class() -> None:
    message = "image build failed for the verifier of task t (tests/Dockerfile, line 2): x"
    assert errors.classify_verifier(message) == "verifier_image_build"
    assert not errors.should_retry({"verifier_error": message})
    assert "Retried:       no" in errors.explain_text("verifier_image_build")
