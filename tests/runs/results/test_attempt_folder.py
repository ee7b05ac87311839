"""The one reader of an attempt folder: each kind of folder, one wording of a corrupt result, one
reader of JSON, and no other module naming result.json."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from runs.index.folder import index_path
from runs.jobfolder import NOT_STARTED_MARK, finite, read_json
from runs.models import Attempt
from runs.results.attempt_folder import RESULT, read_attempt
from runs.results.load import load_job
from tests.jobfolders import result_doc, write_attempt, write_job

REPO = Path(__file__).resolve().parents[3]
# the reader, and the job's own documents (a Harbor job has a result.json of its own)
READERS = {"runs/results/attempt_folder.py", "runs/results/job_documents.py"}


@pytest.mark.parametrize(
    ("result", "extra", "kind", "cause"),
    [
        (result_doc("t", "t__1", 1.0), None, "ok", None),
        (None, None, "missing", None),
        ('{"task_name": "t", "rewa', None, "corrupt", "not a JSON object: not JSON, or cut off"),
        ("[1, 2]", None, "corrupt", "not a JSON object: a JSON list"),
        ("", None, "corrupt", "empty"),
        (None, NOT_STARTED_MARK, "not_started", None),
        (result_doc("t", "t__1", 1.0, purpose="reviewer"), None, "not_an_attempt", None),
    ],
)
def test_an_attempt_folder_reads_as_one_kind_with_its_cause(tmp_path, result, extra, kind, cause):
    folder = write_attempt(tmp_path, "t__00000001", result)
    if extra:
        (folder / extra).touch()
    record = read_attempt(str(folder))
    assert (record.kind, record.cause) == (kind, cause)
    if kind == "ok":
        assert record.result is not None and record.result.reward == 1.0
        assert record.document is not None and record.document["rewards"] == {"reward": 1.0}
    else:
        assert record.result is None and record.document is None


def test_a_folder_without_a_result_takes_its_trial_from_config_json(tmp_path):
    folder = tmp_path / "t__00000002"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"task_name": "t", "trial_name": "t#1", "trial_index": 1, "attempt": 2})
    )
    (folder / "timing.json").write_text(json.dumps({"cancelled_by": "budget reached: x"}))
    record = read_attempt(str(folder))
    assert (record.kind, record.task, record.trial_name, record.trial_index, record.number) == (
        "missing",
        "t",
        "t#1",
        1,
        2,
    )
    assert record.timing == {"cancelled_by": "budget reached: x"}


@pytest.mark.django_db
def test_a_corrupt_result_is_worded_once_for_results_and_the_index(tmp_path):
    job = write_job(tmp_path, plan=["t"])
    write_attempt(job, "t__00000001", '{"task_name": "t", "rewa')
    # when
    trial = load_job(job).trials[0]
    index_path(job)
    row = Attempt.objects.get()
    # then the same text, naming the cause and the file, in `bench results` and on the page
    expected = (
        "result.json is corrupt or half-written (not a JSON object: not JSON, or cut off): "
        "t__00000001/result.json"
    )
    assert trial.error == expected and row.error == expected
    assert trial.error_category == row.error_category == "corrupt_result"


def test_read_json_is_one_behaviour_for_every_job_file(tmp_path):
    (tmp_path / "nan.json").write_text('{"reward": NaN}')
    (tmp_path / "cut.json").write_text('{"reward": 1')
    assert finite(read_json(tmp_path / "nan.json")["reward"]) is None
    assert read_json(tmp_path / "cut.json") is None
    assert read_json(tmp_path / "absent.json") is None


def _names_result_json(path: Path) -> list[int]:
    """Lines where a string is a path to result.json (a message about it has spaces)."""
    tree = ast.parse(path.read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.endswith(RESULT)
        and " " not in node.value
    ]


def test_no_module_but_the_reader_names_result_json():
    found = {
        f"{path.relative_to(REPO)}:{line}"
        for package in ("runs", "viewer", "benchflow_site", "proxy")
        for path in (REPO / package).rglob("*.py")
        if str(path.relative_to(REPO)) not in READERS
        for line in _names_result_json(path)
    }
    assert not found, f"read or write result.json through runs/results/attempt_folder.py: {found}"
