"""The one reader of an attempt folder: its result.json (ours, or a Harbor trial's) as a typed
record, else what the folder says instead.

The order: result.json (a reviewer's result is no attempt), the not-started mark of a sandbox
prepared ahead, then config.json for what the attempt was and timing.json for how it ended (a job
cap's cancel). `bench results`, resume planning, regrade, `bench index` and the trial page all read
attempts here; no other module opens result.json (tests/runs/results/test_attempt_folder.py holds that).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from runs.jobfolder import NOT_STARTED_MARK, read_object
from runs.results.harbor import read as harbor
from runs.results.trial_result import TrialResult

try:
    from orjson import loads as _loads  # a C parser: readers go through thousands of these
except ImportError:  # pragma: no cover
    _loads = json.loads  # type: ignore[assignment]

RESULT = "result.json"
CORRUPT = "result.json is corrupt or half-written"
Kind = Literal["ok", "missing", "corrupt", "not_started", "not_an_attempt"]
Source = Literal["benchflow", "harbor"]
ATTEMPT_KINDS = frozenset({"ok", "missing", "corrupt"})  # the others are no attempt


def corrupt_text(cause: str, folder: str | None = None) -> str:
    """The one wording of a corrupt result, with its cause (and the file, when named)."""
    where = f": {folder}/{RESULT}" if folder else ""
    return f"{CORRUPT} ({cause}){where}"


@dataclass(slots=True)
class AttemptRecord:
    """One attempt folder read. `ok`: `result` is its result.json typed and `document` the same
    in BenchFlow's names (as written, or a Harbor trial's translated); `corrupt`: `cause` says
    why; `missing`: none written (running, interrupted, or cancelled: `timing` says). `config` is
    config.json when the result is not ok."""

    kind: Kind
    name: str
    path: str
    source: Source = "benchflow"
    raw: dict[str, Any] | None = None  # our result.json as written
    cause: str | None = None
    config: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    task: str = ""
    trial_name: str = ""
    trial_index: int = 0
    number: int = 1
    # typed when first asked for: `bench results` and resume planning read thousands of folders
    # and need only the document (the same facts); the index and the pages use the typed result
    _result: TrialResult | None = field(default=None, repr=False)
    _document: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def result(self) -> TrialResult | None:
        if self._result is None and self.raw is not None:
            self._result = TrialResult.from_json(self.raw, self.name)
        return self._result

    @property
    def document(self) -> dict[str, Any] | None:
        """result.json in BenchFlow's names: for the error table and the summary, which read the
        keys only some writers add."""
        if self.raw is not None:
            return self.raw
        if self._result is not None and self._document is None:
            self._document = self._result.to_json()
        return self._document

    @property
    def is_attempt(self) -> bool:
        return self.kind in ATTEMPT_KINDS

    @property
    def error(self) -> str | None:
        return corrupt_text(self.cause or "", self.name) if self.kind == "corrupt" else None

    def renumber(self, index: int, trial_name: str) -> None:
        """A Harbor trial's index and name, once its task's trials are known (a Harbor trial is
        held translated, never as written: `raw` is None)."""
        self.trial_index, self.trial_name = index, trial_name
        if self._result is not None:
            self._result.trial_index, self._result.trial_name = index, trial_name
            self._document = None


def _parse(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """(the document, "") or (None, why it is no document)."""
    try:
        data = _loads(raw)
    except ValueError:
        if not raw.strip():
            return None, "empty"
        try:  # NaN or Infinity from an older writer: the standard library reads them
            data = json.loads(raw)
        except ValueError:
            return None, "not a JSON object: not JSON, or cut off"
    if not isinstance(data, dict):
        return None, f"not a JSON object: a JSON {type(data).__name__}"
    return data, ""


def _identity(record: AttemptRecord, meta: dict[str, Any] | None) -> AttemptRecord:
    """Task, trial and attempt number of an attempt without a usable result, from its config.json
    (ours names them; Harbor's names the task: its trials are numbered later)."""
    meta = meta or {}
    if harbor.is_trial_config(meta):
        record.source = "harbor"
        record.task = harbor.task_of_config(meta) or record.name.rsplit("__", 1)[0]
    else:
        record.task = str(meta.get("task_name") or record.name.rsplit("__", 1)[0])
        index = meta.get("trial_index")
        record.trial_index = index if type(index) is int else 0
        number = meta.get("attempt")
        record.number = number if type(number) is int else 1
    record.trial_name = (
        str(meta.get("trial_name") or record.task) if record.source == "benchflow" else record.task
    )
    return record


def read_attempt(folder: str | os.DirEntry[str]) -> AttemptRecord:
    """Read one attempt folder (a path or a scandir entry)."""
    path = folder if isinstance(folder, str) else folder.path
    name = os.path.basename(path)
    try:
        with open(os.path.join(path, RESULT), "rb") as handle:
            raw: bytes | None = handle.read()
    except OSError:  # not there (or not readable: the same for every reader)
        raw = None
    doc, cause = _parse(raw) if raw is not None else (None, "")
    if doc is None:
        if os.path.exists(os.path.join(path, NOT_STARTED_MARK)):
            return AttemptRecord("not_started", name, path)
        config = read_object(os.path.join(path, "config.json"))
        if raw is not None:
            return _identity(
                AttemptRecord("corrupt", name, path, cause=cause, config=config), config
            )
        timing = read_object(os.path.join(path, "timing.json"))
        return _identity(AttemptRecord("missing", name, path, config=config, timing=timing), config)
    if doc.get("purpose") == "reviewer":
        return AttemptRecord("not_an_attempt", name, path)
    if harbor.is_trial_result(doc):
        result = harbor.trial_result(doc, name)
        record = AttemptRecord("ok", name, path, "harbor", _result=result)
        record.task, record.trial_name = result.task_name, result.trial_name
        return record
    task = str(doc.get("task_name") or name.rsplit("__", 1)[0])
    index, number = doc.get("trial_index"), doc.get("attempt")
    return AttemptRecord(  # positional: this runs for each of thousands of folders
        "ok",
        name,
        path,
        "benchflow",
        doc,
        None,
        None,
        None,
        task,
        str(doc.get("trial_name") or task),
        index if type(index) is int else 0,
        number if type(number) is int else 1,
    )


def job_attempts(job_dir: str | os.PathLike[str]) -> Iterator[AttemptRecord]:
    """Every attempt folder of a job, read, in no set order (not-started and reviewer folders left
    out). Ours are given as they are read; a Harbor job's once all are read, its trials numbered."""
    held: list[AttemptRecord] = []
    with os.scandir(job_dir) as entries:
        for entry in entries:
            if entry.name.startswith(".") or "__" not in entry.name or not entry.is_dir():
                continue
            record = read_attempt(entry)
            if record.kind not in ATTEMPT_KINDS:
                continue
            if record.source == "harbor":
                held.append(record)
            else:
                yield record
    if held:
        number_trials(held)
        yield from held


def number_trials(records: list[AttemptRecord]) -> None:
    """Harbor's trials of each task, numbered oldest first (a trial that has not finished, after)."""
    by_task: dict[str, list[AttemptRecord]] = {}
    for record in records:
        by_task.setdefault(record.task, []).append(record)
    for task, members in by_task.items():
        members.sort(
            key=lambda r: (r._result is None, r._result.started_at if r._result else "", r.name)
        )
        for i, record in enumerate(members):
            record.renumber(i, task if i == 0 else f"{task}#{i}")


def result_text(folder: str | os.PathLike[str], limit: int) -> tuple[str, bool]:
    """result.json's text as written, at most `limit` bytes, and whether it was cut (for the trial
    page; a symlink is not followed)."""
    try:
        fd = os.open(os.path.join(folder, RESULT), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return "", False
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    return data[:limit].decode("utf-8", "replace"), len(data) > limit


def result_sha256(folder: str | os.PathLike[str]) -> str | None:
    """The sha256 of result.json's bytes (a regrade records which result it started from)."""
    import hashlib

    try:
        with open(os.path.join(folder, RESULT), "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None
