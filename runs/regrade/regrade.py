"""bench regrade: score a job's saved work again with each task's current verifier, in a fresh sandbox.

result.json is never changed. Every regrade is appended to `<attempt>/regrade.json` (who, when,
why, what changed) with its verifier output in `<attempt>/regrade/<id>/`; the run is summed up in
`<job>/regrade-summary.json`.
"""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import os
import secrets
import shutil
import time
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from runs.agents.base import Agent
from runs.events import Event, Regraded, RegradeStarted
from runs.gateway import ModelGateway
from runs.host_env import HostEnv, host_env
from runs.jobfolder import JobLock, JobLocked, new_job_name, read_object, write_json
from runs.problems import UserError
from runs.regrade.report import RegradeReport, TrialRow, change_of
from runs.regrade.separate import grade_from_artifacts, separate_choice
from runs.results.attempt_folder import result_sha256
from runs.results.attempts import Attempt, best_attempt, outcome_of, read_attempts, reward_of
from runs.results.job_documents import read_job
from runs.sandboxes.docker import Sandbox, SandboxFactory, connect
from runs.sandboxes.files import FileEntry
from runs.secrets import redact_tree, secret_values
from runs.tasks.load import (
    Task,
    TaskError,
    environment_digest,
    find_task_dirs,
    folder_digest,
    load_task,
    task_digest,
)
from runs.tasks.verifier_env import VerifierEnvironment, verifier_environment
from runs.trials.environment_setup import set_up
from runs.trials.judge import JudgeAccess, RegradeJudgeUse, judged, needs_judge
from runs.trials.verifier import TESTS_DIR, VerifierOutcome, run_verifier
from runs.trials.workspace import EVIDENCE, MANIFEST, WORKSPACE, check_manifest

Emit = Callable[[Event], None]
NO_OUTPUTS = "no saved outputs; rerun with bench run --save-outputs to make it regradable"
MULTI_STEP = "bench regrade does not rescore multi-step trials"
SUMMARY = "regrade-summary.json"
# reference 10.2's block fields, in its order, then ours
BLOCK_FIELDS = (
    "id created_at by reason task_dir sandbox original_task_digest task_digest task_changed "
    "verifier_digest original_rewards original_reward new_rewards new_reward status verifier_error "
    "change error verifier_exit_code workdir output_dir duration_s verifier_usage"
).split()


def regraded(row: TrialRow, regrade_id: str | None) -> Regraded:
    return Regraded(
        trial_name=row.trial,
        task_name=row.task,
        rollout_name=row.attempt,
        status=row.status,
        change=row.change,
        reward_before=row.original_reward,
        reward_after=row.new_reward,
        message=row.message,
        regrade_id=regrade_id,
    )


def append_regrade(
    existing: Mapping[str, Any] | None, original: dict[str, Any], block: dict[str, Any]
) -> dict[str, Any]:
    """regrade.json after one more regrade: the first `original` kept, `block` appended and latest."""
    prior = dict(existing or {})
    regrades = [*(prior.get("regrades") or []), block]
    return {
        **prior,
        "original": prior.get("original") or original,
        "regrades": regrades,
        "latest": block,
    }


@dataclass
class _Plan:
    attempt: Attempt
    dir: Path  # the attempt's folder
    task: Task
    manifest: dict[str, Any]
    config: dict[str, Any]
    separate: VerifierEnvironment | None = None  # graded from its artifacts/ in a fresh container


def _read(path: Path) -> dict[str, Any]:
    return read_object(path) or {}


def _find_task(name: str, roots: list[Path]) -> Path | None:
    for root in roots:
        try:
            found = [d for d in find_task_dirs(root) if d.name == name]
        except (TaskError, OSError):
            continue
        if found:
            return found[0]
    return None


def _manifest_problem(attempt_dir: Path, manifest: Mapping[str, Any]) -> str | None:
    """What check_manifest does not cover: paths leaving the workspace, and files it does not list."""
    listed = {str(e.get("path")) for e in manifest.get("files") or []}
    if any(p.startswith("/") or ".." in Path(p).parts for p in listed):
        return "the manifest names a path outside the workspace"
    root = attempt_dir / EVIDENCE / WORKSPACE
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            rel = (Path(dirpath) / name).relative_to(root).as_posix()
            if rel not in listed:
                return f"saved file {rel} is not in the manifest"
    return None


