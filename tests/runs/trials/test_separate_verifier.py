"""A separate verifier's hand-over (runs/trials/separate_verifier.py, runs/trials/artifacts.py):
what reaches the verifier's container, at which path, and in which order things happen."""

from __future__ import annotations

import json
from pathlib import Path

from runs.sandboxes.streams import ExecResult
from runs.tasks.setup_keys import Artifact, CollectHook
from runs.trials.artifacts import hand_over
from runs.trials.separate_verifier import handed_over, missing_artifacts
from tests.runs.tasks.test_tasks import split_task


def test_each_artifact_goes_back_to_its_own_path_and_the_rest_to_logs_artifacts(
    tmp_path: Path,
) -> None:
    # given an attempt's artifacts/: two declared artifacts (a file, a folder under a
    # destination of its own), what the agent put in /logs/artifacts, the manifest, a symlink
    root = tmp_path / "artifacts"
    (root / "root" / "results").mkdir(parents=True)
    (root / "root" / "results" / "out.json").write_text("{}")
    (root / "out" / "notes").mkdir(parents=True)
    (root / "out" / "notes" / "a.txt").write_text("kept")
    (root / "state.txt").write_text("snapshot")
    (root / "manifest.json").write_text("[]")
    (root / "escape").symlink_to("/etc/passwd")
    declared = (
        Artifact("/root/results/out.json", "root/results/out.json"),
        Artifact("/app/out", "out"),
    )
    got = {
        target: path.relative_to(root).as_posix() for target, path in handed_over(root, declared)
    }
    assert got == {
        "/app/out/notes/a.txt": "out/notes/a.txt",
        "/root/results/out.json": "root/results/out.json",
        "/logs/artifacts/state.txt": "state.txt",
    }


def test_a_declared_artifact_the_manifest_lacks_is_missing(tmp_path: Path) -> None:
    declared = (Artifact("/a.txt", "a.txt"), Artifact("/b", "b"))
    assert missing_artifacts(tmp_path, declared) == ["/a.txt", "/b"]  # no manifest at all
    rows = [{"source": "/a.txt", "type": "file"}, {"source": "/b", "type": "missing"}]
    (tmp_path / "manifest.json").write_text(json.dumps(rows))
    assert missing_artifacts(tmp_path, declared) == ["/b"]
    assert missing_artifacts(tmp_path, ()) == []


class _Sandbox:
    """Records what is done to the agent's sandbox, in order."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def service(self, name: str) -> _Sandbox | None:
        return self if name in ("main", "db") else None

    def exec(self, cmd, *, user=None, stdout_path=None, **_kw) -> ExecResult:
        self.log.append(f"hook {cmd[3]}")
        return ExecResult(0)

    def copy_path_to(self, path, target, exclude):
        self.log.append(f"copy {path}")
        return "file", 1, 1

    def stop(self) -> None:
        self.log.append("stop")


def test_hooks_run_main_first_then_artifacts_are_copied_then_the_sandbox_stops(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    from runs.tasks.load import load_task

    task = load_task(split_task(tmp_path, 'artifacts = ["/app/x"]\n'))
    hooks = (
        CollectHook("dump db", service="db"),
        CollectHook("snap main"),
        CollectHook("no", "gone"),
    )
    task = replace(task, verifier=replace(task.verifier, collect=hooks))
    log: list[str] = []
    hand_over(_Sandbox(log), task, tmp_path / "attempt", True)  # type: ignore[arg-type]
    assert log == ["hook snap main", "hook dump db", "copy /app/x", "stop"]
    said = (tmp_path / "attempt" / "agent" / "collect.txt").read_text()
    assert "(the task has no service gone: not run)" in said
    log.clear()
    hand_over(_Sandbox(log), task, tmp_path / "attempt", False)  # type: ignore[arg-type]
    assert log[-1] == "copy /app/x"  # shared: the verifier runs in this sandbox next
