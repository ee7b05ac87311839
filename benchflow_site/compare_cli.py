"""`bench results --compare JOB_A JOB_B`: two jobs paired by trial, and whether the difference is real."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from runs.problems import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("JOB_A", "JOB_B"),
        help="compare two jobs paired by trial: reward, cost and tokens with deltas, the mean "
        "reward difference with its 95%% confidence interval (paired bootstrap) and McNemar's "
        "test on pass/fail (--json for the benchflow.comparison document)",
    )


def run(args: argparse.Namespace) -> int:
    from runs.results import job_documents
    from runs.results.compare import (
        compare,
        comparison_document,
        render_comparison,
        sides_from_job,
    )
    from runs.results.load import load_job

    a, b = args.compare
    for job in (a, b):
        if not job_documents.is_job_folder(job):
            raise UserError(job_documents.not_a_job(job))
    if args.csv:
        raise UserError("--compare prints a table or, with --json, a document; not CSV")
    result = compare(sides_from_job(load_job(a)), sides_from_job(load_job(b)))
    if args.json:
        print(json.dumps(comparison_document(result, str(a), str(b)), indent=2))
    else:
        sys.stdout.write(render_comparison(result, str(a), str(b)) + "\n")
    return 0
