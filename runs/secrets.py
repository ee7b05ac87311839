"""Which environment values are secrets: they never reach a job folder, a log or the database."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

SECRET_NAME_MARKERS = (
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "COOKIE",
    "AUTH",
    "BEARER",
    "SESSION",
    "PRIVATE",
)
_SECRET_VALUE = re.compile(
    r"(sk-[A-Za-z0-9_\-]{16,}|sk-ant-[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abpr]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY"
    r"|[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]+:[^/\s@]+@"  # a URL with a password
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


# The variables that hold a model provider's key on this machine (each provider's in
# proxy/providers.py is one of these; a test holds the two together), and a Claude login's: kept
# out of every sandbox.
MODEL_KEY_VARS = frozenset(
    {
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "DEEPSEEK_API_KEY",
        "XIAOMI_API_KEY",
        "OPENROUTER_API_KEY",
        "BENCHFLOW_PROVIDER_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
    }
)

MIN_SECRET_LEN = 8  # shorter values ("1", "true") are not searched for: they would scar every file
REDACTED = b"[REDACTED]"


def secret_values(*envs: dict[str, str]) -> list[str]:
    """The secret values of these environments (by name or by shape), longest first."""
    values = {
        v for env in envs for k, v in env.items() if len(v) >= MIN_SECRET_LEN and is_secret(k, v)
    }
    return sorted(values, key=len, reverse=True)


def redact_bytes(data: bytes, values: list[bytes]) -> bytes:
    for value in values:
        if data.find(value) >= 0:
            data = data.replace(value, REDACTED)
    return data


class StreamRedactor:
    """Known secret values replaced in a stream of bytes cut anywhere: the end of a chunk that may
    begin a secret is held back until the next chunk (or close) shows whether it does."""

    def __init__(self, values: list[str] | list[bytes]):
        self.values = sorted(
            {v.encode() if isinstance(v, str) else v for v in values}, key=len, reverse=True
        )
        self._tail = b""

    def feed(self, chunk: bytes) -> bytes:
        if not self.values:
            return chunk
        data = redact_bytes(self._tail + chunk, self.values)
        cut = len(data) - self._held(data)
        self._tail = data[cut:]
        return data[:cut]

    def close(self) -> bytes:
        tail, self._tail = self._tail, b""
        return tail

    def _held(self, data: bytes) -> int:
        """The length of the longest end of `data` that is the start of a secret."""
        held = 0
        for value in self.values:
            start = max(len(data) - len(value) + 1, 0)
            at = data.find(value[:1], start)
            while at >= 0:
                if value.startswith(data[at:]):
                    held = max(held, len(data) - at)
                    break
                at = data.find(value[:1], at + 1)
        return held


def redact_tree(folder: Path, values: list[str]) -> list[Path]:
    """Replace known secret values in every file under `folder`; returns the files changed.

    The safety net for what a trial wrote where no redaction runs as it is written (files the agent
    or the tests put in /logs, artifacts). A file is read in pieces, and rewritten only when it holds
    a secret."""
    if not values or not folder.is_dir():
        return []
    redactor = StreamRedactor(values)
    changed = []
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            if not _holds_any(path, redactor.values):
                continue
            tmp = path.with_name(path.name + ".redacting")
            with path.open("rb") as src, tmp.open("wb") as dst:
                while chunk := src.read(CHUNK):
                    dst.write(redactor.feed(chunk))
                dst.write(redactor.close())
            os.chmod(tmp, path.stat().st_mode & 0o777)
            os.replace(tmp, path)
            changed.append(path)
        except OSError:
            continue
    return changed


CHUNK = 1 << 20


def _holds_any(path: Path, values: list[bytes]) -> bool:
    longest = max(len(v) for v in values)
    tail = b""
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            data = tail + chunk
            if any(data.find(v) >= 0 for v in values):
                return True
            tail = data[-(longest - 1) :] if longest > 1 else b""
    return False


def redact_obj(obj: Any, values: list[str]) -> Any:
    """A JSON-like value with known secret values replaced in each of its strings."""
    if not values:
        return obj
    if isinstance(obj, str):
        for value in values:
            if value in obj:
                obj = obj.replace(value, REDACTED.decode())
        return obj
    if isinstance(obj, dict):
        return {k: redact_obj(v, values) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact_obj(v, values) for v in obj]
    return obj


# Key-shaped strings, whoever's they are: provider and proxy keys, GitHub/Slack/AWS tokens, JWTs,
# bearer tokens, PEM private keys. For text leaving the machine (`bench view --export`), where
# the values to look for are not all known.
_KEY_SHAPE = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:sk-(?:ant-)?[A-Za-z0-9_\-]{16,}|bf-[A-Za-z0-9_\-]{24,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|xox[abpr]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}"
    r"|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}(?:\.[A-Za-z0-9_\-]+)?)"
    r"|[Bb]earer\s+[A-Za-z0-9._~+/\-]{16,}=*"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)"
    r"|(?<=://)[^/\s:@\"'<>]+:[^/\s@\"'<>]+(?=@)",  # a URL's user:password
    re.S,
)


def redact_text(text: str, values: list[str]) -> tuple[str, int]:
    """`text` with known secret values and key-shaped strings replaced by [REDACTED], and how
    many were replaced."""
    count = 0
    for value in sorted(set(values), key=len, reverse=True):
        n = text.count(value)
        if n:
            count += n
            text = text.replace(value, REDACTED.decode())
    text, shaped = _KEY_SHAPE.subn(REDACTED.decode(), text)
    return text, count + shaped
