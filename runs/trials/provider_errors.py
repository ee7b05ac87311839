"""What a trial's result says when the proxy saw its provider fail: one line and category per class."""

from __future__ import annotations

from collections.abc import Collection

# What the proxy saw go wrong with the provider, most telling first: each error class the
# proxy counted is the trial's error_category, with this line as its error.
_PROVIDER_ERRORS = {
    "provider_rate_limit": "provider rate limited: HTTP 429 from the model provider ({})",
    "provider_auth": "the model provider refused the credential (HTTP 401/403): {}",
    "api_error": "provider api error [server/transient] {}",
    "infra_failure": "connection lost to the model provider (upstream unreachable): {}",
}


def provider_error(errors: Collection[str], status_text: str) -> tuple[str, str] | None:
    """The (error, error_category) for the error classes the proxy counted, or None."""
    for category, text in _PROVIDER_ERRORS.items():
        if category in errors:
            return text.format(status_text)[:500], category
    if "provider_rejected" in errors:
        # another 4xx: a 400 is most often a context too long; 404/422 an unknown model or a bad
        # request. Permanent either way: a retry would be rejected the same way.
        if status_text.startswith("HTTP 400"):
            return f"provider rejected request: {status_text}"[:500], "provider_rejected"
        return f"provider api error [rejected/permanent] {status_text}"[:500], "api_error"
    return None
