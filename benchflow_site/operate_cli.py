"""`bench _operate KIND` (hidden): the process a ProcessLauncher starts for an operation from the
dashboard; the Request arrives on stdin (secret values never on the command line)."""

from __future__ import annotations

import sys
from typing import Any

from benchflow_site.broker import broker
from benchflow_site.django_setup import setup_django

ARGV = [sys.executable, "-m", "benchflow_site.cli", "_operate"]


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("_operate")  # no help: argparse then leaves it out of the list
    p.add_argument("kind", choices=["run", "regrade", "review", "reviewer"])
    c = subparsers.add_parser("_coordinate")  # a worker starts it for a job handed to the fleet
    c.add_argument("job", type=int)
    c.add_argument("fence", type=int)
    c.add_argument("--adopted", action="store_true")


def run(args: Any) -> int:
    from benchflow_site.gateway import ProxyGateway
    from runs.operations.execute import execute
    from runs.operations.process import Request

    request = Request.from_json(sys.stdin.read())
    return execute(request, setup_django=setup_django, gateway=ProxyGateway(), broker=broker())


def coordinate(args: Any) -> int:
    setup_django()
    from benchflow_site.gateway import ProxyGateway
    from runs.operations.fleet import coordinate as run_coordinated

    return run_coordinated(
        args.job,
        args.fence,
        args.adopted,
        setup_django=setup_django,
        gateway=ProxyGateway(),
        broker=broker(),
    )
