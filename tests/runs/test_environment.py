"""One settings prefix: BENCHFLOW_ names win; the old BENCH_ names are still read, with a warning."""

from __future__ import annotations

import pytest

from runs.environment import DeprecatedSetting, setting
from runs.operations.roots import Roots


def test_the_new_name_is_read_and_wins_over_the_old_one():
    env = {"BENCHFLOW_JOBS_DIR": "/new", "BENCH_JOBS_DIR": "/old"}
    assert setting("BENCHFLOW_JOBS_DIR", "jobs", env) == "/new"
    assert setting("BENCHFLOW_JOBS_DIR", "jobs", {}) == "jobs"


def test_an_old_name_is_read_with_a_warning_naming_the_new_one(tmp_path):
    with pytest.warns(
        DeprecatedSetting, match="BENCH_TASK_ROOTS is deprecated.*BENCHFLOW_TASK_ROOTS"
    ):
        roots = Roots.from_env({"BENCH_TASK_ROOTS": str(tmp_path), "BENCHFLOW_JOBS_DIR": "j"})
    assert roots.task_roots == (tmp_path.resolve(),)
