"""Hole 11's two file reads: a symlink in a task root passed the launch form's script: check, and
-m mock/script:PATH read any file and showed it in an error. A file named from the browser must
now be a regular file under a task root once every link is followed, and a reply script that is
not one is said to be so without a word of what it holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchflow_site.gateway import ProxyGateway
from proxy.mock_script import load_script
from runs.operations import roots as paths
from runs.operations.launch import check_launch

SECRET = "root:$6$hole11-0123456789abcdef:19000:0:99999:7:::"


@pytest.fixture
def where(tmp_path: Path) -> paths.Roots:
    root = tmp_path / "tasks"
    (root / "set").mkdir(parents=True)
    (root / "set" / "task.toml").write_text('version = "1.0"\n')
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "shadow").write_text(SECRET)
    (outside / "replies.json").write_text(json.dumps([{"password": SECRET}]))
    (root / "agent.sh").symlink_to(outside / "shadow")
    (root / "replies.json").symlink_to(outside / "replies.json")
    (root / "real.sh").write_text("#!/bin/sh\ntrue\n")
    (root / "real.json").write_text(json.dumps([{"text": "done"}]))
    return paths.Roots((root.resolve(),), (tmp_path / "jobs").resolve())


def _problems(where: paths.Roots, **form: str) -> dict[str, list[str]]:
    texts = {"tasks_dir": "set", "agent": "oracle", **form}
    found: dict[str, list[str]] = {}
    for p in check_launch(texts, where, None).problems:
        found.setdefault(p.field, []).append(p.text)
    return found


def test_a_script_agent_that_is_a_link_out_of_the_task_root_is_refused(where):
    problems = _problems(where, agent="script:agent.sh")
    assert "not a file under a configured task root" in problems["agent"][0]
    assert "agent" not in _problems(where, agent="script:real.sh")


def test_a_mock_reply_script_from_the_browser_must_lie_under_a_task_root(where, tmp_path):
    for model in (
        "mock/script:replies.json",  # a link out of the root
        f"mock/script:{tmp_path / 'private' / 'replies.json'}",  # a path out of it
        "mock/script:../private/replies.json",
    ):
        problems = _problems(where, model=model)
        assert "not a file under a configured task root" in problems["model"][0], model
        assert SECRET not in str(problems)
    assert "model" not in _problems(where, model="mock/script:real.json")


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("a.json", json.dumps([{"password": SECRET}])),  # objects, not replies
        ("b.json", SECRET),  # not JSON at all
        ("c.yaml", f"- {SECRET}: [\n"),  # not YAML
        ("d.json", json.dumps([{"tool": "x", "args": [SECRET]}])),
    ],
)
def test_a_file_that_is_no_reply_script_is_said_to_be_so_without_its_content(
    tmp_path, name, content
):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError) as raised:
        load_script(path)
    assert str(path) in str(raised.value) and SECRET not in str(raised.value)
    assert "hole11" not in str(raised.value)
    # and the run's check says it before any job, the same way
    (problem,) = ProxyGateway().check_model(f"mock/script:{path}", None, False)
    assert "hole11" not in problem and "fix:" in problem
