"""`bench regrade JOB`: parse, call the regrade operation (runs/operations/regrade.py), print."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchflow_site.django_setup import setup_django
from runs.spec import argparse_type, positive_int

DESCRIPTION = """\
Score a job's saved work again with each task's CURRENT verifier, without running the agent.

For each trial's best attempt (the scored one, else the newest), a fresh sandbox is made from
the task folder as it is now, the workspace the agent left is checked byte for byte against its
manifest and swapped in, and tests/test.sh runs. result.json is never changed: each regrade is
appended to <attempt>/regrade.json (with its verifier output in <attempt>/regrade/<id>/) and the
run is summed up in <job>/regrade-summary.json.

The run must have kept each trial's final workspace: bench run --save-outputs
(alias --freeze-workspace). A task whose verifier is separate ([verifier] environment_mode =
"separate") is graded as in the run, from the artifacts the attempt kept, in a fresh container of
the verifier's image: no --save-outputs needed. Trials without saved outputs (or artifacts),
multi-step trials, trials whose task folder is gone and trials whose saved files no longer match
their manifest are refused."""

EPILOG = """\
examples:
  bench run tasks/half-life -a oracle --save-outputs
  # fix tasks/half-life/tests/test.sh, then:
  bench regrade jobs/2026-11-04__18-48-30 --reason "test.sh accepted any answer"

exit codes: 0 regraded, 1 a sandbox run failed, 2 nothing could be regraded (or not a job folder),
130 interrupted"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "job",
        type=Path,
        metavar="JOB",
        help="a job folder made by bench run --save-outputs (or of tasks with a separate verifier)",
    )
    p.add_argument(
        "--tasks-dir",
        type=Path,
        metavar="DIR",
        help="where the current task folders are (default: the job's recorded tasks dir, "
        "then each attempt's recorded task_path)",
    )
    p.add_argument(
        "--reason", metavar="TEXT", help="why you regrade; recorded in each regrade.json"
    )
    p.add_argument(
        "-j",
        "--concurrency",
        type=argparse_type(positive_int),
        default=4,
        metavar="N",
        help="sandboxes verifying at once (default 4)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print regrade-summary.json instead of one line per trial",
    )


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `regrade` to `bench`'s subcommands; the lead's cli.main dispatches "regrade" to run()."""
    p = subparsers.add_parser(
        "regrade",
        help="score saved work again with the tasks' current verifiers (needs bench run --save-outputs)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(handler=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Exit codes: 0 regraded, 1 a sandbox run failed, 2 nothing could be regraded (a UserError
    for no job folder reaches `bench`'s own exit-2 path)."""
    setup_django()  # each regraded trial is also an event in the index, for the open pages
    from benchflow_site.gateway import ProxyGateway
    from runs.operations.regrade import regrade

    report = regrade(
        args.job,
        tasks_dir=args.tasks_dir,
        reason=args.reason,
        concurrency=args.concurrency,
        say=None if args.json else print,
        gateway=ProxyGateway(),  # started only for a verifier that asks for a model
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    elif report.exit_code == 2:
        print(f"bench: {report.closing}", file=sys.stderr)
    else:
        print(report.closing)
    return report.exit_code
