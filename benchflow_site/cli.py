"""The `bench` command: parse, check, call one domain function, print. No traceback for a user mistake."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from benchflow_site import (
    __version__,
    compare_cli,
    export_cli,
    index_cli,
    operate_cli,
    regrade_cli,
    review_cli,
    serve_cli,
    user_cli,
    worker_cli,
)
from benchflow_site.broker import broker
from benchflow_site.django_setup import setup_django
from runs import spec as run_spec
from runs.problems import UserError

USAGE_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench", description="Run AI-agent benchmarks in Docker sandboxes."
    )
    parser.add_argument("--version", action="version", version=f"benchflow-site {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run an agent on a folder of tasks",
        description="Run an agent on a folder of tasks.",
    )
    run_spec.add_run_arguments(run)

    add_detach(run)

    ev = sub.add_parser("eval", help="BenchFlow 0.8 spellings: eval run | eval resume")
    ev_sub = ev.add_subparsers(dest="eval_command", metavar="VERB")
    eval_run = ev_sub.add_parser("run", help="same as bench run")
    run_spec.add_run_arguments(eval_run)
    add_detach(eval_run)
    resume = ev_sub.add_parser("resume", help="finish a job with its recorded settings")
    resume.add_argument("job", type=Path)
    resume.add_argument(
        "--agent-env",
        "--ae",
        action="append",
        type=run_spec.argparse_type(run_spec.env_pair),
        default=[],
        metavar="KEY=VALUE",
    )
    resume.add_argument(
        "--reviewer-agent-env",
        action="append",
        type=run_spec.argparse_type(run_spec.env_pair),
        default=[],
        metavar="KEY=VALUE",
        help="the reviewer's env values again (evaluation.json keeps only their names)",
    )
    resume.add_argument("-j", "--concurrency", type=run_spec.argparse_type(run_spec.positive_int))
    resume.add_argument("--quiet", action="store_true")
    resume.add_argument(
        "--redo",
        action="append",
        default=[],
        metavar="TRIAL",
        help="run this trial again though it has a reward (repeat); its earlier attempts stay",
    )

    cancel = sub.add_parser(
        "cancel",
        help="stop a running job as SIGTERM does (here, or on the machine that runs it)",
        description="Stop the run of a job as Ctrl-C or SIGTERM on `bench run` does: its running "
        "trials are stopped, their sandboxes removed and a partial summary written. A run on "
        "another machine sharing the jobs folder is asked through the job folder; a job handed to the "
        "worker fleet that no worker has taken yet is cancelled, and no worker starts it.",
    )
    cancel.add_argument("job", type=Path, metavar="JOB", help="the job folder")

    doctor = sub.add_parser(
        "doctor", help="check the Docker engine, base images, agent layers and disk space"
    )
    doctor.add_argument(
        "--fix",
        action="store_true",
        help="start the engine, build missing base images, remove agent layers no longer used "
        "(old CLI versions, or over task images since rebuilt)",
    )
    doctor.add_argument(
        "--uv",
        action="append",
        default=[],
        metavar="VERSION",
        help="with --fix, also build a stand-in for ghcr.io/astral-sh/uv:VERSION (what tasks "
        "COPY --from to get uv) from uv's wheel on PyPI (repeat for several)",
    )

    tasks = sub.add_parser("tasks", help="tasks check: each task's problems, before any job")
    tasks_sub = tasks.add_subparsers(dest="tasks_command", metavar="VERB")
    check = tasks_sub.add_parser(
        "check",
        help="check task folders: config, instruction, tests, symlinks, compose file, images",
        description="Check each task folder as bench run would, task by task, and whether its FROM "
        "images (and a compose file's sidecar images) can be had on this machine. Every Harbor "
        "0.26 and BenchFlow task.toml key is accepted; one this runner cannot honour in full is "
        "listed as a warning saying what will differ (the task still runs). An "
        "environment/docker-compose.yaml is merged by Docker Compose as a run merges it; a key "
        "that cannot be given to a sandbox here (host ports, fixed container names, the host's "
        "network or devices, host paths) is a problem with its reason. Exit 1 when any task "
        "has a problem.",
    )
    check.add_argument(
        "tasks",
        type=Path,
        nargs="+",
        metavar="TASKS",
        help="a task folder, a folder of tasks, or a folder holding tasks/",
    )
    check.add_argument(
        "--allow-env",
        action="append",
        default=[],
        type=run_spec.argparse_type(run_spec.allowed_name),
        metavar="NAME",
        help="let a task's ${NAME} read NAME from this machine's environment, as bench run "
        "--allow-env does (repeat; also $BENCHFLOW_ALLOW_ENV)",
    )

    explain = sub.add_parser("explain", help="explain an error class (bench explain trial_budget)")
    explain.add_argument("error_class", metavar="CLASS", nargs="?")

    regrade_cli.add_parser(sub)
    review_cli.add_parser(sub)
    index_cli.add_parser(sub)
    export_cli.add_parser(sub)

    serve_cli.add_parsers(sub)
    user_cli.add_parser(sub)
    operate_cli.add_parser(sub)
    worker_cli.add_parser(sub)
    add_drain(sub)

    px = sub.add_parser(
        "proxy",
        help="run the model proxy on its own (prints its URL and a key)",
        description="Serve the model proxy: OpenAI Chat Completions, OpenAI Responses and "
        "Anthropic Messages, routed by model prefix (anthropic/, openai/, deepseek/, xiaomi/, "
        "openrouter/, openai-compatible/, mock/oracle, mock/script:FILE) with keys from this "
        "machine's environment.",
    )
    px.add_argument("--host", default="127.0.0.1")
    px.add_argument("--port", type=int, default=8642)
    px.add_argument(
        "--key",
        action="append",
        default=[],
        help="accept this client key (repeat); default: a new one",
    )
    px.add_argument("--log", type=Path, help="append every exchange to this JSONL file")

    results = sub.add_parser(
        "results",
        help="denominators and one row per trial of a job; --compare A B for two jobs",
    )
    results.add_argument("job", type=Path, nargs="?")
    compare_cli.add_arguments(results)
    results.add_argument("--attempts", choices=["best", "all"], default="best")
    fmt = results.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")
    return parser


def add_detach(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--detach",
        action="store_true",
        help="hand the job to the worker fleet (BENCHFLOW_REDIS_URL, a bench worker up): a worker "
        "coordinates it, another takes over if that machine is lost; prints the job and returns",
    )


def add_drain(sub: argparse._SubParsersAction) -> None:
    drain = sub.add_parser(
        "drain",
        help="move the jobs coordinated on a machine to other workers",
        description="Each job coordinated on HOST hands its coordination to a worker on another "
        "machine within seconds; its attempts running on workers go on. Lists the jobs moved.",
    )
    drain.add_argument("host", help="the machine's host name (as the job page names it)")


def cmd_drain(args: argparse.Namespace) -> int:
    setup_django()
    from runs.workers.coordination import drain

    moved = drain(args.host)
    if not moved:
        print(f"No job is coordinated on {args.host} now.")
        return 0
    for path in moved:
        print(f"{Path(path).name}: moves off {args.host}")
    return 0


def cmd_detach(args: argparse.Namespace) -> int:
    """`bench run --detach`: checked as a launch from the browser is, then handed to the fleet."""
    import getpass

    from runs.workers.config import queue, redis_url

    none_up = UserError(
        f"--detach hands the job to a bench worker, and none is up on queue {queue()} "
        "(BENCHFLOW_REDIS_URL); fix: start one (bench worker), or run without --detach"
    )
    if not redis_url():
        raise none_up
    setup_django()
    from benchflow_site.celery import send_coordination
    from benchflow_site.gateway import ProxyGateway
    from runs.operations import launch
    from runs.operations.fleet import FleetLauncher, fleet_up
    from runs.operations.process import ProcessLauncher
    from runs.problems import refusal

    if not fleet_up():
        raise none_up
    spec = run_spec.from_args(args)
    spec.tasks_dir = spec.tasks_dir.resolve()
    spec.jobs_dir = spec.jobs_dir.resolve()
    # the worker's cwd is not this one: a script named relative to here, made absolute
    if spec.agent.startswith("script:"):
        spec.agent = "script:" + str(Path(spec.agent[len("script:") :]).resolve())
    if (spec.model or "").startswith("mock/script:"):
        spec.model = "mock/script:" + str(Path(spec.model[len("mock/script:") :]).resolve())
    checked = launch.check_spec(spec, ProxyGateway())
    if not checked.ok:
        raise refusal(checked.problems)
    fleet = FleetLauncher(send_coordination, ProcessLauncher([*operate_cli.ARGV]))
    job_dir = launch.start(checked, fleet, by=getpass.getuser())
    print(f"{job_dir.name}: handed to the worker fleet ({job_dir})")
    print(f"  follow it: bench results {job_dir}   stop it: bench cancel {job_dir}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from benchflow_site.gateway import ProxyGateway
    from runs.operations.run import run_job

    if getattr(args, "detach", False):
        return cmd_detach(args)
    return run_job(
        run_spec.from_args(args),
        setup_django=setup_django,
        gateway=ProxyGateway(),
        broker=broker(),
    )


def cmd_resume(args: argparse.Namespace) -> int:
    from benchflow_site.gateway import ProxyGateway
    from runs.operations.run import resume_job

    return resume_job(
        args.job,
        dict(args.agent_env),
        args.concurrency,
        args.quiet,
        setup_django=setup_django,
        gateway=ProxyGateway(),
        redo=args.redo,
        broker=broker(),
        reviewer_env=dict(args.reviewer_agent_env),
    )


def cmd_cancel(args: argparse.Namespace) -> int:
    from runs.operations.control import cancel, cancelled_message, on_fleet

    if not args.job.is_dir():
        raise UserError(f"{args.job} is not a job folder (it does not exist)")
    if on_fleet(args.job):
        setup_django()  # its Coordination row says whether a worker holds it yet
    print(cancelled_message(args.job.name, cancel(args.job)))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from runs.doctor import run_doctor

    if args.uv and not args.fix:
        raise UserError(
            "--uv builds a stand-in image: give it with --fix (bench doctor --fix --uv 0.8.15)"
        )
    return run_doctor(fix=args.fix, uv=tuple(args.uv))


def cmd_explain(args: argparse.Namespace) -> int:
    from runs import errors

    if not args.error_class:
        print("Error classes: " + ", ".join(c.name for c in errors.ERROR_CLASSES))
        print("Run bench explain CLASS for one of them.")
        return 0
    if errors.explained(args.error_class) is None:
        hints = errors.suggest(args.error_class)
        raise UserError(
            f"unknown error class {args.error_class!r}"
            + (f"; did you mean '{hints[0]}'?" if hints else "")
            + " Run bench explain with no class to list them."
        )
    print(errors.explain_text(args.error_class))
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    from runs.host_env import host_env, setting_problems
    from runs.sandboxes.engine import engine_running
    from runs.task_check import check_tasks
    from runs.tasks.load import TaskError

    if args.tasks_command != "check":
        raise UserError("bench tasks needs a verb: bench tasks check TASKS")
    if problems := setting_problems():
        raise UserError("; ".join(problems))
    host = host_env(args.allow_env)
    client = None
    if engine_running():
        from runs.sandboxes.docker import connect

        client = connect()
    else:
        print(
            "Docker engine not running: FROM images not checked (bash scripts/setup.sh starts it)"
        )
    reports = []
    for root in args.tasks:
        try:
            reports += check_tasks(root, client, host)
        except TaskError as exc:
            raise UserError("; ".join(str(p) for p in exc.problems)) from None
    for report in reports:
        print(f"{'ok  ' if report.ok else 'FAIL'} {report.path.name}")
        for line in report.problems:
            print(f"     {line}")
        for line in report.warnings:
            print(f"     warning: {line}")
        for line in report.notes:
            print(f"     note: {line}")
    bad = sum(not r.ok for r in reports)
    warned = sum(bool(r.warnings) for r in reports if r.ok)
    print(
        f"Checked {len(reports)} task(s): {len(reports) - bad} ok"
        + (f" ({warned} with warnings: they run, with the differences said)" if warned else "")
        + f", {bad} with problems"
    )
    return 1 if bad else 0


def cmd_results(args: argparse.Namespace) -> int:
    from runs.results import job_documents
    from runs.results.load import load_job
    from runs.results.render import render_results

    if args.compare:
        return compare_cli.run(args)
    if args.job is None:
        raise UserError("bench results needs a job folder (or --compare JOB_A JOB_B)")
    if not job_documents.is_job_folder(args.job):
        raise UserError(job_documents.not_a_job(args.job))
    job = load_job(args.job, attempts=args.attempts)
    fmt = "json" if args.json else "csv" if args.csv else "table"
    sys.stdout.write(render_results(job, fmt=fmt, attempts=args.attempts).rstrip("\n") + "\n")
    if fmt == "table":
        for line in coordination_lines(args.job):
            print(line)
    return 0


def coordination_lines(job_dir: Path) -> list[str]:
    """Where a job handed to the worker fleet is coordinated, and each handover (nothing for a
    job `bench run` coordinated in its own process: the database is not opened then)."""
    from runs.operations.control import on_fleet

    if not on_fleet(job_dir):
        return []
    setup_django()
    from runs.workers.coordination import where

    found = where(str(job_dir.resolve()))
    return found.lines() if found is not None else []


def cmd_proxy(args: argparse.Namespace) -> int:
    from proxy.server import run_standalone

    run_standalone(args.host, args.port, args.key or None, str(args.log) if args.log else None)
    return 0


def _crash(exc: Exception) -> int:
    """A bug of ours: the traceback goes to a crash log, the user gets one line saying so."""
    import time
    import traceback

    log_dir = Path(
        os.environ.get("BENCHFLOW_LOG_DIR", Path.home() / ".cache" / "benchflow-site" / "logs")
    )
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    log.write_text("".join(traceback.format_exception(exc)))
    print(
        f"bench: unexpected error ({type(exc).__name__}: {exc}). This is a bug in BenchFlow site, not in your "
        f"task or setup; the traceback is in {log}",
        file=sys.stderr,
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {
        "index": index_cli.run,
        "export": export_cli.run,
        "run": cmd_run,
        "cancel": cmd_cancel,
        "doctor": cmd_doctor,
        "explain": cmd_explain,
        "tasks": cmd_tasks,
        "results": cmd_results,
        "regrade": regrade_cli.run,
        "review": review_cli.run,
        "proxy": cmd_proxy,
        "view": serve_cli.run_view,
        "serve": serve_cli.run_serve,
        "user": user_cli.run,
        "_operate": operate_cli.run,
        "_coordinate": operate_cli.coordinate,
        "worker": worker_cli.run,
        "drain": cmd_drain,
    }
    try:
        if args.command == "eval":
            if args.eval_command == "run":
                return cmd_run(args)
            if args.eval_command == "resume":
                return cmd_resume(args)
            parser.parse_args(["eval", "--help"])
        if args.command not in handlers:
            parser.print_help()
            return USAGE_ERROR
        return handlers[args.command](args)
    except UserError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:
        return _crash(exc)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
