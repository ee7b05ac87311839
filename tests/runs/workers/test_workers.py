"""Scale-out's own seams: where a job's attempts run (--workers), what a worker needs of a run
(settings, its own secrets), and the lines an operator reads."""

from __future__ import annotations

import io

import pytest

from runs import events as ev
from runs.problems import UserError
from runs.workers import leases
from runs.workers.choose import choose
from runs.workers.context import LeaseInfo, WorkerSetupError, worker_spec
from runs.workers.dispatch import finished_record
from runs.workers.report import WorkerReporter
from tests.conftest import said


class Broker:
    def enqueue(self, lease: int, queue: str) -> None: ...


UNREACHABLE = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def test_without_redis_a_job_runs_in_process_unless_workers_are_asked_for(monkeypatch):
    monkeypatch.delenv("BENCHFLOW_REDIS_URL", raising=False)
    assert choose("auto", Broker()) is None
    assert choose("off", Broker()) is None
    with pytest.raises(UserError, match="BENCHFLOW_REDIS_URL=redis://"):
        choose("on", None)


def test_an_unreachable_redis_is_refused_for_on_and_passed_over_for_auto(monkeypatch):
    monkeypatch.setenv("BENCHFLOW_REDIS_URL", UNREACHABLE)
    assert choose("auto", Broker()) is None
    with pytest.raises(UserError, match="does not answer") as caught:
        choose("on", Broker())
    assert caught.value.exit_code == 1


@pytest.mark.django_db
def test_auto_runs_on_workers_only_when_one_serves_the_queue(monkeypatch):
    from tests.e2e.scaleout import shared_redis

    monkeypatch.setenv("BENCHFLOW_REDIS_URL", shared_redis())
    monkeypatch.setenv("BENCHFLOW_QUEUE", "q-unit")
    assert choose("auto", Broker()) is None  # Redis answers, but no worker is up
    chosen = choose("on", Broker())  # attempts wait in the queue for one
    assert chosen is not None and chosen.workers == []
    leases.register_worker("host:7", 3, ["q-unit"])
    chosen = choose("auto", Broker())
    assert chosen is not None and chosen.workers == [("host:7", 3)]
    assert chosen.chosen() == ev.WorkersChosen("q-unit", ("host:7 (3 slots)",), 3, ())


def info(settings: dict) -> LeaseInfo:
    return LeaseInfo("u", "/j/x", "x", "hello", "/t/hello", 0, 1, "", 1, "/w", settings)


def test_a_worker_takes_the_runs_secret_values_sealed_else_only_what_its_admin_passes():
    from runs.workers.sealed import Sealed

    settings = {
        "tasks_dir": "tasks",
        "agent": "oracle",
        "agent_env": {"MODE": "fast"},
        "agent_env_secret_keys": ["API_TOKEN"],
        "concurrency": 8,
    }
    # the value the run was given wins over the worker's own
    sealed = Sealed(agent_env={"API_TOKEN": "typed-at-launch-1"})
    spec = worker_spec(info(settings), sealed, {"API_TOKEN": "the-workers-own-2"})
    assert spec.agent_env == {"MODE": "fast", "API_TOKEN": "typed-at-launch-1"}
    assert spec.concurrency == 8
    # with none sealed, the worker's own value only when its admin passes that name
    spec = worker_spec(info(settings), None, {"API_TOKEN": "the-workers-own-2"})
    assert spec.agent_env["API_TOKEN"] == "the-workers-own-2"
    with pytest.raises(WorkerSetupError, match="--pass-env API_TOKEN"):
        worker_spec(info(settings), Sealed(), {})


def test_what_a_cap_counts_of_an_attempt_that_finished_as_it_cancelled_it():
    result = {"timing": {"total": 4.5}, "agent_result": {"total_tokens": 2000, "cost_usd": 0.01}}
    record = finished_record(result, "budget reached: 5,000 tokens")
    assert record == {
        "total": 4.5,
        "cancelled": True,
        "cancelled_by": "budget reached: 5,000 tokens",
        "agent_result": {"total_tokens": 2000, "cost_usd": 0.01},
    }


def test_the_console_says_where_attempts_run_and_which_were_lost():
    lines = said(
        ev.WorkersChosen("benchflow", ("a:1 (2 slots)", "b:2 (2 slots)"), 4, ("t3",)),
        ev.WorkersChosen("benchflow", (), 0),
        ev.AttemptLost("t1", "t1__0000abcd", "a:1"),
    )
    assert lines == [
        "Attempts run on 2 worker(s) of queue benchflow, 4 slots: a:1 (2 slots), b:2 (2 slots); "
        "-j caps how many run at once",
        "Still running on workers from the earlier run (not run again): t3",
        "Attempts wait in queue benchflow until a worker takes them: no `bench worker` is up yet",
        "[t1] worker a:1 stopped renewing its lease: the attempt runs again on another worker "
        "(the lost run is in .lost/t1__0000abcd)",
    ]


