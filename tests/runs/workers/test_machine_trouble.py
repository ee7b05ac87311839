"""Errors of the machine rather than of a task: found in an exception or what caused it, and the
machine counted well again once they are gone."""

from __future__ import annotations

import errno
from pathlib import Path

from runs.jobfolder import machine_error, machine_well


def test_a_full_disk_is_found_in_what_caused_an_error():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/jobs/x/result.json")
        except OSError as inner:
            raise RuntimeError("the attempt's result could not be written") from inner
    except RuntimeError as outer:
        found = machine_error(outer)
    assert found is not None and found.errno == errno.ENOSPC
    assert machine_error(ExceptionGroup("two", [ValueError(), OSError(errno.EROFS, "ro")]))
    assert machine_error(OSError(errno.ENOENT, "missing")) is None
    assert machine_error(ValueError("no")) is None


def test_a_machine_is_well_again_when_its_trouble_is_gone(tmp_path: Path):
    assert machine_well(tmp_path, errno.EROFS)  # writable
    assert machine_well(tmp_path, errno.EMFILE)  # a file opens
    assert machine_well(tmp_path, errno.ENOSPC) is not None


def test_a_full_disk_whose_failed_folder_was_moved_away_is_still_full(tmp_path: Path):
    import os
    import subprocess

    import pytest

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        # the lost attempt's folder that failed is gone: its nearest parent is on the same disk
        assert not machine_well(small / "alpha__x" / "agent", errno.ENOSPC)
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)
