"""Refresh docs/screenshots/: run the new user's browser test (tests/e2e/test_new_user_browser.py:
launch, watch, compare, outcomes, export in Chromium at 1280x900) and copy the pages it kept.

    PYTHONPATH=. .venv/bin/python scripts/screenshots.py

Needs what the test needs: the Docker engine and Debian's chromium."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEST = "tests/e2e/test_new_user_browser.py"


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="benchflow-shots-") as tmp:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "--basetemp",
                tmp,
                TEST,
            ],
            cwd=REPO,
        )
        if done.returncode != 0:
            print("the browser test failed: no screenshot copied", file=sys.stderr)
            return done.returncode
        # pytest's "...current" folder links to the run's own: each page once, by name
        shots = sorted({p.name: p for p in Path(tmp).glob("*/shots/*.png")}.values())
        out = REPO / "docs" / "screenshots"
        out.mkdir(parents=True, exist_ok=True)
        for shot in shots:
            shutil.copyfile(shot, out / shot.name)
        print(f"copied {len(shots)} screenshots into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