def test_a_workers_log_names_each_trial_it_starts_and_ends():
    out = io.StringIO()
    log = WorkerReporter(out)
    log(ev.WorkerStarted("vm:12", 2, ("benchflow",), 1, 2))
    log(ev.WorkerAttemptStarted("vm:12", "2026-01-01__00-00-00", "hello", 1, "hello__1"))
    log(
        ev.WorkerAttemptEnded(
            "vm:12", "2026-01-01__00-00-00", "hello", "hello__1", "finished", 3.21, 1.0
        )
    )
    log(ev.WorkerAttemptEnded("vm:12", "j", "bye", "bye__2", "lost", 9.0))
    log(ev.WorkerAttemptEnded("vm:12", "j", "x", "", "failed", 0.1, error="no folder here"))
    lines = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]  # without the time
    assert lines == [
        "worker vm:12 up: 2 slot(s), 2 prepared ahead, queue(s) benchflow; removed 1 container(s) "
        "left by dead processes",
        "[vm:12] started hello (attempt 1, hello__1) of job 2026-01-01__00-00-00",
        "[vm:12] ended hello (hello__1): reward 1 after 3.2s",
        "[vm:12] ended bye (bye__2): its lease was taken back (it runs elsewhere; nothing of "
        "this run counts) after 9.0s",
        "[vm:12] ended x: could not run it: no folder here after 0.1s",
    ]


def test_worker_events_cross_processes_as_payloads():
    for event in (
        ev.AttemptLost("t", "t__1", "w"),
        ev.WorkersChosen("q", ("w (1 slots)",), 1, ("t",)),
        ev.WorkerAttemptEnded("w", "j", "t", "t__1", "finished", 1.0, 0.5, None),
    ):
        assert ev.from_payload(event.kind, event.to_payload()) == event


class SlotsOnly:
    """The part of a WorkerRuntime a prepared attempt's wait for a slot uses; the database says
    what `answers` holds for each start (FULL while the job's -j run elsewhere)."""

    def __init__(self, slots: int, answers: list[str]) -> None:
        from runs.workers.runtime import Slots

        self.slots, self.pending, self.worker_id, self.name = Slots(slots), 0, 1, "vm:1"
        self.answers, self.starts = answers, 0

    async def db(self, fn, *args, then=None):
        if fn is leases.start:
            self.starts += 1
            answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        elif fn is leases.slot_free_elsewhere:
            answer = False
        else:
            raise AssertionError(fn)
        if then is not None:
            then(answer)
        return answer

    keep_db = db

    def post(self, key, message) -> None:
        pass


def _held(n: int):
    from runs.workers.execute import Held

    return Held(n, 1, info({}), rollout=f"hello__{n}")


async def test_prepared_attempts_of_a_full_job_ask_again_four_times_a_second_not_in_a_loop():
    import asyncio

    from runs.workers.execute import LeaseRun

    # given a worker with a free slot and two prepared attempts of a job whose -j run elsewhere
    w = SlotsOnly(1, [leases.FULL])
    first, second = _held(1), _held(2)
    waits = [asyncio.create_task(LeaseRun(w, h.lease)._start(h)) for h in (first, second)]
    # when they wait for 0.6 s
    await asyncio.sleep(0.6)
    for h in (first, second):
        h.order = "discard"
    await asyncio.gather(*waits)
    # then each asked about every 0.25 s (a slot taken and given back to ask does not wake the
    # other to ask the same at once), and the slot is free again
    assert 2 <= w.starts <= 10, w.starts
    assert w.slots.free == 1 and not first.slot and not second.slot


async def test_a_prepared_attempt_starts_when_the_job_has_a_slot_again():
    import asyncio
    import time

    from runs.workers.execute import LeaseRun

    w = SlotsOnly(1, [leases.FULL, leases.FULL, leases.STARTED])
    held = _held(1)
    t = time.monotonic()
    await asyncio.wait_for(LeaseRun(w, 1)._start(held), 5)
    assert held.slot and w.slots.free == 0 and w.starts == 3
    assert time.monotonic() - t < 1.5


