"""An operation asked for (a run, a resume, a regrade, a reviewer's run), as it leaves the request
or the coordinator for a process of its own (`bench _operate`, which reads it on its stdin). Here,
below every layer that starts one, so that jobs' automatic reviews and the dashboard's operations
hand over the same thing."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Request:
    """One operation to run out of the request: `kind` is run (launch, resume, rerun) or regrade;
    `body` holds its arguments (for a run, the RunSpec's fields: secret values included, so a
    Request is never written to a file or a log)."""

    kind: str
    job_dir: str
    body: Mapping[str, Any] = field(default_factory=dict)
    by: str = ""  # who asked

    def to_json(self) -> str:
        return json.dumps(
            {"kind": self.kind, "job_dir": self.job_dir, "body": dict(self.body), "by": self.by}
        )

    @classmethod
    def from_json(cls, text: str) -> Request:
        data = json.loads(text)
        return cls(
            str(data["kind"]),
            str(data["job_dir"]),
            dict(data.get("body") or {}),
            str(data.get("by") or ""),
        )
