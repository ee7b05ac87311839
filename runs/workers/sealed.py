"""Secrets a run was given, carried to its workers sealed: never in a job folder, the index, a log
or a command line.

What is sealed: the run's secret --agent-env values (typed on `bench run` or the launch form; the
recorded settings keep only their names) and the variables of the coordinator's machine its
tasks were allowed to read (runs/host_env.py). The coordinator seals them with Fernet
(`cryptography`), keyed from the deployment's secret key (Django's SECRET_KEY, the same on every
machine of a deployment: BENCHFLOW_SECRET_KEY), and puts the token in Redis under its dispatcher's
id with a time limit, sealing it anew each time it says it is alive (runs/workers/dispatch.py);
it deletes it at the end. A worker opens it once per run (runs/workers/runtime.py). A token older
than the limit does not open, and one its coordinator stopped renewing is gone from Redis: a
resume of the job seals the values again.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runs.workers.config import dispatcher_stale_s

KEY_LABEL = b"benchflow-site sealed run secrets v1\0"


class SealError(Exception):
    """A sealed token that does not open here (another deployment's key, or too old)."""


@dataclass(frozen=True)
class Sealed:
    """What a run hands its workers: secret --agent-env values, and allowed host variables."""

    agent_env: Mapping[str, str] = field(default_factory=dict)
    host_env: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps(
            {"agent_env": dict(self.agent_env), "host_env": dict(self.host_env)}
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Sealed:
        doc = json.loads(data)
        return cls(
            {str(k): str(v) for k, v in (doc.get("agent_env") or {}).items()},
            {str(k): str(v) for k, v in (doc.get("host_env") or {}).items()},
        )


def sealed_key(dispatcher: int) -> str:
    return f"benchflow:dispatcher:{dispatcher}:sealed"


def ttl_s() -> int:
    """How long a token lives without its coordinator renewing it: as long as a coordinator not
    seen counts as alive (its workers start none of its attempts after that)."""
    return int(dispatcher_stale_s()) + 1


def _fernet(secret_key: str) -> Any:
    from cryptography.fernet import Fernet

    digest = hashlib.sha256(KEY_LABEL + secret_key.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(what: Sealed, secret_key: str) -> bytes:
    return bytes(_fernet(secret_key).encrypt(what.to_json()))


def unseal(token: bytes, secret_key: str, max_age_s: int | None = None) -> Sealed:
    """The sealed values, or SealError (`max_age_s`: refuse a token sealed longer ago)."""
    from cryptography.fernet import InvalidToken

    fernet = _fernet(secret_key)
    try:
        data = fernet.decrypt(token, ttl=max_age_s)
    except InvalidToken:
        try:
            fernet.decrypt(token)
        except InvalidToken:
            raise SealError(
                "the run's sealed secrets do not open on this worker: its secret key differs "
                "from the coordinator's; fix: set the same BENCHFLOW_SECRET_KEY on every machine "
                "of the deployment"
            ) from None
        raise SealError(
            "the run's sealed secrets are older than their time limit (its coordinator stopped "
            "renewing them); fix: resume the job"
        ) from None
    return Sealed.from_json(data)


def deployment_key() -> str:
    """The deployment's secret key (Django's SECRET_KEY; settings.py reads it)."""
    from django.conf import settings

    return str(settings.SECRET_KEY)