async def test_queued_leases_whose_messages_the_broker_lacks_are_sent_again(monkeypatch, tmp_path):
    import asyncio
    from dataclasses import replace

    from runs.workers import dispatch, lease_watch

    sent: list[int] = []

    class Broker:
        def enqueue(self, lease: int, queue: str) -> None:
            sent.append(lease)

    class Channel:
        waiting = 2  # messages in the broker's queue

        async def queue_length(self, queue: str) -> int:
            return self.waiting

    # given a lease a worker handed back (queued under claim 2) and a fresh one (claim 0), both
    # waiting in the queue for a free worker, their messages there
    channel = Channel()
    runner = dispatch.RemoteRunner(tmp_path, lambda _: None, Broker(), channel, "q")  # type: ignore[arg-type]
    back = leases.LeaseRow(7, "queued", 2, "", "", None, None, None, None, None, "", "a", 1, "u7")
    fresh = replace(back, id=8, claim=0, uid="u8")
    runner.book.rows.update({7: replace(back, state="preparing", claim=1), 8: fresh})
    monkeypatch.setattr(leases, "rows", lambda ids: {7: back, 8: fresh})
    monkeypatch.setattr(leases, "queued_on", lambda queue, stale_s: 2)
    monkeypatch.setattr(lease_watch, "RESEND_S", 0.2)
    monkeypatch.setattr(lease_watch, "POLL_S", 0.02)
    # when the coordinator polls, and again after RESEND_S: nothing is sent, none is missing
    await runner.watch.poll_once()
    await asyncio.sleep(0.25)
    await runner.watch.poll_once()
    assert sent == []
    # when both messages are lost (a consumer dropped its connection while Redis was paused)
    channel.waiting = 0
    await asyncio.sleep(0.25)
    for _ in range(3):
        await runner.watch.poll_once()
    # then each is sent again, once
    assert sorted(sent) == [7, 8]
    # and when their messages are there again, none is sent again, however long they wait
    channel.waiting = 2
    await asyncio.sleep(0.25)
    for _ in range(3):
        await runner.watch.poll_once()
    assert sorted(sent) == [7, 8]
    runner._db.shutdown(wait=True)


async def test_a_cap_counts_an_attempt_that_finished_before_its_stop_though_no_hint_said_so(
    monkeypatch, tmp_path
):
    from dataclasses import replace

    from runs.workers import dispatch

    class Channel:
        async def send(self, key: str, message: dict) -> bool:
            return True

    # given a running attempt whose worker has just written its result (the row says finished)
    # while the coordinator's copy of the row still says running
    runner = dispatch.RemoteRunner(tmp_path, lambda _: None, None, Channel(), "q")  # type: ignore[arg-type]
    result = {"agent_result": {"total_tokens": 2021}, "timing": {"total": 5.0}}
    running = leases.LeaseRow(
        4, "running", 1, "t4__1", "w", None, None, None, None, None, "", "t4", 1, "u4"
    )
    finished = replace(running, state="finished", result=result)
    runner.book.rows[4] = running
    monkeypatch.setattr(leases, "request_cancel", lambda lease, kind, by=None: "finished")
    monkeypatch.setattr(leases, "rows", lambda ids: {4: finished})
    prepared = dispatch.RemotePrepared(None, tmp_path, "", 0.0, lease=4, claim=1)  # type: ignore[arg-type]
    prepared.cancelled_by = "budget reached: 6,063 tokens spent of a 5,000 cap"
    # when the cap stops it
    await runner._stop(prepared)
    # then what it spent counts, as a cancelled attempt's would
    assert prepared.cancelled_record is not None
    assert prepared.cancelled_record["agent_result"]["total_tokens"] == 2021
    runner._db.shutdown(wait=True)


async def test_hints_waiting_in_redis_go_and_come_in_one_trip_each_way_in_order():
    import uuid

    from runs.workers.channel import Channel

    # given two keys of the machine's Redis (keys of their own)
    channel = Channel("redis://127.0.0.1:6379/12")
    first, second = f"test:{uuid.uuid4().hex}:a", f"test:{uuid.uuid4().hex}:b"
    try:
        # when three messages go in one batch, and the first key is read twice
        assert await channel.send_all([(first, {"n": 1}), (second, {"n": 2}), (first, {"n": 3})])
        got = await channel.receive_all(first, 0.1)
        nothing = await channel.receive_all(first, 0.1)
        # then what waited comes at once and in order; then nothing, after the timeout
        assert got == [{"n": 1}, {"n": 3}] and nothing == []
        assert await channel.receive_all(second, 0.1) == [{"n": 2}]
    finally:
        await channel.close()