def _plan_trial(
    attempts: list[Attempt], settings: Mapping[str, Any], tasks_dir: Path | None, host: HostEnv
) -> tuple[Attempt, _Plan | str]:
    """The attempt to grade again and its current task, or why the trial is refused: the best
    attempt with saved outputs, or for a task whose verifier is separate, the best attempt with
    the artifacts it declares."""
    saved = [a for a in attempts if (Path(a.path) / EVIDENCE / MANIFEST).is_file()]
    chosen = best_attempt(saved or attempts)
    task = _current_task(chosen, settings, tasks_dir, host)
    if isinstance(task, Task) and (env := verifier_environment(task)) is not None:
        chosen, why = separate_choice(attempts, task)
        config = _read(Path(chosen.path) / "config.json")
        return chosen, why or _Plan(chosen, Path(chosen.path), task, {}, config, env)
    if not saved:
        return chosen, NO_OUTPUTS
    if chosen.typed is not None and chosen.typed.steps:
        return chosen, MULTI_STEP
    if isinstance(task, str):
        return chosen, task
    if task.steps:
        return chosen, MULTI_STEP
    manifest = _read(Path(chosen.path) / EVIDENCE / MANIFEST)
    try:
        mismatch = check_manifest(Path(chosen.path)) or _manifest_problem(
            Path(chosen.path), manifest
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        mismatch = f"evidence/manifest.json is unreadable: {exc!r}"
    if mismatch:
        return chosen, f"saved outputs do not match their manifest ({mismatch}); not regraded"
    config = _read(Path(chosen.path) / "config.json")
    return chosen, _Plan(chosen, Path(chosen.path), task, manifest, config)


def _current_task(
    chosen: Attempt, settings: Mapping[str, Any], tasks_dir: Path | None, host: HostEnv
) -> Task | str:
    """The trial's task as its folder is now, or why it cannot be had."""
    config = _read(Path(chosen.path) / "config.json")
    if tasks_dir is not None:
        roots = [tasks_dir]
    else:
        roots = [Path(p) for p in (settings.get("tasks_dir"), config.get("task_path")) if p]
    folder = _find_task(chosen.task, roots)
    if folder is None:
        where = " or ".join(str(r) for r in roots) or "the job's records"
        return f"task folder no longer exists (looked for {chosen.task} in {where}); pass --tasks-dir DIR"
    try:
        return load_task(folder, host)
    except TaskError as exc:
        return f"task folder {folder} does not load: {exc.problems[0]}"


def plan_regrade(
    job_dir: Path,
    tasks_dir: Path | None,
    only: Collection[str] | None = None,
    *,
    on_server: bool = False,
) -> tuple[list[_Plan], list[TrialRow]]:
    """Every trial of the job (or those named in `only`): a plan to regrade it, or a refused row.
    Reads only; writes nothing. The tasks read the variables the job's run allowed (`on_server`:
    from `bench serve`, only those the admin allows; runs/host_env.py)."""
    groups: dict[str, list[Attempt]] = {}
    for attempt in read_attempts(job_dir):
        groups.setdefault(attempt.trial_name, []).append(attempt)
    if not groups:
        raise UserError(f"{job_dir} is not a job folder (no <task>__<id>/ attempt folders in it)")
    if only is not None:
        unknown = sorted(set(only) - set(groups))
        if unknown:
            raise UserError(f"{job_dir.name} has no trial {unknown[0]!r} with an attempt")
        groups = {name: a for name, a in groups.items() if name in only}
    settings = read_job(job_dir).settings
    host = host_env(settings.get("allow_env") or [], on_server=on_server)
    plans: list[_Plan] = []
    refused: list[TrialRow] = []
    for trial, attempts in sorted(groups.items()):
        chosen, plan = _plan_trial(attempts, settings, tasks_dir, host)
        if isinstance(plan, str):
            refused.append(
                TrialRow(
                    trial,
                    chosen.task,
                    chosen.folder,
                    "refused",
                    original_reward=chosen.reward,
                    message=plan,
                )
            )
        else:
            plans.append(plan)
    return plans, refused


def _workspace_files(plan: _Plan) -> dict[str, FileEntry]:
    """The saved workspace as the manifest lists it, each file's bytes checked again as read."""
    root = plan.dir / EVIDENCE / WORKSPACE
    files: dict[str, FileEntry] = {}
    for entry in plan.manifest["files"]:
        data = (root / entry["path"]).read_bytes()
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise ValueError(
                f"saved file {entry['path']} changed after it was checked against the manifest"
            )
        files[entry["path"]] = FileEntry(data, int(str(entry["mode"]), 8) & 0o7777)
    return files


def _swap_in(sandbox: Sandbox, workdir: str, files: dict[str, FileEntry]) -> None:
    """Replace the image's workdir with the saved one: what the agent deleted stays deleted."""
    base = workdir.rstrip("/")
    if base:  # never empty / itself
        script = 'mkdir -p "$0" && cd "$0" && rm -rf -- ./* ./.[!.]* ./..?*'
        res = sandbox.exec(["sh", "-c", script, base], user="0")
        if res.exit_code != 0:
            raise RuntimeError(f"could not empty {workdir} in the sandbox (exit {res.exit_code})")
    sandbox.put_files({f"{base}/{rel}": entry for rel, entry in files.items()})


def _republish_logs(attempt_dir: Path, out_dir: Path) -> None:
    """The original run's agent/ and artifacts/ under the regrade's /logs, for verifiers that read them."""
    for sub in ("agent", "artifacts"):
        if (attempt_dir / sub).is_dir():
            shutil.copytree(attempt_dir / sub, out_dir / sub, symlinks=True, dirs_exist_ok=True)


@dataclass
class _Run:
    job_dir: Path
    report: RegradeReport
    factory: SandboxFactory
    emit: Emit
    by: str
    live: set[Sandbox] = field(default_factory=set)
    started: set[str] = field(default_factory=set)
    judges: ModelGateway | None = None  # started: the tasks' verifiers that ask for a model


def _original(plan: _Plan, original_digest: str | None) -> dict[str, Any]:
    result = plan.attempt.result or {}
    return {
        "attempt": plan.attempt.folder,
        "rewards": result.get("rewards"),
        "reward": reward_of(result),
        "outcome": outcome_of(plan.attempt.result),
        "verifier_error": result.get("verifier_error"),
        "task_digest": original_digest,
        "finished_at": result.get("finished_at"),
        "result_sha256": result_sha256(plan.dir),
    }


def _record(
    run: _Run,
    plan: _Plan,
    block: dict[str, Any],
    outcome: VerifierOutcome | None,
    error: str | None,
) -> None:
    """Finish the block, append it to regrade.json and add the trial's row to the report."""
    new_rewards = outcome.rewards if outcome and block["status"] == "complete" else None
    block["new_rewards"] = new_rewards
    block["new_reward"] = reward_of({"rewards": new_rewards})
    block["verifier_error"] = outcome.error if outcome and block["status"] == "complete" else None
    block["verifier_exit_code"] = outcome.exit_code if outcome else None
    block["error"] = error
    block["change"] = change_of(block["original_reward"], block["new_reward"], block["status"])
    path = plan.dir / "regrade.json"  # one writer: regrade_job holds the job's lock
    existing = _read(path) if path.exists() else None
    if path.exists() and not existing:  # unreadable: keep it aside rather than lose its history
        os.replace(path, path.with_name(f"regrade.json.unreadable-{block['id']}"))
    write_json(
        path, append_regrade(existing, _original(plan, block["original_task_digest"]), block)
    )
    row = TrialRow(
        plan.attempt.trial_name,
        plan.attempt.task,
        plan.attempt.folder,
        block["status"],
        block["change"],
        block["original_reward"],
        block["new_reward"],
        error or block["verifier_error"],
    )
    run.report.rows.append(row)
    run.emit(regraded(row, run.report.regrade_id))


async def _regrade_one(run: _Run, plan: _Plan, gate: asyncio.Semaphore) -> None:
    """Fresh sandbox from the current task, saved workspace swapped in, verifier run, sandbox removed."""
    async with gate:
        run.started.add(plan.attempt.trial_name)
        loop = asyncio.get_running_loop()
        rid, task = run.report.regrade_id, plan.task
        out_dir = plan.dir / "regrade" / rid
        staging = run.job_dir / ".staging" / f"{plan.dir.name}__regrade-{rid}"
        result = plan.attempt.result or {}
        original_digest = result.get("task_digest") or plan.config.get("task_digest")
        current_digest = task_digest(task)
        block: dict[str, Any] = dict.fromkeys(BLOCK_FIELDS) | {
            "id": rid,
            "created_at": run.report.created_at,
            "by": run.by,
            "reason": run.report.reason,
            "task_dir": str(task.path),
            "original_task_digest": original_digest,
            "task_digest": current_digest,
            "task_changed": None if original_digest is None else original_digest != current_digest,
            "verifier_digest": folder_digest(task.tests_dir),
            "original_rewards": result.get("rewards"),
            "original_reward": plan.attempt.reward,
            "status": "failed",
            "output_dir": f"regrade/{rid}",
        }
        sandbox: Sandbox | None = None
        outcome: VerifierOutcome | None = None
        error: str | None = None
        t0 = time.monotonic()
        use = RegradeJudgeUse()
        secrets_given = secret_values(task.sandbox.env, task.verifier.env, task.compose_env)

        def judge_in(made: Sandbox) -> AbstractAsyncContextManager[JudgeAccess | None]:
            """A regrade's verifier that asks for a model gets a token of its own, as a run's."""
            return judged(
                run.judges,
                sandbox=made,
                attempt_dir=out_dir,
                verifier=task.verifier,
                secrets=secrets_given,
                result=use,
            )

        try:
            if plan.separate is not None:
                image, outcome = await grade_from_artifacts(
                    run.factory,
                    task,
                    plan.separate,
                    plan.dir,
                    out_dir,
                    name=f"{plan.dir.name}-regrade-{rid}",
                    staging=staging,
                    live=run.live,
                    judged=judge_in,
                )
                block["sandbox"] = {"provider": "docker", "image": image, "mode": "separate"}
                if outcome.error_category == "verifier_infra":
                    error = outcome.error
                else:
                    block["status"] = "complete"
                return
            _republish_logs(plan.dir, out_dir)
            files = await loop.run_in_executor(None, _workspace_files, plan)
            image = await loop.run_in_executor(
                None,
                run.factory.images.image_for,
                task,
                environment_digest(task),
                out_dir / "build.log",
            )
            tests = staging / "tests"
            tests.mkdir(parents=True, exist_ok=True)
            mounts = {TESTS_DIR: (tests, "rw")}
            sandbox = await loop.run_in_executor(
                None,
                lambda: run.factory.create(
                    task, image, f"{plan.dir.name}-regrade-{rid}", logs_dir=out_dir, mounts=mounts
                ),
            )
            run.live.add(sandbox)
            block["sandbox"] = {"provider": "docker", "sandbox_id": sandbox.id, "image": image}
            await loop.run_in_executor(None, run.factory.start, sandbox)
            # what the task's setup commands start, and its healthcheck, as before the run's
            # agent (no agent here, so no skills)
            await loop.run_in_executor(None, set_up, sandbox, task, Agent(), out_dir)
            workdir = str(plan.manifest.get("workdir") or task.sandbox.workdir or "")
            if not workdir:
                workdir = await loop.run_in_executor(None, run.factory.images.image_workdir, image)
            block["workdir"] = workdir
            await loop.run_in_executor(None, _swap_in, sandbox, workdir, files)
            async with judge_in(sandbox) as judge:
                outcome = await run_verifier(
                    sandbox, task, out_dir, staged_tests=tests, judge=judge
                )
            if outcome.error_category == "verifier_infra":  # ours, not the task's: no verdict
                error = outcome.error
            else:
                block["status"] = "complete"
        except asyncio.CancelledError:
            block["status"], error = "interrupted", "interrupted before the verifier finished"
            raise
        except Exception as exc:  # noqa: BLE001 - image builds, docker and files alike: no verdict came
            error = f"{type(exc).__name__}: {exc}"
        finally:
            if sandbox is not None:
                try:
                    await asyncio.shield(loop.run_in_executor(None, sandbox.remove))
                    run.live.discard(sandbox)
                except Exception as exc:  # noqa: BLE001 - recorded; the regrade still has its verdict
                    error = error or f"sandbox removal failed: {exc}"
            shutil.rmtree(staging, ignore_errors=True)
            # the tests' output, with the secrets of the task's env replaced as in a run
            own = task.verifier.environment.env if task.verifier.environment else {}
            redact_tree(
                out_dir,
                secret_values(task.sandbox.env, task.verifier.env, own, task.compose_env),
            )
            block["duration_s"] = round(time.monotonic() - t0, 1)
            if use.verifier_usage is not None:  # a judge's calls, counted apart from the run's
                block["verifier_usage"] = use.verifier_usage.to_json()
            _record(run, plan, block, outcome, error)


async def _regrade_all(
    run: _Run, plans: list[_Plan], concurrency: int, gateway: ModelGateway | None
) -> None:
    gate = asyncio.Semaphore(concurrency)
    if gateway is not None and any(needs_judge(p.task) for p in plans):
        await gateway.start()
        run.judges = gateway
    try:
        await asyncio.gather(*(_regrade_one(run, p, gate) for p in plans))
    finally:
        if run.judges is not None:
            await run.judges.stop()


def regrade_job(
    job_dir: Path,
    *,
    tasks_dir: Path | None = None,
    reason: str | None = None,
    concurrency: int = 4,
    client: Any = None,
    emit: Emit = lambda _event: None,
    by: str | None = None,
    trials: Collection[str] | None = None,
    on_server: bool = False,
    gateway: ModelGateway | None = None,
) -> RegradeReport:
    """Regrade every regradable trial of a job (or only those named in `trials`); `emit` gets each
    refusal and regraded trial as it happens (runs.events.Regraded). `by` is who asked (this
    machine's user by default). `on_server`: as plan_regrade's. `gateway`: the model proxy, for
    the verifiers that ask for a model (runs/trials/judge.py); without it their key is empty.

    Raises UserError when `job_dir` is no job folder. Never changes result.json.
    """
    job_dir = Path(job_dir)
    if not job_dir.is_dir():
        raise UserError(f"{job_dir} is not a job folder (it does not exist)")
    created_at = datetime.now().isoformat(timespec="milliseconds")
    report = RegradeReport(job_dir, f"{new_job_name()}__{secrets.token_hex(4)}", created_at, reason)
    plans, refused = plan_regrade(
        job_dir, Path(tasks_dir) if tasks_dir else None, trials, on_server=on_server
    )
    report.rows.extend(refused)
    for row in refused:
        emit(regraded(row, None))
    if not plans:
        return report
    lock = JobLock(job_dir)  # a job still being run, or regraded by another process, is left alone
    try:
        lock.acquire()
    except JobLocked as exc:
        raise UserError(f"{exc}; regrade it once that has ended") from None
    try:
        run = _Run(
            job_dir,
            report,
            SandboxFactory(client or connect(), job_dir.name, str(job_dir.resolve())),
            emit,
            by or getpass.getuser(),
        )
    except BaseException:
        lock.release()
        raise
    emit(RegradeStarted(job_dir.name, report.regrade_id, len(plans), concurrency, reason, run.by))
    try:
        asyncio.run(_regrade_all(run, plans, max(1, concurrency), gateway))
    except KeyboardInterrupt:
        report.interrupted = True
    finally:
        for sandbox in list(run.live):  # only left when a second Ctrl-C cut the loop short
            try:
                sandbox.remove()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        for plan in plans:
            if plan.attempt.trial_name not in run.started:
                report.rows.append(
                    TrialRow(
                        plan.attempt.trial_name,
                        plan.attempt.task,
                        plan.attempt.folder,
                        "interrupted",
                        message="not started",
                    )
                )
        report.rows.sort(key=lambda r: r.trial)
        report.summary_path = job_dir / SUMMARY
        write_json(report.summary_path, report.to_dict())
        lock.release()
    return report
