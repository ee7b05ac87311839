"""Which environment values are secrets: they never reach a job folder, a log or the database."""

from __future__ import annotations

import re

SECRET_NAME_MARKERS = (
    "KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "COOKIE", "AUTH", "BEARER", "SESSION", "PRIVATE",
)
_SECRET_VALUE = re.compile(
    r"(sk-[A-Za-z0-9_\-]{16,}|sk-ant-[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abpr]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY"
    r"|[A-Za-z0-9+/_\-]{40,})"
)


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in SECRET_NAME_MARKERS)


def looks_secret(value: str) -> bool:
    return bool(_SECRET_VALUE.search(value)) or "/__benchflow/" in value


def is_secret(name: str, value: str) -> bool:
    return is_secret_name(name) or looks_secret(value)


def public_env(env: dict[str, str]) -> dict[str, str]:
    """The values that may be recorded: secret-looking ones dropped."""
    return {k: v for k, v in env.items() if not is_secret(k, v)}


def secret_keys(env: dict[str, str]) -> list[str]:
    return sorted(k for k, v in env.items() if is_secret(k, v))


def redact(text: str, secrets: list[str]) -> str:
    """Replace each known secret value (and anything that looks like one) in `text`."""
    for value in sorted((s for s in secrets if s and len(s) >= 4), key=len, reverse=True):
        text = text.replace(value, "[REDACTED]")
    return _SECRET_VALUE.sub(lambda m: "[REDACTED]" if len(m.group(0)) < 40 or _mixed(m.group(0)) else m.group(0), text)


def _mixed(s: str) -> bool:
    """Long runs of letters and digits mixed look like keys; long words or hex digests of files less so."""
    return any(c.isdigit() for c in s) and any(c.isupper() for c in s) and any(c.islower() for c in s)