async def test_hints_posted_from_several_threads_reach_redis_in_each_ones_order():
    import threading
    import uuid

    from runs.workers.channel import Channel, Outbox

    # given a worker's outbox on the machine's Redis, and a key of the test's own
    key = f"test:{uuid.uuid4().hex}:events"
    outbox = Outbox("redis://127.0.0.1:6379/12")
    channel = Channel("redis://127.0.0.1:6379/12")
    try:
        # when two threads (the loop and a database thread, say) post 200 hints each, and the
        # outbox closes at once after
        def post(who: str) -> None:
            for n in range(200):
                outbox.post(key, {"who": who, "n": n})

        threads = [threading.Thread(target=post, args=(who,)) for who in ("loop", "db")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        outbox.close()
        got: list[dict] = []
        while batch := await channel.receive_all(key, 0.1):
            got.extend(batch)
        # then every hint arrived, each thread's in the order it posted them
        for who in ("loop", "db"):
            assert [m["n"] for m in got if m["who"] == who] == list(range(200))
        assert outbox.up
    finally:
        await channel.close()


def test_hints_to_a_redis_that_does_not_answer_are_dropped_without_an_error():
    from runs.workers.channel import Outbox

    # given an outbox whose Redis does not answer (a port of loopback where none listens)
    outbox = Outbox("redis://127.0.0.1:1/0")
    # when a hint is posted and the outbox closes
    outbox.post("k", {"n": 1})
    outbox.close()
    # then nothing raised, and the outbox knows Redis is down (the rows carry the truth)
    assert not outbox.up


async def test_a_cancel_that_redis_client_swallows_still_ends_a_loop_of_reads():
    import asyncio

    from runs.workers.channel import Channel

    # given a channel whose client answers a cancel landing mid-read with an empty answer, as
    # redis-py's can (a job's end once waited for ever on its hint reader)
    class Swallowing:
        async def blpop(self, keys, timeout):
            try:
                await asyncio.sleep(timeout)
            except asyncio.CancelledError:
                pass
            return None

        async def lpop(self, key, count):
            return None

    channel = Channel("redis://127.0.0.1:6379/12")
    channel._redis = Swallowing()  # type: ignore[assignment]
    given_up = asyncio.Event()

    async def read_for_ever():
        while not given_up.is_set():
            await channel.receive_all("k", 0.05)

    task = asyncio.create_task(read_for_ever())
    await asyncio.sleep(0.12)
    # when it is cancelled
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=1.0)
    given_up.set()
    await asyncio.gather(task, return_exceptions=True)
    # then the loop ended on the cancel
    assert done == {task} and task.cancelled()


async def test_the_end_of_a_job_does_not_wait_for_ever_on_a_task_that_ignores_its_cancel(
    monkeypatch, tmp_path
):
    import asyncio

    from runs.workers import dispatch

    class Channel:
        async def drop(self, key: str) -> None:
            pass

        async def close(self) -> None:
            pass

    released = asyncio.Event()

    async def stubborn():
        while not released.is_set():
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue

    # given a coordinator's hint reader that ignores its cancel
    monkeypatch.setattr(dispatch, "CLOSE_WAIT_S", 0.2)
    monkeypatch.setattr(leases, "close_dispatcher", lambda dispatcher: [])
    monkeypatch.setattr(leases, "collected", lambda when: None)
    runner = dispatch.RemoteRunner(tmp_path, lambda _: None, None, Channel(), "q")  # type: ignore[arg-type]
    runner._tasks = [asyncio.create_task(stubborn())]
    # when the job ends
    closing = asyncio.create_task(runner.close())
    done, _ = await asyncio.wait([closing], timeout=2)
    stubborn_left = not runner._tasks[0].done()
    released.set()
    await asyncio.gather(closing, runner._tasks[0])
    # then it closed after waiting its bound, the stubborn task still going
    assert done == {closing} and stubborn_left


@pytest.mark.django_db(transaction=True)
def test_a_celery_thread_keeps_its_database_connection_from_one_attempt_to_the_next(monkeypatch):
    # Celery's Django fixup closes the task thread's connections before and after each task
    # unless reuse is allowed: every claim would open a new one (a server process on PostgreSQL)
    from celery.fixups.django import DjangoWorkerFixup
    from django.db import connections

    from benchflow_site.celery import app
    from runs.databases import leases_db
    from runs.workers.celery_tasks import run_attempt

    connection = connections[leases_db()]
    closed: list[str] = []
    monkeypatch.setattr(connection, "close", lambda: closed.append(connection.alias))
    fixup = DjangoWorkerFixup(app)
    for _ in range(3):  # three tasks, each closed around
        fixup.on_task_prerun(sender=run_attempt)
        fixup.on_task_postrun(sender=run_attempt)
    assert closed == []


