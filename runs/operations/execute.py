"""Where an operation's work is done, out of the request: in the process a ProcessLauncher starts
(`bench _operate KIND`, the Request on stdin), whose output the launcher sends to the job folder's
console.log, as `bench run` prints it on a console."""

from __future__ import annotations

import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from runs.gateway import ModelGateway
from runs.operations.control import OPERATION_PID
from runs.operations.process import Request
from runs.operations.run import run_job
from runs.problems import UserError
from runs.spec import spec_from_payload
from runs.workers.broker import Broker


class Stopped(Exception):
    """SIGTERM before the run took over its handling (while its agent was being installed)."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signal.Signals(signum).name)


def execute(
    request: Request,
    *,
    setup_django: Callable[[], None],
    gateway: ModelGateway | None = None,
    broker: Broker | None = None,
) -> int:
    """Run one operation to its end; returns the exit code `bench run` (or `bench regrade`) would."""
    job_dir = Path(request.job_dir)
    setup_django()
    from runs.operations import shown

    previous = signal.signal(signal.SIGTERM, _stop)
    code = 1
    why = "failed"
    try:
        code = _dispatch(request, setup_django, gateway, broker)
        why = "ended"
    except UserError as exc:
        print(f"bench: {exc}", file=sys.stderr, flush=True)
        code = exc.exit_code
    except (Stopped, KeyboardInterrupt) as exc:
        print(f"Stopped ({exc}) before the run began.", file=sys.stderr, flush=True)
        code, why = 143, "stopped"
    except Exception:  # noqa: BLE001 - a bug of ours: its traceback in the console log
        traceback.print_exc()
        print("bench: unexpected error; this is a bug in BenchFlow site", file=sys.stderr)
    finally:
        sys.stdout.flush()
        signal.signal(signal.SIGTERM, previous)
        (job_dir / OPERATION_PID).unlink(missing_ok=True)
    if request.kind == "run":
        shown.ended(job_dir, why)
    return code


def _dispatch(
    request: Request,
    setup_django: Callable[[], None],
    gateway: ModelGateway | None,
    broker: Broker | None = None,
) -> int:
    if request.kind == "run":  # its attempts on workers when they are up (--workers auto)
        spec = spec_from_payload(request.body)
        return run_job(
            spec, setup_django=setup_django, gateway=gateway, broker=broker, on_server=True
        )
    if request.kind == "reviewer":  # bench run's automatic rubric review (runs/review/auto.py)
        body = dict(request.body)
        on_server = bool(body.pop("on_server", False))
        return run_job(
            spec_from_payload(body),
            setup_django=setup_django,
            gateway=gateway,
            on_server=on_server,
            indexed=False,
        )
    if request.kind == "regrade":
        from runs.operations.regrade import run_regrade

        return run_regrade(Path(request.job_dir), request.body, by=request.by, gateway=gateway)
    if request.kind == "review":
        from runs.operations.review import run_review

        return run_review(
            Path(request.job_dir), request.body, setup_django=setup_django, gateway=gateway
        )
    raise UserError(f"unknown operation {request.kind!r}")
