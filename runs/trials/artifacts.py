"""A task's declared artifacts (Harbor's `artifacts`): paths of the sandbox copied into the
attempt's artifacts/ after the verifier, with a manifest saying what each became."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

from runs.sandboxes.docker import Sandbox
from runs.tasks.setup_keys import Artifact

MANIFEST = "manifest.json"


def collect(sandbox: Sandbox, artifacts: tuple[Artifact, ...], into: Path) -> list[dict[str, Any]]:
    """Copy each artifact into `into` (a file to its destination, a folder's contents under it);
    write and return the manifest. Blocking: run it in the loop's executor."""
    if not artifacts:
        return []
    rows = []
    for a in artifacts:

        def left_out(rel: str, patterns: tuple[str, ...] = a.exclude) -> bool:
            name = rel.rsplit("/", 1)[-1]
            return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in patterns)

        kind, files, size = sandbox.copy_path_to(a.source, into / a.destination, left_out)
        rows.append(
            {
                "source": a.source,
                "destination": a.destination,
                "type": kind,
                "files": files,
                "bytes": size,
            }
        )
    into.mkdir(parents=True, exist_ok=True)
    (into / MANIFEST).write_text(json.dumps(rows, indent=2) + "\n")
    return rows
