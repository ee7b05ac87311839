"""A job coordinated on the worker fleet (with Redis set): a launch from the browser or `bench run
--detach` hands the job to a worker rather than to a process beside the web server.

`FleetLauncher.start` writes the job's Coordination row (its settings, no secret value), seals its
secret --agent-env values in Redis (renewed by whoever coordinates, as a dispatcher's are), and
sends `benchflow.coordinate` to the workers' queue; every worker also looks for jobs no live
coordinator holds every 2 s, so a lost message or a lapsed lease costs seconds. The worker that
takes the job starts `bench _coordinate ID FENCE` (`coordinate` here): the job's run as `bench
_operate run` runs it, under a lease it renews and a fencing number; a job taken from a lost
coordinator is resumed as `bench eval resume` would (attempts still running on workers adopted,
lost ones run again).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from runs.databases import reconnecting
from runs.gateway import ModelGateway
from runs.jobs.preflight import resume_spec
from runs.operations.control import FLEET_MARK, lock_holder
from runs.operations.process import Launcher, Request
from runs.problems import UserError
from runs.secrets import secret_keys
from runs.spec import spec_from_payload, spec_payload
from runs.workers import coordination
from runs.workers.broker import Broker
from runs.workers.config import coordination_lease_s, queue, redis_url
from runs.workers.sealed import Sealed, SealError, deployment_key, seal, ttl_s, unseal


def sealed_request_key(pk: int) -> str:
    return f"benchflow:coordination:{pk}:sealed"


def _redis() -> Any:
    import redis

    return redis.Redis.from_url(redis_url(), socket_connect_timeout=2, socket_timeout=5)


REVIEWER_SECRET = "reviewer:"  # a sealed --reviewer-agent-env value's key (no env name has ":")


def _split(body: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The settings with the secret --agent-env (and --reviewer-agent-env) values out, and those
    values (a reviewer's under REVIEWER_SECRET + its name)."""
    public = dict(body)
    secret: dict[str, str] = {}
    for field, prefix in (("agent_env", ""), ("reviewer_agent_env", REVIEWER_SECRET)):
        env = {str(k): str(v) for k, v in (body.get(field) or {}).items()}
        hidden = set(secret_keys(env))
        public[field] = {k: v for k, v in env.items() if k not in hidden}
        secret.update({prefix + k: env[k] for k in hidden})
    return public, secret


