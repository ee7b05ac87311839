"""Settings read from the environment under one prefix, BENCHFLOW_. A few were first named BENCH_:
those old names are still read, with a warning that names the new one. Every variable the code
reads is in docs/settings.md (tests/test_settings_table.py holds the table to the code)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping

# new name -> the old name still read
RENAMED = {
    "BENCHFLOW_TASK_ROOTS": "BENCH_TASK_ROOTS",
    "BENCHFLOW_JOBS_DIR": "BENCH_JOBS_DIR",
    "BENCHFLOW_LAUNCHER": "BENCH_LAUNCHER",
    "BENCHFLOW_PASSWORD": "BENCH_PASSWORD",
}


class DeprecatedSetting(FutureWarning):
    """An environment variable under its old name (shown to users: FutureWarning is)."""


def setting(name: str, default: str = "", environ: Mapping[str, str] | None = None) -> str:
    """The value of the BENCHFLOW_ variable `name`, else of its old BENCH_ name (with a warning),
    else `default`."""
    env = os.environ if environ is None else environ
    if name in env:
        return env[name]
    old = RENAMED.get(name)
    if old is not None and old in env:
        warnings.warn(
            f"{old} is deprecated and will stop being read; fix: set {name} instead",
            DeprecatedSetting,
            stacklevel=2,
        )
        return env[old]
    return default
