"""`bench index PATH`: build or refresh the database index of job folders from their files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchflow_site.django_setup import setup_django
from runs.problems import UserError

DESCRIPTION = """\
Read job folders (the record) into the database index the dashboard reads: jobs, trials,
attempts with their usage, budgets and timing. A job folder Harbor (0.2x) wrote is read as Harbor
graded it: its trials' rewards, agent, model, phase times and exceptions, the job's state and
times from its result.json. Safe to run again: rows are refreshed, never
doubled, and attempts whose folders are gone are dropped. bench view does this by itself for a
folder the index does not know yet."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "index",
        help="build or refresh the database index from job folders",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "path", type=Path, metavar="PATH", help="a job folder, or a jobs folder holding several"
    )
    return p


def run(args: argparse.Namespace) -> int:
    path: Path = args.path
    if not path.is_dir():
        raise UserError(f"{path} is not a folder; pass a job folder or a jobs folder")
    setup_django()
    from runs.index.folder import index_path

    reports = index_path(path, say=print)
    if not reports:
        print(
            f"bench: no job folder in {path} (a job folder has evaluation.json, a Harbor "
            "job's config.json, or <task>__<id>/result.json)",
            file=sys.stderr,
        )
        return 2
    return 0
