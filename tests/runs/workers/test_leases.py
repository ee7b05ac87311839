"""Leases of dispatched attempts: every change is a conditional UPDATE, so racing workers and the
coordinator each win or lose cleanly (on SQLite and on PostgreSQL, as the suite runs)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

import pytest

from runs.databases import leases_db
from runs.models import Dispatcher, Lease, LeaseState
from runs.workers import leases

pytestmark = pytest.mark.django_db(transaction=True)

S = LeaseState
T = TypeVar("T")
JOB = "/jobs/2026-01-01__00-00-00"


def dispatcher() -> int:
    return leases.open_dispatcher(JOB, "/work", "q", {"agent": "oracle"})


def queued(dispatcher_id: int, trial: str = "hello", enqueued: list[int] | None = None) -> int:
    return leases.create(
        dispatcher_id,
        job_path=JOB,
        trial_name=trial,
        task_name=trial,
        task_path=f"/tasks/{trial}",
        trial_index=0,
        attempt=1,
        env_digest="sha256:x",
        enqueue=(enqueued if enqueued is not None else []).append,
    )


def in_a_thread(write: Callable[[], T]) -> T:
    """A racing thread's write: the suite's SQLite is in memory with a shared cache, where the
    second writer is refused at once ("locked") where a file database makes it wait; its
    connection is closed after."""
    from django.db import OperationalError, connections

    try:
        for _ in range(500):
            try:
                return write()
            except OperationalError as exc:
                if "locked" not in str(exc):
                    raise
                time.sleep(0.005)
        raise AssertionError("still locked after 500 tries")
    finally:
        connections.close_all()


def test_a_lease_is_enqueued_after_its_row_is_committed():
    # given a lease created inside an outer transaction
    from django.db import transaction

    sent: list[int] = []
    d = dispatcher()
    with transaction.atomic(using=leases_db()):
        lease = queued(d, enqueued=sent)
        # then nothing is sent while a worker could not yet see the row
        assert sent == []
    assert sent == [lease]


def test_a_claim_and_a_start_do_not_wait_for_a_write_to_the_index():
    # given a lease, and the index's writer in the middle of a transaction (the coordinator
    # writes a job's rows after each of its events)
    from django.db import connections, transaction

    from runs.models import Job

    lease = queued(dispatcher())
    worker = leases.register_worker("host:1", 1, ["q"])
    writing, done = threading.Event(), threading.Event()

    def index_writer() -> None:
        try:
            with transaction.atomic():
                Job.objects.create(path="/jobs/other", name="other")
                writing.set()
                done.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=index_writer)
    thread.start()
    try:
        assert writing.wait(10)
        # when a worker claims the lease and starts its attempt meanwhile
        t = time.monotonic()
        claim = leases.claim(lease, worker, 30, 60)
        assert claim is not None
        said = leases.start(lease, claim, "hello__1")
        took = time.monotonic() - t
    finally:
        done.set()
        thread.join(10)
    # then neither waited for it (on SQLite the leases are a file of their own; on PostgreSQL
    # other rows' writes never block them)
    assert said == leases.STARTED
    assert took < 1.0, took


def test_of_two_workers_claiming_the_same_lease_exactly_one_gets_it():
    # given a queued lease and two workers racing for it from two threads
    d = dispatcher()
    lease = queued(d)
    first = leases.register_worker("host:1", 2, ["q"])
    second = leases.register_worker("host:2", 2, ["q"])
    got: dict[int, int | None] = {}
    barrier = threading.Barrier(2)

    def take(worker: int) -> None:
        barrier.wait()
        got[worker] = in_a_thread(lambda: leases.claim(lease, worker, 30, 60))

    threads = [threading.Thread(target=take, args=(w,)) for w in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # then one claim won (claim number 1), the other got nothing
    assert sorted(got.values(), key=lambda c: c or 0) == [None, 1]
    row = Lease.objects.get(pk=lease)
    winner = next(w for w, c in got.items() if c == 1)
    assert (row.state, row.worker_id, row.claim) == (S.PREPARING, winner, 1)


def test_a_worker_whose_lease_was_taken_back_changes_nothing():
    # given a worker that claimed a lease and stopped renewing it (its time ran out)
    d = dispatcher()
    lease = queued(d)
    dead = leases.register_worker("host:1", 1, ["q"])
    claim = leases.claim(lease, dead, 30, 60)
    assert claim == 1 and leases.start(lease, claim, "hello__00000001") == leases.STARTED
    assert leases.requeue_expired(lease, claim) is None  # not expired yet: it holds
    Lease.objects.filter(pk=lease).update(expires_at=leases.now() - timedelta(seconds=1))
    # when the coordinator takes it back, and another worker claims it
    back = leases.requeue_expired(lease, claim)
    assert back is not None and back.state == S.QUEUED and back.rollout_name == ""
    other = leases.register_worker("host:2", 1, ["q"])
    assert leases.claim(lease, other, 30, 60) == 2
    # then the first worker's writes, naming its old claim, all fail
    assert not leases.renew(lease, claim, 30, {"total_tokens": 5})
    assert leases.start(lease, claim, "hello__00000001") == leases.OFF
    assert not leases.finish(lease, claim, {"rewards": {"reward": 1.0}}, 1.0)
    assert leases.orders(lease, claim, 60) is None
    row = Lease.objects.get(pk=lease)
    assert (row.state, row.worker_id, row.result) == (S.PREPARING, other, None)
    assert row.lost == [{"rollout": "hello__00000001", "worker": "host:1"}]


def test_the_attempt_starts_once_its_sandbox_is_up_and_its_result_is_kept():
    d = dispatcher()
    lease = queued(d)
    worker = leases.register_worker("host:1", 1, ["q"])
    claim = leases.claim(lease, worker, 30, 60)
    assert claim is not None
    assert not leases.finish(lease, claim, {"x": 1}, 1.0)  # not started: it cannot have run
    assert leases.start(lease, claim, "hello__00000001") == leases.STARTED
    assert leases.start(lease, claim, "hello__00000001") == leases.OFF  # started once
    assert leases.rows([lease])[lease].rollout_name == "hello__00000001"
    assert leases.orders(lease, claim, 60) == (S.RUNNING, "", "", True)
    assert leases.finish(lease, claim, {"rewards": {"reward": 1.0}}, 2.5)
    row = leases.rows([lease])[lease]
    assert (row.state, row.result) == (S.FINISHED, {"rewards": {"reward": 1.0}})


def test_a_cancel_discards_a_queued_lease_at_once_and_asks_a_holder_to_stop():
    d = dispatcher()
    waiting, running = queued(d, "a"), queued(d, "b")
    assert leases.request_cancel(waiting, "discard") == S.DISCARDED
    worker = leases.register_worker("host:1", 1, ["q"])
    # a discarded lease is no longer claimed
    assert leases.claim(waiting, worker, 30, 60) is None
    claim = leases.claim(running, worker, 30, 60)
    assert claim is not None and leases.start(running, claim, "b__1") == leases.STARTED
    assert leases.request_cancel(running, "stop", "budget reached: x") == S.RUNNING
    assert leases.orders(running, claim, 60) == (S.RUNNING, "stop", "budget reached: x", True)
    record = {"total": 1.0, "cancelled": True, "cancelled_by": "budget reached: x"}
    assert leases.cancelled(running, claim, record, 1.0)
    assert Lease.objects.get(pk=running).cancelled_record == record


def test_an_expired_lease_the_coordinator_had_called_off_ends_instead_of_running_again():
    d = dispatcher()
    lease = queued(d)
    worker = leases.register_worker("host:1", 1, ["q"])
    claim = leases.claim(lease, worker, 30, 60)
    assert claim is not None
    leases.request_cancel(lease, "discard")
    Lease.objects.filter(pk=lease).update(expires_at=leases.now() - timedelta(seconds=1))
    row = leases.requeue_expired(lease, claim)
    assert row is not None and row.state == S.DISCARDED


def test_no_worker_starts_an_attempt_of_a_coordinator_gone_quiet():
    # given a lease whose coordinator was last seen two minutes ago
    d = dispatcher()
    lease = queued(d)
    Dispatcher.objects.filter(pk=d).update(last_seen_at=leases.now() - timedelta(minutes=2))
    worker = leases.register_worker("host:1", 1, ["q"])
    # then a worker does not take it: it is abandoned
    assert leases.claim(lease, worker, 30, 60) is None
    assert Lease.objects.get(pk=lease).state == S.ABANDONED
    # and when its coordinator turns out alive, it queues it again
    leases.dispatcher_seen(d)
    assert leases.requeue_abandoned(lease)
    assert leases.claim(lease, worker, 30, 60) == 1


def test_a_resume_adopts_running_attempts_and_calls_off_the_rest():
    # given an earlier coordinator's leases: one running on a worker, one whose sandbox is being
    # prepared, one queued
    old = dispatcher()
    running, preparing, waiting = queued(old, "a"), queued(old, "b"), queued(old, "c")
    worker = leases.register_worker("host:1", 3, ["q"])
    claim = leases.claim(running, worker, 30, 60)
    assert claim is not None and leases.start(running, claim, "a__1") == leases.STARTED
    late = leases.claim(preparing, worker, 30, 60)
    assert late is not None
    # when a new coordinator of the same job opens
    new = dispatcher()
    adopted = leases.adopt(JOB, new)
    # then it holds the running one; the others will not run for the old one
    assert [(r.trial_name, r.rollout_name) for r in adopted] == [("a", "a__1")]
    assert Lease.objects.get(pk=running).dispatcher_id == new
    assert Lease.objects.get(pk=preparing).cancel == "discard"
    assert Lease.objects.get(pk=waiting).state == S.ABANDONED
    assert sorted(leases.running_elsewhere(JOB)) == ["a", "b"]
    # and the one being prepared never starts: its worker discards it
    assert leases.start(preparing, late, "b__1") == leases.OFF
    assert leases.discarded(preparing, late)
    assert leases.running_elsewhere(JOB) == ["a"]


def test_a_prepared_attempt_starts_only_while_fewer_than_the_jobs_j_run():
    # given a job at -j 2 whose leases were prepared on two workers, three at once
    d = leases.open_dispatcher(JOB, "/work", "q", {}, slots=2)
    a, b, c = queued(d, "a"), queued(d, "b"), queued(d, "c")
    w1, w2 = leases.register_worker("host:1", 2, ["q"]), leases.register_worker("host:2", 2, ["q"])
    claims = {lease: leases.claim(lease, w, 30, 60) for lease, w in ((a, w1), (b, w2), (c, w1))}
    # when each asks to start
    assert leases.start(a, claims[a], "a__1", 0.1) == leases.STARTED
    assert leases.start(b, claims[b], "b__1") == leases.STARTED
    # then the third waits (the job's two slots are taken, on whichever worker) and stays prepared
    assert leases.start(c, claims[c], "c__1") == leases.FULL
    assert Lease.objects.get(pk=c).state == S.PREPARING
    # and starts once one of them has ended, with how long it waited
    assert leases.finish(a, claims[a], {"rewards": {"reward": 1.0}}, 1.0)
    assert leases.start(c, claims[c], "c__1", 0.5) == leases.STARTED
    row = Lease.objects.get(pk=c)
    assert (row.state, row.slot_wait_s, row.started_at is not None) == (S.RUNNING, 0.5, True)
    # a job with no limit (0) starts whatever is prepared
    free = leases.open_dispatcher("/jobs/other", "/work", "q", {})
    leases_of = [queued(free, f"t{i}") for i in range(3)]
    for lease in leases_of:
        claim = leases.claim(lease, w2, 30, 60)
        assert leases.start(lease, claim, f"x__{lease}") == leases.STARTED


def test_racing_starts_of_one_job_never_pass_its_j():
    # given -j 1 and two prepared leases whose workers start them at the same moment
    d = leases.open_dispatcher(JOB, "/work", "q", {}, slots=1)
    one, two = queued(d, "a"), queued(d, "b")
    w1, w2 = leases.register_worker("host:1", 1, ["q"]), leases.register_worker("host:2", 1, ["q"])
    claims = {one: leases.claim(one, w1, 30, 60), two: leases.claim(two, w2, 30, 60)}
    said: dict[int, str] = {}
    barrier = threading.Barrier(2)

    def go(lease: int) -> None:
        barrier.wait()
        said[lease] = in_a_thread(lambda: leases.start(lease, claims[lease], f"r{lease}"))

    threads = [threading.Thread(target=go, args=(lease,)) for lease in (one, two)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # then exactly one runs
    assert sorted(said.values()) == [leases.FULL, leases.STARTED]
    assert Lease.objects.filter(dispatcher=d, state=S.RUNNING).count() == 1


def test_a_prepared_lease_handed_back_is_queued_under_a_new_claim_at_most_twice():
    # given a lease a worker claimed (its slots full) while another worker has a slot free
    d = dispatcher()
    lease = queued(d)
    full, free = (
        leases.register_worker("host:1", 1, ["q"]),
        leases.register_worker("host:2", 1, ["q"]),
    )
    claim = leases.claim(lease, full, 30, 60)
    assert claim is not None
    assert leases.slot_free_elsewhere(full, ["q"], 15)
    assert not leases.slot_free_elsewhere(full, ["other"], 15)  # serves another queue
    # when it hands it back
    assert leases.hand_back(lease, claim)
    # then it is queued again, no worker's, and its old claim counts for nothing
    row = Lease.objects.get(pk=lease)
    assert (row.state, row.worker_id, row.claim, row.handed_back) == (S.QUEUED, None, claim + 1, 1)
    assert leases.start(lease, claim, "hello__1") == leases.OFF
    # and a second hand-back may happen, not a third: the lease then waits where it is
    second = leases.claim(lease, full, 30, 60)
    assert second is not None and leases.hand_back(lease, second)
    third = leases.claim(lease, full, 30, 60)
    assert third is not None and not leases.hand_back(lease, third)
    assert leases.start(lease, third, "hello__1") == leases.STARTED
    # a worker whose slot is held (running, or a lease prepared for it) is not free
    assert not leases.slot_free_elsewhere(free, ["q"], 15)


def test_a_draining_worker_is_no_one_to_hand_a_lease_to():
    busy, stopping = (
        leases.register_worker("host:1", 1, ["q"]),
        leases.register_worker("host:2", 2, ["q"]),
    )
    assert leases.slot_free_elsewhere(busy, ["q"], 15)
    leases.worker_draining(stopping)  # its warm shutdown began
    assert not leases.slot_free_elsewhere(busy, ["q"], 15)
    assert leases.live_workers("q") == [("host:1", 1)]


def test_live_workers_are_those_seen_lately_that_serve_the_queue():
    leases.register_worker("host:1", 2, ["q"])
    leases.register_worker("host:2", 4, ["other"])
    gone = leases.register_worker("host:3", 1, ["q"])
    leases.worker_stopped(gone)
    assert leases.live_workers("q") == [("host:1", 2)]


def test_the_queued_leases_counted_against_the_brokers_queue_are_live_coordinators_ones():
    # given two live coordinators' leases queued on q, one claimed, one on another queue, and one
    # of a coordinator not seen for a minute (gone: its message may be lost with it)
    live = dispatcher()
    queued(live, "a")
    queued(live, "b")
    claimed = queued(live, "c")
    leases.claim(claimed, leases.register_worker("w", 1, ["q"]), 30, 60)
    other = leases.open_dispatcher("/jobs/other", "/work", "elsewhere", {"agent": "oracle"})
    queued(other, "d")
    gone = leases.open_dispatcher("/jobs/gone", "/work", "q", {"agent": "oracle"})
    queued(gone, "e")
    Dispatcher.objects.using(leases_db()).filter(pk=gone).update(
        last_seen_at=leases.now() - timedelta(seconds=60)
    )
    # then q should hold two messages
    assert leases.queued_on("q", stale_s=15) == 2
