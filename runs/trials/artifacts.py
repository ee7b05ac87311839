"""What the agent's sandbox leaves once the agent is done: Harbor's collect hooks run in it, then
its declared artifacts (Harbor's `artifacts`) copied into the attempt's artifacts/, with a
manifest saying what each became. A separate verifier is given only these."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

from runs.sandboxes.docker import Sandbox
from runs.tasks.load import Task
from runs.tasks.setup_keys import Artifact, CollectHook

MANIFEST = "manifest.json"
COLLECT_LOG = "collect.txt"  # in the attempt's agent/: what the collect hooks printed
# The hook's own time limit where the image has coreutils' timeout; else it runs unbounded.
_BOUNDED = 'if command -v timeout >/dev/null; then exec timeout -k 5 "$1" sh -c "$0"; else exec sh -c "$0"; fi'


def run_collect_hooks(sandbox: Sandbox, hooks: tuple[CollectHook, ...], log: Path) -> None:
    """Each hook in its service (main's first, then the others'), best effort: a failure is
    written to `log`, never the trial's. Blocking: run it in the loop's executor."""
    for hook in sorted(hooks, key=lambda h: h.service != "main"):
        target = sandbox.service(hook.service)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as fh:
            fh.write(f"--- {hook.service}: {hook.command}\n")
        if target is None:
            with open(log, "a") as fh:
                fh.write(f"(the task has no service {hook.service}: not run)\n")
            continue
        try:
            result = target.exec(
                ["sh", "-c", _BOUNDED, hook.command, f"{hook.timeout_sec:g}"],
                user=hook.user,
                stdout_path=log,
            )
            note = f"(exit {result.exit_code})\n"
        except Exception as exc:  # noqa: BLE001 - a hook never fails the trial (Harbor's rule)
            note = f"(failed: {exc})\n"
        with open(log, "a") as fh:
            fh.write(note)


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


def hand_over(sandbox: Sandbox, task: Task, attempt_dir: Path, stop: bool) -> None:
    """Once the agent is done and before the verifier, as Harbor does: the collect hooks run, the
    declared artifacts are copied into artifacts/, and with `stop` the agent's sandbox is stopped
    (a separate verifier starts only after). Blocking: run it in the loop's executor."""
    if task.verifier.collect:
        run_collect_hooks(sandbox, task.verifier.collect, attempt_dir / "agent" / COLLECT_LOG)
    collect(sandbox, task.artifacts, attempt_dir / "artifacts")
    if stop:
        sandbox.stop()
