"""Regrade one trial, several or a whole job from the dashboard (or the CLI): checked first, then
run out of the request; each regraded trial is an event on the live path and a block appended to
its regrade.json, as `bench regrade` does."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from runs import events as ev
from runs.gateway import ModelGateway
from runs.operations import control
from runs.operations.process import Launcher, Request
from runs.problems import Problem, UserError
from runs.regrade.regrade import plan_regrade, regrade_job
from runs.regrade.report import RegradeReport, console_line


def check_regrade(job_dir: Path, trials: Collection[str] | None) -> list[Problem]:
    """Why the regrade cannot start (the job is running; nothing named can be regraded), or []."""
    if control.is_running(job_dir):
        return [Problem("", f"{job_dir.name} is running; regrade it once it has ended")]
    try:
        plans, refused = plan_regrade(job_dir, None, trials, on_server=True)
    except UserError as exc:
        return [Problem("trials", str(exc))]
    if not plans:
        return [Problem("trials", f"{row.trial}: {row.message}") for row in refused] or [
            Problem("trials", "no trial to regrade")
        ]
    return []


def start_regrade(
    job_dir: Path,
    trials: Collection[str] | None,
    reason: str,
    launcher: Launcher,
    *,
    by: str = "",
) -> str:
    """Check, then hand the regrade to the launcher; raises UserError with the problems."""
    problems = check_regrade(job_dir, trials)
    if problems:
        raise UserError("; ".join(p.text for p in problems), problems=problems)
    body = {"trials": sorted(trials) if trials is not None else None, "reason": reason or None}
    return launcher.start(Request("regrade", str(job_dir), body, by))


def regrade(
    job_dir: Path,
    *,
    trials: Collection[str] | None = None,
    reason: str | None = None,
    tasks_dir: Path | None = None,
    concurrency: int = 4,
    by: str | None = None,
    say: Callable[[str], None] | None = None,
    on_server: bool = False,
    gateway: ModelGateway | None = None,
) -> RegradeReport:
    """The regrade itself, for `bench regrade` and the dashboard's operation alike: each trial's
    line to `say` as it ends (none with None), each event to the index, so the job's open pages
    show it. `on_server`: started from `bench serve` (the tasks read only what the admin allowed)."""
    from runs.index import Index  # the ORM needs Django set up: only here

    index = Index(job_dir)

    def printed(event: ev.Event) -> None:
        line = console_line(event)
        if line is not None and say is not None:
            say(line)

    bus = ev.Bus(printed, index)
    try:
        return regrade_job(
            job_dir,
            tasks_dir=tasks_dir,
            reason=reason,
            trials=trials,
            concurrency=concurrency,
            emit=bus.emit,
            by=by,
            on_server=on_server,
            gateway=gateway,
        )
    finally:
        index.close()


def run_regrade(
    job_dir: Path, body: Mapping[str, Any], *, by: str = "", gateway: ModelGateway | None = None
) -> int:
    """A regrade the dashboard started, in the operation's process: printed as `bench regrade`
    prints it; returns `bench regrade`'s exit code."""
    report = regrade(
        job_dir,
        trials=body.get("trials"),
        reason=body.get("reason"),
        concurrency=int(body.get("concurrency") or 4),
        by=by or None,
        say=lambda line: print(line, flush=True),
        on_server=True,
        gateway=gateway,
    )
    print(report.closing, flush=True)
    return report.exit_code
