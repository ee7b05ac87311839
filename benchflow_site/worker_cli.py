"""`bench worker`: a Celery worker on Redis that runs the attempts `bench run` dispatches.

Celery's threads pool hands each attempt to the worker's one event loop (runs.workers.runtime),
where it runs as in a `bench run`: attempts are Docker- and network-bound, and one process serves
the model proxy for all of them (each sandbox reaches it on its own 127.0.0.1).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
import warnings
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from runs.problems import UserError
from runs.spec import argparse_type, non_negative_int, positive_int

# how long a worker starting waits for Redis to answer: a machine that comes back while Redis
# restarts or is paused still gets its worker
REDIS_WAIT_S = 60.0


def wait_for_redis(url: str, wait_s: float, answers: Callable[[str], str | None]) -> None:
    """Until Redis at `url` answers (`answers`: None, or why not), for up to `wait_s` seconds,
    saying once that it waits; then a UserError naming the fix."""
    deadline = time.monotonic() + wait_s
    said = False
    parts = urlsplit(url)
    if parts.password:  # the URL as said: its password is no one's to read in a log
        url = urlunsplit(parts._replace(netloc=parts.netloc.replace(parts.password, "***")))
    while (why := answers(url)) is not None:
        if time.monotonic() >= deadline:
            raise UserError(f"Redis at {url} does not answer ({why}); fix: start it", exit_code=1)
        if not said:
            print(
                f"bench worker: Redis at {url} does not answer ({why}); waiting up to "
                f"{wait_s:.0f} s for it",
                file=sys.stderr,
                flush=True,
            )
            said = True
        time.sleep(2.0)


def pass_name(text: str) -> str:
    """--pass-env NAME: a plain name that runs no code, and no model provider's key."""
    from runs.env_names import name_problem
    from runs.secrets import MODEL_KEY_VARS

    name = text.strip()
    if why := name_problem(name):
        raise ValueError(why)
    if name in MODEL_KEY_VARS:
        raise ValueError(
            f"{name} is a model provider's key: it stays with this worker's model proxy and never "
            "enters a sandbox"
        )
    return name


def passed_values(names: list[str]) -> dict[str, str]:
    """This worker's values of the names its admin passes; a name not set is a mistake."""
    unset = [n for n in names if n not in os.environ]
    if unset:
        raise UserError(
            f"--pass-env {unset[0]}: not set in this worker's environment; fix: export "
            f"{unset[0]}=... before `bench worker`, or drop the flag"
        )
    return {n: os.environ[n] for n in names}


def add_parser(sub: argparse._SubParsersAction) -> None:
    worker = sub.add_parser(
        "worker",
        help="run the attempts that bench run sends through Redis (scale-out)",
        description="Take attempts from the queue on BENCHFLOW_REDIS_URL and run them here in "
        "Docker, as bench run does in process. Needs the jobs and tasks folders at the same paths "
        "as where bench run runs, and the same database (DATABASE_URL) and secret key "
        "(BENCHFLOW_SECRET_KEY: a job's secrets reach its workers sealed with it) when on another "
        "machine. Nothing of this worker's environment enters a sandbox but what --pass-env names "
        "(and its Claude login where BENCHFLOW_ALLOW_CLAUDE_LOGIN=1). "
        "Waits up to a minute for Redis to answer as it starts. "
        "Logs a line for each attempt it starts and ends. Ctrl-C takes nothing more and lets "
        "the attempts it holds (running or prepared) finish; a second Ctrl-C stops them (they "
        "run again elsewhere).",
    )
    worker.add_argument(
        "--concurrency",
        "-c",
        type=argparse_type(positive_int),
        default=4,
        metavar="N",
        help="attempts this worker runs at once (its slots; default 4)",
    )
    worker.add_argument(
        "--prepare-ahead",
        type=argparse_type(non_negative_int),
        default=None,
        metavar="N",
        help="sandboxes this worker prepares ahead, each started the moment a slot frees "
        "(default: as many as its slots)",
    )
    worker.add_argument(
        "--queues",
        "-Q",
        default="",
        metavar="Q1,Q2",
        help="queues to take attempts from (default: $BENCHFLOW_QUEUE, else benchflow)",
    )
    worker.add_argument(
        "--name", default="", help="this worker's name on the dashboard (default: HOST:PID)"
    )
    worker.add_argument(
        "--pass-env",
        action="append",
        default=[],
        type=argparse_type(pass_name),
        metavar="NAME",
        help="give a job's secret --agent-env NAME this worker's own value when the job's own "
        "did not reach it (repeat); no other variable of this worker's environment enters a "
        "sandbox, and a model provider's key never does",
    )


def run(args: argparse.Namespace) -> int:
    from benchflow_site.django_setup import setup_django
    from runs.jobs.preflight import docker_client
    from runs.workers import config
    from runs.workers.channel import redis_answers

    url = config.redis_url()
    if not url:
        raise UserError(
            "bench worker needs a broker; fix: export BENCHFLOW_REDIS_URL=redis://HOST:6379/0 (the "
            "same as where bench run runs)"
        )
    wait_for_redis(url, REDIS_WAIT_S, redis_answers)
    queues = [q.strip() for q in (args.queues or config.queue()).split(",") if q.strip()]
    pass_env = passed_values(args.pass_env)
    client = docker_client()
    setup_django()

    from celery.exceptions import SecurityWarning

    from benchflow_site.celery import CeleryBroker, app
    from benchflow_site.gateway import ProxyGateway
    from runs.workers.report import WorkerReporter
    from runs.workers.runtime import WorkerRuntime

    host, pid = socket.gethostname(), os.getpid()
    name = args.name or f"{host}:{pid}"
    ahead = args.concurrency if args.prepare_ahead is None else args.prepare_ahead
    runtime = WorkerRuntime(
        name=name,
        slots=args.concurrency,
        ahead=ahead,
        broker=CeleryBroker(),
        queues=queues,
        client=client,
        gateway=ProxyGateway(),
        redis_url=url,
        emit=WorkerReporter(),
        pass_env=pass_env,
        coordinate_argv=[sys.executable, "-m", "benchflow_site.cli", "_coordinate"],
    )
    # Celery warns a root worker off; Docker's socket needs root here, and the worker runs no
    # pickled messages (JSON only)
    warnings.filterwarnings("ignore", category=SecurityWarning)
    runtime.start()
    from celery.signals import worker_ready, worker_shutting_down

    worker_ready.connect(lambda sender, **_kw: runtime.serving(sender), weak=False)
    worker_shutting_down.connect(lambda **_kw: runtime.draining(), weak=False)
    try:
        app.worker_main(
            [
                "--quiet",
                "worker",
                "--pool=threads",
                # a thread per attempt it holds: those running and those prepared ahead
                f"--concurrency={args.concurrency + ahead}",
                f"--queues={','.join(queues)}",
                f"--hostname=bench-{pid}@{host}",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=WARNING",
            ]
        )
    finally:
        runtime.stop()
    return 0
