"""`bench view` (one person's dashboard, on loopback) and `bench serve` (a team's, behind a login):
the ASGI app on daphne, with the index brought up to date from the folders it is given."""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
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

PATH is a job folder, several, or a jobs folder (default: ./jobs); several job folders open
the outcomes grid with those jobs side by side (pass@1 per column, the Pareto view). A folder
the index does not know yet (one copied from another machine, say) is indexed first.

--export out.html writes the jobs to one self-contained, redacted HTML file instead of serving
them: the outcomes grid, the charts, every trial with its model calls; CSS and JS inline, no
request to any server, so it opens from a disk or an email attachment.

The index is SQLite under $BENCHFLOW_HOME (~/.local/share/benchflow-site), or PostgreSQL with DATABASE_URL."""

SERVE_DESCRIPTION = """\
Serve the dashboard for a team: every job in the index, behind Django's login (an anonymous
visitor is sent to the login page). List the host names people reach it by in
BENCHFLOW_ALLOWED_HOSTS (comma-separated; a websocket's Origin must be the page's own scheme, host
and port). Set BENCHFLOW_SECRET_KEY for sessions that survive a restart across machines; without
it a key is made once and kept in $BENCHFLOW_HOME (0700). With BENCHFLOW_REDIS_URL, live updates
come through Redis (channels-redis); without it, the server watches the index's event table.

