"""One coordinator per job on the worker fleet: a lease with a fencing number. A take bumps the
fence; a coordinator whose fence moved on can renew nothing and create no lease; a lapsed lease
is taken by another worker with the handover recorded (on SQLite and PostgreSQL, as the suite
runs)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runs import events as ev
from runs.models import Coordination, Lease, Worker
from runs.workers import coordination, leases

pytestmark = pytest.mark.django_db(transaction=True)

JOB = "/jobs/2026-01-01__00-00-00"


@pytest.fixture(autouse=True)
def no_fence_held():
    yield
    coordination._held = None
    coordination._lost.clear()
    coordination._renewed_at = coordination._asked_at = 0.0


def lapse(pk: int) -> None:
    """Its holder stopped renewing (its machine was lost) a while ago."""
    at = coordination.now() - timedelta(seconds=60)
    Coordination.objects.filter(pk=pk).update(renewed_at=at, expires_at=at + timedelta(seconds=5))


def test_a_queued_job_is_taken_once_and_its_fence_counts_each_take():
    pk = coordination.submit(JOB, "q", {"agent": "oracle"})
    assert pk is not None
    assert coordination.takeable(["q"], "a") == [pk]
    assert coordination.takeable(["other"], "a") == []
    first = coordination.take(pk, "a:1", 20, host="a")
    assert first is not None and first.fence == 1 and not first.adopted
    assert coordination.take(pk, "b:1", 20, host="b") is None  # held: nobody else takes it
    assert coordination.takeable(["q"], "b") == []
    assert coordination.renew(pk, 1, 20) == "ok"

    lapse(pk)
    assert coordination.takeable(["q"], "b") == [pk]
    second = coordination.take(pk, "b:1", 20, host="b")
    assert second is not None and second.fence == 2 and second.adopted
    # the late coordinator on a: its renewal says it was taken over, and its hand-over does nothing
    assert coordination.renew(pk, 1, 20) == "fenced"
    assert not coordination.release(pk, 1)
    assert not coordination.end(pk, 1, "finished")
    where = coordination.where(JOB)
    assert where is not None and where.host == "b" and where.state == "running"
    [handover] = where.handovers
    assert (handover["from"], handover["to"], handover["why"]) == ("a", "b", "lost")
    assert where.lines()[1].startswith("coordinator on a lost at ")
    assert "; adopted by b at " in where.lines()[1]


def test_a_late_coordinator_creates_no_lease(monkeypatch):
    pk = coordination.submit(JOB, "q", {})
    assert pk is not None
    taken = coordination.take(pk, "a:1", 20, host="a")
    assert taken is not None
    coordination.hold(pk, taken.fence)
    dispatcher = leases.open_dispatcher(JOB, "/work", "q", {})

    def create() -> int:
        return leases.create(
            dispatcher,
            job_path=JOB,
            trial_name="hello",
            task_name="hello",
            task_path="/tasks/hello",
            trial_index=0,
            attempt=1,
            env_digest="",
            enqueue=lambda _id: None,
        )

    create()  # still its own fence
    lapse(pk)
    assert coordination.take(pk, "b:1", 20, host="b") is not None

    def stopped() -> None:
        raise SystemExit(coordination.FENCED_EXIT)

    monkeypatch.setattr(coordination, "fenced_exit", stopped)
    with pytest.raises(SystemExit):
        create()
    assert Lease.objects.filter(job_path=JOB).count() == 1
    with pytest.raises(coordination.Fenced):
        coordination.check()


def test_a_drained_machine_hands_the_job_over_and_is_taken_last():
    pk = coordination.submit(JOB, "q", {})
    assert pk is not None
    assert coordination.take(pk, "a:1", 20, host="a") is not None
    assert coordination.drain("a") == [JOB]
    assert coordination.renew(pk, 1, 20) == "drain"
    assert coordination.release(pk, 1)
    assert coordination.takeable(["q"], "b") == [pk]
    taken = coordination.take(pk, "b:1", 20, host="b")
    assert taken is not None and taken.adopted
    where = coordination.where(JOB)
    assert where is not None
    assert where.handovers[0]["why"] == "drained"
    assert "handed over (drained)" in where.lines()[1]


def test_a_running_job_is_not_submitted_again_but_an_ended_one_is():
    pk = coordination.submit(JOB, "q", {})
    assert pk is not None
    assert coordination.take(pk, "a:1", 20, host="a") is not None
    assert coordination.submit(JOB, "q", {}) is None
    assert coordination.end(pk, 1, "finished")
    assert coordination.submit(JOB, "q", {"redo": ["x"]}) == pk
    assert coordination.request_of(pk) == (JOB, {"redo": ["x"]})
    assert coordination.takeable(["q"], "a") == [pk]


def test_no_fence_held_checks_nothing():
    coordination.check()  # `bench run` in a terminal: no row, no query
    coordination.guard()


def test_a_drained_machine_does_not_take_the_job_back_while_another_can():
    pk = coordination.submit(JOB, "q", {})
    assert pk is not None
    assert coordination.take(pk, "a-worker", 20, host="a") is not None
    coordination.drain("a")
    assert coordination.release(pk, 1)
    assert not coordination.avoided_here(pk, "a", ["q"])  # no other machine up: a may take it
    elsewhere = leases.register_worker("b-worker", 2, ["q"])
    Worker.objects.filter(pk=elsewhere).update(host="b")
    assert coordination.avoided_here(pk, "a", ["q"])
    assert not coordination.avoided_here(pk, "b", ["q"])


def test_a_coordinator_that_wakes_up_taken_over_emits_no_event(monkeypatch):
    # given a coordinator holding the job, whose first event renews its lease
    pk = coordination.submit(JOB, "q", {})
    assert pk is not None
    taken = coordination.take(pk, "a:1", 20, host="a")
    assert taken is not None
    coordination.hold(pk, taken.fence, 20)
    seen: list[ev.Event] = []
    bus = ev.Bus(seen.append)
    bus.emit(ev.WorkerNote("a:1", "before"))
    assert len(seen) == 1
    # when it was frozen past its lease (the monotonic clock counts the stop) and another took it
    monkeypatch.setattr(coordination, "_renewed_at", coordination._renewed_at - 60)
    lapse(pk)
    assert coordination.take(pk, "b:1", 20, host="b") is not None

    def stopped() -> None:
        raise SystemExit(coordination.FENCED_EXIT)

    monkeypatch.setattr(coordination, "fenced_exit", stopped)
    # then its next event stops it before any subscriber sees it
    with pytest.raises(SystemExit):
        bus.emit(ev.WorkerNote("a:1", "after waking"))
    assert len(seen) == 1
