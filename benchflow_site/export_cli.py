"""`bench export JOB --format harbor OUT`: a copy of a job folder in another runner's layout."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DESCRIPTION = """\
Write a copy of a job folder in Harbor's layout (Harbor 0.2x), for Harbor's own tools. OUT is a
new folder named like the job; the job folder is only read.

What OUT holds:
  config.json         the job's JobConfig: agent and model, every task folder, repeats; from it
                      `harbor job resume -p OUT` plans the same trials and runs only those the
                      copy lacks
  result.json         the job's JobResult: started and finished, trials planned and done, the
                      mean of each reward key per agent and model
  <task>__<id>/       one folder per trial, from the trial's best attempt that wrote a result:
                      its files as they are (agent/, verifier/, ...), and Harbor's result.json
                      (rewards as verifier_result.rewards, every key; agent_info; phase times;
                      an error as exception_info), config.json and lock.json

`harbor view` lists OUT's trials with their rewards. A trial without a result (interrupted,
cancelled by a job cap, result.json corrupt) is left out and named."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "export",
        help="a copy of a job folder in Harbor's layout (harbor view, harbor job resume)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("job", type=Path, metavar="JOB", help="the job folder")
    p.add_argument(
        "--format", choices=["harbor"], required=True, help="the layout to write (harbor)"
    )
    p.add_argument("out", type=Path, metavar="OUT", help="a folder that does not exist yet")
    return p


def run(args: argparse.Namespace) -> int:
    from runs.export import export_harbor

    report = export_harbor(args.job, args.out)
    print(f"{report.out}: {report.trials} trials in Harbor's layout")
    for line in report.left_out:
        print(f"  left out: {line}")
    return 0
