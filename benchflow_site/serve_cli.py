"""`bench view` (one person's dashboard, on loopback) and `bench serve` (a team's, behind a login):
the ASGI app on daphne, with the index brought up to date from the folders it is given."""

from __future__ import annotations

import argparse
import errno
import os
import socket
import threading
import webbrowser
from pathlib import Path
from typing import Any
from urllib.parse import quote

from benchflow_site.django_setup import setup_django
from runs.problems import UserError

VIEW_DESCRIPTION = """\
Serve the dashboard for job folders on 127.0.0.1 (loopback only) and open it in the browser:
the jobs, each job's progress, budgets, trials and outcomes, each trial's attempts, usage,
model calls, logs and files, and a page comparing two jobs. Pages update live while a bench
run (in another terminal) writes to the same index: no reload.

PATH is a job folder, several, or a jobs folder (default: ./jobs); a folder the index does not
know yet (one copied from another machine, say) is indexed first. The index is SQLite under
$BENCHFLOW_HOME (~/.local/share/benchflow-site), or PostgreSQL with DATABASE_URL."""

SERVE_DESCRIPTION = """\
Serve the dashboard for a team: every job in the index, behind Django's login (an anonymous
visitor is sent to the login page). Bind beyond loopback with --host 0.0.0.0, and list the host
names people reach it by in BENCHFLOW_ALLOWED_HOSTS (comma-separated; also the websocket origin
check). Set BENCHFLOW_SECRET_KEY for sessions that survive a restart across machines; without it
a key is made once and kept in $BENCHFLOW_HOME. With BENCHFLOW_REDIS_URL, live updates come
through Redis (channels-redis); without it, the server watches the index's event table.

Users: bench user add NAME --role viewer|operator|admin. Operators launch, cancel, resume, rerun
and regrade from the pages: set BENCHFLOW_TASK_ROOTS (the task folders a launch may use, separated
by ':') and BENCHFLOW_JOBS_DIR (where jobs go, default ./jobs); paths outside them are refused."""


def add_parsers(subparsers: Any) -> None:
    view = subparsers.add_parser(
        "view",
        help="browse job folders in the browser (live dashboard on 127.0.0.1)",
        description=VIEW_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    view.add_argument(
        "paths",
        type=Path,
        nargs="*",
        metavar="PATH",
        help="job folders or a jobs folder (default: jobs)",
    )
    view.add_argument(
        "--port", type=int, default=8888, help="port on 127.0.0.1 (default 8888; 0: any free one)"
    )
    view.add_argument(
        "--no-browser", action="store_true", help="do not open a browser (servers, scripts)"
    )
    serve = subparsers.add_parser(
        "serve",
        help="the dashboard for a team, behind a login",
        description=SERVE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument(
        "--port", type=int, default=8000, help="port (default 8000; 0: any free one)"
    )
    serve.add_argument(
        "--index",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="job folders or a jobs folder to index before serving (repeat)",
    )


def free_port(host: str, port: int) -> int | str:
    """The port to serve on, or the reason it cannot be had (a port in use, an address that
    is not this machine's)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return (
                    f"port {port} on {host} is in use (another bench view or server?); "
                    "pick another with --port N, or --port 0 for any free one"
                )
            return f"cannot listen on {host}:{port}: {exc.strerror}"
        return int(probe.getsockname()[1])


def _needs_index(job_dir: Path) -> bool:
    from runs.index.folder import is_live
    from runs.models import Job

    job = Job.objects.filter(path=str(job_dir.resolve())).only("state", "n_attempts").first()
    if job is None:
        return True
    if job.state == "running":
        return not is_live(job_dir)  # a run that died leaves "running" rows: read the folder
    with os.scandir(job_dir) as entries:
        folders = sum(1 for e in entries if "__" in e.name and not e.name.startswith("."))
    return folders != job.n_attempts or (
        (job_dir / "summary.json").is_file() and job.state not in ("finished", "interrupted")
    )


def _index(paths: list[Path]) -> None:
    from runs.index.folder import index_job, job_folders

    for path in paths:
        for job_dir in job_folders(path):
            if _needs_index(job_dir):
                print(f"Indexing {job_dir} …", flush=True)
                index_job(job_dir)


def serve(host: str, port: int) -> None:
    """Run the ASGI app on daphne until Ctrl-C."""
    from daphne.endpoints import build_endpoint_description_strings
    from daphne.server import Server

    from benchflow_site.asgi import application

    Server(
        application=application,
        endpoints=build_endpoint_description_strings(host=host, port=port),
        signal_handlers=True,
        verbosity=0,
    ).run()


def run_view(args: argparse.Namespace) -> int:
    paths: list[Path] = args.paths or [Path("jobs")]
    for path in paths:
        if not path.is_dir():
            raise UserError(
                f"{path} is not a folder; pass a job folder, several, or a jobs folder "
                "(bench run writes them into ./jobs)"
            )
    port = free_port("127.0.0.1", args.port)
    if isinstance(port, str):
        raise UserError(port)
    os.environ["BENCHFLOW_VIEW_ROOT"] = os.pathsep.join(str(p.resolve()) for p in paths)
    setup_django()
    _index(paths)
    from runs.index.folder import job_folders

    url = f"http://127.0.0.1:{port}/"
    jobs = [j for p in paths for j in job_folders(p)]
    if len(jobs) == 1 and jobs[0].resolve() in [p.resolve() for p in paths]:
        from viewer.queries import job_key_at

        url += f"jobs/{quote(job_key_at(jobs[0]))}/"
    print(f"Viewing {', '.join(map(str, paths))} at {url} (Ctrl-C stops)", flush=True)
    if not args.no_browser:
        threading.Timer(0.5, webbrowser.open, (url,)).start()
    serve("127.0.0.1", port)
    return 0


def run_serve(args: argparse.Namespace) -> int:
    for path in args.index:
        if not path.is_dir():
            raise UserError(f"{path} is not a folder; --index takes a job folder or a jobs folder")
    port = free_port(args.host, args.port)
    if isinstance(port, str):
        raise UserError(port)
    os.environ["BENCHFLOW_LOGIN_REQUIRED"] = "1"
    os.environ.pop("BENCHFLOW_VIEW_ROOT", None)
    setup_django()
    _index(args.index)
    from django.contrib.auth import get_user_model

    from runs.operations.roles import ensure_roles

    ensure_roles()
    if not get_user_model().objects.exists():
        print("No user yet: make one with `bench user add NAME --role admin`.", flush=True)
    print(
        f"Serving the dashboard at http://{args.host}:{port}/ (login required; Ctrl-C stops)",
        flush=True,
    )
    serve(args.host, port)
    return 0