def _unsplit(secret: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The sealed values back: the agent's, and the reviewer's."""
    reviewer = {
        k.removeprefix(REVIEWER_SECRET): v
        for k, v in secret.items()
        if k.startswith(REVIEWER_SECRET)
    }
    agent = {k: v for k, v in secret.items() if not k.startswith(REVIEWER_SECRET)}
    return agent, reviewer


def seal_secrets(pk: int, secret: Mapping[str, str]) -> None:
    """The job's secret values for its next coordinator, sealed, with a time limit."""
    if not secret:
        return
    _redis().set(
        sealed_request_key(pk), seal(Sealed(agent_env=dict(secret)), deployment_key()), ex=ttl_s()
    )


def _redis_retrying(call: Callable[[Any], Any], for_s: float = 60.0) -> Any:
    """`call(client)`, tried again while Redis is away or paused (a restart, CLIENT PAUSE) for
    about `for_s`; then its error."""
    import time

    import redis

    deadline = time.monotonic() + for_s
    while True:
        try:
            return call(_redis())
        except (redis.RedisError, OSError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(1.0)


def open_secrets(pk: int) -> dict[str, str] | None:
    """The job's sealed secret values; None when Redis holds none (or they do not open)."""
    token = _redis_retrying(lambda client: client.get(sealed_request_key(pk)))
    if token is None:
        return None
    try:
        return dict(unseal(token, deployment_key(), max_age_s=ttl_s()).agent_env)
    except SealError:
        return None


class FleetLauncher:
    """Launcher: a run (launch, resume, rerun) to the worker fleet; a regrade (short, no
    coordinator) to `local`, as before."""

    def __init__(self, sender: Callable[[int, str], None], local: Launcher) -> None:
        self.sender, self.local = sender, local

    def start(self, request: Request) -> str:
        if request.kind != "run":
            return self.local.start(request)
        job_path = str(Path(request.job_dir).resolve())
        public, secret = _split(request.body)
        pk = coordination.submit(job_path, queue(), {**public, "by": request.by})
        if pk is None:
            raise UserError(
                f"{Path(job_path).name} is coordinated by a worker now; cancel it first"
            )
        seal_secrets(pk, secret)
        (Path(job_path) / FLEET_MARK).write_text(f"coordination {pk}\n")
        try:
            self.sender(pk, queue())
        except Exception:  # noqa: BLE001 - Redis away: the workers' sweep takes the job anyway
            pass
        return f"coordination {pk} on the worker fleet"


def fleet_up() -> bool:
    """Redis set and a worker up on the queue: a launch goes to the fleet."""
    if not redis_url():
        return False
    from runs.workers.leases import live_workers

    return bool(live_workers(queue()))


class Heartbeat:
    """The coordinator's lease, renewed every sixth of its length from a thread of its own; a
    fence that moved on stops this process at once (it writes nothing more), a drain hands the job
    over and stops it (its attempts on workers go on: the next coordinator adopts them)."""

    def __init__(self, pk: int, fence: int, secret: Mapping[str, str]) -> None:
        self.pk, self.fence, self.secret = pk, fence, dict(secret)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-coordination", daemon=True)
        self._sealing: threading.Thread | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        from django.db import close_old_connections

        lease_s = coordination_lease_s()
        while not self._stop.wait(lease_s / 6):
            sent_at = time.monotonic()
            try:
                close_old_connections()
                said = coordination.renew(self.pk, self.fence, lease_s)
            except Exception:  # noqa: BLE001 - the database away: the next beat tries again
                continue
            if said == "fenced":
                print(
                    "bench: another coordinator took this job over; this one stops here",
                    file=sys.stderr,
                    flush=True,
                )
                coordination.fenced_exit()
            coordination.renewed(sent_at)
            if said == "drain":
                coordination.release(self.pk, self.fence)
                print(
                    "bench: this machine is drained; the job moves to another worker",
                    file=sys.stderr,
                    flush=True,
                )
                coordination.fenced_exit()
            if self.secret and not (self._sealing and self._sealing.is_alive()):
                # from a thread of its own: a renewal never waits on Redis (paused, or away)
                self._sealing = threading.Thread(
                    target=self._seal, name="bench-coordination-seal", daemon=True
                )
                self._sealing.start()

    def _seal(self) -> None:
        try:
            seal_secrets(self.pk, self.secret)
        except Exception:  # noqa: BLE001 - Redis away for a moment: next beat
            pass


def _spec_body(pk: int, taken_over: bool) -> tuple[str, dict[str, Any], dict[str, str]]:
    job_path, body = reconnecting(coordination.request_of, pk)
    secret = open_secrets(pk)
    if secret is None:
        secret = {}
    body.pop("by", None)
    job_dir = Path(job_path)
    agent, reviewer = _unsplit(secret)
    if taken_over and (job_dir / "evaluation.json").is_file():
        # as `bench eval resume` would: the recorded settings, the secret values given again
        spec = resume_spec(job_dir, agent, None, None, reviewer)
        return job_path, spec_payload(spec), secret
    body["agent_env"] = {**(body.get("agent_env") or {}), **agent}
    body["reviewer_agent_env"] = {**(body.get("reviewer_agent_env") or {}), **reviewer}
    spec_from_payload(body)  # a bad body fails here, not in the run
    return job_path, body, secret


def coordinate(
    pk: int,
    fence: int,
    adopted: bool,
    *,
    setup_django: Callable[[], None],
    gateway: ModelGateway | None,
    broker: Broker | None,
) -> int:
    """`bench _coordinate ID FENCE [--adopted]`: run the job under the fence a worker took it
    with; `adopted`: taken from a coordinator that was lost (or drained), so resumed."""
    import os

    from runs.operations.execute import execute

    setup_django()
    if not reconnecting(coordination.started, pk, fence, os.getpid()):
        print("bench: the job was taken over before this coordinator started", file=sys.stderr)
        return coordination.FENCED_EXIT
    coordination.hold(pk, fence, coordination_lease_s())
    # renewing from now on: reading the job's sealed values waits while Redis is paused or away,
    # and a lease that lapsed meanwhile would hand the job on, again and again
    beat = Heartbeat(pk, fence, {})
    beat.start()
    handovers = reconnecting(coordination.where, reconnecting(coordination.request_of, pk)[0])
    try:
        job_path, body, secret = _spec_body(pk, adopted)
    except UserError as exc:
        beat.stop()
        print(f"bench: {exc}", file=sys.stderr, flush=True)
        coordination.end(pk, fence, "failed")
        return exc.exit_code
    beat.secret = dict(secret)  # sealed again with each beat, for the next coordinator
    last = handovers.handovers[-1] if adopted and handovers and handovers.handovers else None
    if last is not None:
        print(coordination.handover_line(last), flush=True)
    code = 1
    try:
        while True:
            _wait_for_the_lock(Path(job_path), last)
            code = execute(
                Request("run", job_path, body, str(body.get("by") or "")),
                # it sets Django up again, on a connection PostgreSQL may have dropped meanwhile
                # (restarted while this one read the job's values or waited for its lock)
                setup_django=lambda: reconnecting(setup_django),
                gateway=gateway,
                broker=broker,
            )
            if code == 0 or lock_holder(Path(job_path)) is None:
                break
            # another process took the job's lock between the look and the run (a coordinator
            # whose fence moved on, which its next beat stops): this one waits for it again
            print("another process took the job's lock first; waiting for it again", flush=True)
    finally:
        beat.stop()
        reconnecting(coordination.end, pk, fence, _outcome(code))
    return code


def _wait_for_the_lock(job_dir: Path, handover: dict[str, Any] | None) -> None:
    """An earlier coordinator that is alive but late (its machine froze, or was cut off) still
    holds the job's lock. This one waits for it, holding the lease, as long as a lease lasts: it
    may wake, find its fence moved on and stop, or die with its machine. Then, when the holder is
    the coordinator this one took over from (`handover`), its lock is replaced and this one goes
    on: fenced, that one writes nothing more when it wakes. Any other holder (a person's `bench
    eval resume`) is waited for."""
    from runs.jobfolder import JobLock

    said, since = False, time.monotonic()
    while (holder := lock_holder(job_dir)) is not None:
        if not said:
            print(
                f"waiting for the earlier coordinator (pid {holder.pid} on {holder.host}) to let "
                "go of the job's lock",
                flush=True,
            )
            said = True
        lost = handover is not None and (handover.get("from"), handover.get("pid")) == (
            holder.host,
            holder.pid,
        )
        if lost and time.monotonic() - since >= coordination_lease_s():
            JobLock.replace(job_dir)
            print(
                f"the earlier coordinator (pid {holder.pid} on {holder.host}) still holds the "
                "job's lock; it lost the job and writes nothing more: going on without it",
                flush=True,
            )
            return
        time.sleep(1.0)


def _outcome(code: int) -> str:
    return {0: "finished", 1: "finished with errors", 143: "cancelled", 130: "cancelled"}.get(
        code, f"exit {code}"
    )
