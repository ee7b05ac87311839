"""What a trial's result says when the proxy saw its provider fail (runs.trials.provider_errors.provider_error)."""

from __future__ import annotations

import pytest

from runs import errors
from runs.trials.provider_errors import provider_error


@pytest.mark.parametrize(
    ("counted", "status", "message", "category"),
    [
        (
            {"provider_rate_limit"},
            "HTTP 429: slow down",
            "provider rate limited: HTTP 429 from the model provider (HTTP 429: slow down)",
            "provider_rate_limit",
        ),
        (
            {"provider_auth"},
            "HTTP 401: bad key",
            "the model provider refused the credential (HTTP 401/403): HTTP 401: bad key",
            "provider_auth",
        ),
        (
            {"api_error"},
            "HTTP 503: overloaded",
            "provider api error [server/transient] HTTP 503: overloaded",
            "api_error",
        ),
        (
            {"infra_failure"},
            "upstream unreachable: refused",
            "connection lost to the model provider (upstream unreachable): upstream unreachable: "
            "refused",
            "infra_failure",
        ),
        (
            {"provider_rejected"},
            "HTTP 400: context too long",
            "provider rejected request: HTTP 400: context too long",
            "provider_rejected",
        ),
        (
            {"provider_rejected"},
            "HTTP 404: no such model",
            "provider api error [rejected/permanent] HTTP 404: no such model",
            "api_error",
        ),
    ],
)
def test_each_counted_class_gives_its_error_line_and_category(counted, status, message, category):
    # when
    found = provider_error(counted, status)
    # then the line is the one the console and result.json show, read back as its category,
    # and retried as the error table says: transient API errors and lost connections only
    assert found == (message, category)
    result = {"error": message, "error_category": category}
    assert errors.error_category(result) == category
    assert errors.should_retry(result) is (
        category in ("api_error", "infra_failure") and "permanent" not in message
    )


def test_the_most_telling_class_wins_when_a_trial_saw_several():
    # given a trial whose calls met a 503 and then a 429
    counted = {"api_error", "provider_rate_limit", "provider_rejected"}
    # then the rate limit names the trial's error
    assert provider_error(counted, "HTTP 429")[1] == "provider_rate_limit"
    assert provider_error({"api_error", "provider_rejected"}, "HTTP 503")[1] == "api_error"


def test_a_long_provider_message_is_cut_and_braces_in_it_are_kept():
    text = "HTTP 500: {" + "x" * 900 + "}"
    message, _ = provider_error({"api_error"}, text)
    assert len(message) == 500 and message.startswith(
        "provider api error [server/transient] HTTP 500: {x"
    )


def test_nothing_counted_is_no_error():
    assert provider_error(set(), "") is None
    assert provider_error({"trial_budget_spent"}, "HTTP 400") is None