TLS: its own (--tls-cert and --tls-key, PEM files), or a reverse proxy's in front of a server on
127.0.0.1 (set BENCHFLOW_FORWARDED_PROTO_HEADER=X-Forwarded-Proto, and
BENCHFLOW_FORWARDED_FOR_HEADER=X-Forwarded-For for the client's address; the proxy must set both,
not pass on the client's). Under TLS: cookies only over HTTPS, HSTS (BENCHFLOW_HSTS_S), plain HTTP
redirected. Binding beyond loopback over plain HTTP sends passwords in clear: refused unless
--insecure. --check runs Django's deployment checks for these settings and exits.

Logins: 5 failures lock a user name (20 an address) for 30 s, doubling, up to 15 min; sessions
end after BENCHFLOW_SESSION_IDLE_S seconds without a request (default 8 hours).

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
    view.add_argument(
        "--confirm",
        action="store_true",
        help="open one job with an Approve/Reject bar; print DECISION: approved (exit 0) or "
        "DECISION: rejected (exit 3) and stop",
    )
    view.add_argument(
        "--export",
        type=Path,
        metavar="OUT.html",
        help="write the jobs to one self-contained, redacted HTML file instead of serving them",
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
    serve.add_argument("--tls-cert", type=Path, metavar="PEM", help="serve HTTPS: the certificate")
    serve.add_argument("--tls-key", type=Path, metavar="PEM", help="serve HTTPS: its private key")
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="allow plain HTTP beyond loopback (passwords and session cookies go in clear)",
    )
    serve.add_argument(
        "--check",
        action="store_true",
        help="run Django's deployment checks (manage.py check --deploy) for this set-up and exit",
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


def _escape(value: str) -> str:
    """A value in a Twisted endpoint string (':' and '\\' are its separators)."""
    return value.replace("\\", "\\\\").replace(":", "\\:")


def endpoint(host: str, port: int, tls: tuple[Path, Path] | None = None) -> str:
    """The Twisted endpoint daphne listens on: TCP, or TLS with a certificate and key."""
    if tls is None:
        return f"tcp:port={port}:interface={_escape(host)}"
    cert, key = tls
    return (
        f"ssl:port={port}:interface={_escape(host)}:privateKey={_escape(str(key.resolve()))}"
        f":certKey={_escape(str(cert.resolve()))}"
    )


def serve(host: str, port: int, tls: tuple[Path, Path] | None = None) -> None:
    """Run the ASGI app on daphne until Ctrl-C."""
    from django.conf import settings

    from benchflow_site.asgi import application
    from benchflow_site.daphne_server import BenchServer

    forwarded = settings.BENCHFLOW_FORWARDED_FOR_HEADER or None
    BenchServer(
        application=application,
        endpoints=[endpoint(host, port, tls)],
        signal_handlers=True,
        verbosity=0,
        # behind a proxy: the client's address (and scheme) as the proxy says
        proxy_forwarded_address_header=forwarded,
        proxy_forwarded_proto_header=(settings.BENCHFLOW_FORWARDED_PROTO_HEADER or None)
        if forwarded
        else None,
    ).run()


def _export(paths: list[Path], out: Path) -> int:
    """`bench view ... --export OUT.html`: the jobs under `paths`, indexed, written to one file."""
    if out.suffix.lower() not in (".html", ".htm"):
        raise UserError(f"--export {out}: name an .html file (the export is one HTML page)")
    if not out.parent.is_dir():
        raise UserError(f"--export {out}: the folder {out.parent} does not exist; make it first")
    os.environ["BENCHFLOW_VIEW_ROOT"] = os.pathsep.join(str(p.resolve()) for p in paths)
    setup_django()
    _index(paths)
    from runs.index.folder import job_folders
    from runs.models import Job
    from viewer.export import export

    folders = [str(j.resolve()) for p in paths for j in job_folders(p)]
    by_path = {job.path: job for job in Job.objects.filter(path__in=folders)}
    jobs = [by_path[f] for f in folders if f in by_path]
    if not jobs:
        raise UserError(f"no job folder in {', '.join(map(str, paths))}: nothing to export")
    done = export(jobs, out)
    print(
        f"Wrote {out}: {done.jobs} job(s), {done.trials} trial(s), {done.bytes / 1e6:.1f} MB, "
        f"{done.redacted} secret(s) replaced with [REDACTED]. It opens in a browser with no server.",
        flush=True,
    )
    return 0


def outcomes_path(jobs: list[Path]) -> str:
    """The outcomes page over these job folders (several given one by one: `bench view A B C`)."""
    from viewer.queries import job_key_at

    return "outcomes/?" + "&".join(f"job={quote(job_key_at(j), safe='~')}" for j in jobs)


def run_view(args: argparse.Namespace) -> int:
    paths: list[Path] = args.paths or [Path("jobs")]
    for path in paths:
        if not path.is_dir():
            raise UserError(
                f"{path} is not a folder; pass a job folder, several, or a jobs folder "
                "(bench run writes them into ./jobs)"
            )
    if args.export is not None:
        return _export(paths, args.export)
    port = free_port("127.0.0.1", args.port)
    if isinstance(port, str):
        raise UserError(port)
    os.environ["BENCHFLOW_VIEW_ROOT"] = os.pathsep.join(str(p.resolve()) for p in paths)
    setup_django()
    _index(paths)
    from runs.index.folder import job_folders

    url = f"http://127.0.0.1:{port}/"
    jobs = [j for p in paths for j in job_folders(p)]
    given = [p.resolve() for p in paths]
    one = len(jobs) == 1 and jobs[0].resolve() in given
    if getattr(args, "confirm", False) and not one:
        raise UserError("--confirm needs one job folder; fix: bench view JOB_FOLDER --confirm")
    asked = None
    if one:
        from viewer.queries import job_key_at

        key = job_key_at(jobs[0])
        url += f"jobs/{quote(key)}/"
        if args.confirm:
            from viewer import confirm

            asked = confirm.ask(key, _stop_soon)
    elif len(jobs) > 1 and all(j.resolve() in given for j in jobs):
        url += outcomes_path(jobs)
    print(f"Viewing {', '.join(map(str, paths))} at {url} (Ctrl-C stops)", flush=True)
    if not args.no_browser:
        threading.Timer(0.5, webbrowser.open, (url,)).start()
    serve("127.0.0.1", port)
    if asked is None:
        return 0
    print(f"DECISION: {asked.decision or 'none (stopped before a decision)'}", flush=True)
    return 0 if asked.decision == "approved" else 3


def _stop_soon() -> None:
    """Stop the server once the decision's page has gone out (called from a view's thread)."""
    from twisted.internet import reactor

    reactor.callFromThread(reactor.callLater, 0.5, reactor.stop)  # type: ignore[attr-defined]


def _tls(args: argparse.Namespace) -> tuple[Path, Path] | None:
    if args.tls_cert is None and args.tls_key is None:
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise UserError("--tls-cert and --tls-key go together: the certificate and its key")
    for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        try:
            with open(path, "rb") as fh:
                fh.read(1)
        except OSError as exc:
            raise UserError(f"{flag} {path}: cannot read it ({exc.strerror})") from None
    from OpenSSL import SSL

    try:
        context = SSL.Context(SSL.TLS_SERVER_METHOD)
        context.use_certificate_chain_file(str(args.tls_cert))
        context.use_privatekey_file(str(args.tls_key))
        context.check_privatekey()
    except SSL.Error as exc:
        raise UserError(
            f"--tls-cert {args.tls_cert} / --tls-key {args.tls_key}: not a PEM certificate and "
            f"its private key ({exc})"
        ) from None
    return args.tls_cert, args.tls_key


def _loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _deploy_check() -> int:
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    try:
        call_command("check", deploy=True, fail_level="WARNING")
    except SystemCheckError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


def run_serve(args: argparse.Namespace) -> int:
    for path in args.index:
        if not path.is_dir():
            raise UserError(f"{path} is not a folder; --index takes a job folder or a jobs folder")
    tls = _tls(args)
    proxied = bool(os.environ.get("BENCHFLOW_FORWARDED_PROTO_HEADER", "").strip())
    if tls is None and not proxied and not _loopback(args.host) and not args.insecure:
        raise UserError(
            f"--host {args.host} over plain HTTP would send passwords and session cookies in "
            "clear to anyone on the network; fix: --tls-cert and --tls-key, or bind 127.0.0.1 "
            "behind a TLS proxy with BENCHFLOW_FORWARDED_PROTO_HEADER set, or --insecure to "
            "accept it"
        )
    os.environ["BENCHFLOW_LOGIN_REQUIRED"] = "1"
    os.environ["BENCHFLOW_TLS"] = "1" if tls else ""
    os.environ.pop("BENCHFLOW_VIEW_ROOT", None)
    setup_django()
    if args.check:
        return _deploy_check()
    port = free_port(args.host, args.port)
    if isinstance(port, str):
        raise UserError(port)
    _index(args.index)
    from django.contrib.auth import get_user_model

    from runs.operations.roles import ensure_roles

    ensure_roles()
    if not get_user_model().objects.exists():
        print("No user yet: make one with `bench user add NAME --role admin`.", flush=True)
    if tls is None and not proxied and not _loopback(args.host):
        print(
            "WARNING: plain HTTP beyond loopback (--insecure): passwords and session cookies "
            "cross the network in clear.",
            file=sys.stderr,
            flush=True,
        )
    scheme = "https" if tls else "http"
    print(
        f"Serving the dashboard at {scheme}://{args.host}:{port}/ (login required; Ctrl-C stops)",
        flush=True,
    )
    serve(args.host, port, tls)
    return 0