@pytest.mark.django_db(transaction=True)
def test_a_claim_replaces_a_connection_past_its_age_and_reads_the_lease(monkeypatch):
    import time as clock

    from django.db import connections

    from runs.databases import leases_db
    from runs.workers.execute import claim_lease

    d = leases.open_dispatcher("/jobs/j", "/work", "q", {"agent": "oracle"}, slots=2)
    lease = leases.create(
        d,
        job_path="/jobs/j",
        trial_name="hello",
        task_name="hello",
        task_path="/tasks/hello",
        trial_index=0,
        attempt=1,
        env_digest="",
        enqueue=lambda _: None,
    )
    worker = leases.register_worker("host:1", 1, ["q"])
    connection = connections[leases_db()]
    connection.ensure_connection()
    connection.close_at = clock.monotonic() - 1  # past CONN_MAX_AGE
    closed: list[str] = []
    close = connection.close
    monkeypatch.setattr(connection, "close", lambda: (closed.append("closed"), close()))
    taken = claim_lease(lease, worker, would_wait=False)
    assert closed == ["closed"]  # (an in-memory test database stays open: SQLite's wrapper)
    assert taken is not None
    claim, info, elsewhere = taken
    assert (claim, elsewhere) == (1, None)
    assert (info.trial_name, info.cwd, info.queue, info.settings) == (
        "hello",
        "/work",
        "q",
        {"agent": "oracle"},
    )


async def test_a_worker_asks_for_a_runs_sealed_values_again_while_redis_does_not_answer(
    monkeypatch,
):
    import threading

    from runs.workers import runtime

    # given Redis that does not answer twice (paused), then gives the run's sealed values
    class Channel:
        up = True
        answers = [None, None, b"token"]

        async def get(self, key: str) -> bytes | None:
            got = self.answers.pop(0)
            self.up = got is not None
            return got

    slept: list[float] = []

    async def no_sleep(seconds: float) -> None:
        slept.append(seconds)

    worker = runtime.WorkerRuntime.__new__(runtime.WorkerRuntime)
    worker.channel = Channel()  # type: ignore[assignment]
    worker._stopping = threading.Event()
    monkeypatch.setattr(runtime, "unseal", lambda token, key, max_age_s: ("unsealed", token))
    monkeypatch.setattr(runtime, "deployment_key", lambda: b"k")
    monkeypatch.setattr(runtime.asyncio, "sleep", no_sleep)
    # when the worker sets up an attempt of that run
    sealed = await worker._sealed(3)
    # then it asked until Redis answered, and has the values
    assert sealed == ("unsealed", b"token") and slept == [1.0, 1.0]

    # and when Redis answers but holds none for longer than the coordinator takes to seal anew
    worker.channel = Channel()  # type: ignore[assignment]
    worker.channel.answers = [None] * 100
    monkeypatch.setattr(runtime, "SEALED_WAIT_S", {True: 0.0, False: 0.0})
    assert await worker._sealed(3) is None


def test_a_worker_starting_waits_for_redis_a_while_then_names_the_fix(monkeypatch, capsys):
    from benchflow_site import worker_cli
    from runs.workers.channel import redis_answers

    monkeypatch.setattr(worker_cli.time, "sleep", lambda s: None)
    # given Redis that is paused for two looks, then answers: the worker waits for it
    answers = ["TimeoutError: Timeout reading", "TimeoutError: Timeout reading", None]
    worker_cli.wait_for_redis(UNREACHABLE, 60, lambda url: answers.pop(0))
    assert answers == []
    said = capsys.readouterr().err
    assert said.count("does not answer") == 1 and "waiting up to 60 s" in said
    # given Redis that never answers: the same error as before, once the wait is over
    with pytest.raises(UserError, match="does not answer .*fix: start it") as caught:
        worker_cli.wait_for_redis(UNREACHABLE, 0, redis_answers)
    assert caught.value.exit_code == 1
    # and a password in the URL is said as ***
    with pytest.raises(UserError) as caught:
        worker_cli.wait_for_redis("redis://:s3cr3t-pw@127.0.0.1:1/0", 0, redis_answers)
    assert "s3cr3t-pw" not in str(caught.value) and "redis://:***@127.0.0.1:1/0" in str(
        caught.value
    )
