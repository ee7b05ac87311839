"""A worker whose machine is in trouble takes no attempt: a lease's message that Celery still hands
it goes back to the queue for another worker, unclaimed, also when the machine failed its claim."""

from __future__ import annotations

import errno

import pytest
from celery.exceptions import Reject

from runs.workers import celery_tasks, runtime


def _worker(monkeypatch) -> runtime.WorkerRuntime:
    monkeypatch.setattr(runtime, "PASS_ON_S", 0.0)
    w = runtime.WorkerRuntime(
        name="sick", slots=1, queues=["q"], client=None, gateway=None, redis_url="", emit=print
    )
    w.slots = runtime.Slots(1)  # made in its loop's thread when it starts
    return w


@pytest.mark.django_db
def test_a_worker_in_trouble_sends_a_lease_on_unclaimed(monkeypatch):
    w = _worker(monkeypatch)
    w.machine.problem = "takes no attempt: no space left on the device (/jobs)"
    claimed: list[int] = []
    sent: list[tuple[int, str]] = []
    monkeypatch.setattr(runtime, "claim_lease", lambda lease, *_: claimed.append(lease))
    monkeypatch.setattr(runtime.leases, "queue_of", lambda lease: "q")
    monkeypatch.setattr(w, "requeue", lambda lease, queue: sent.append((lease, queue)))
    w.run(7)
    assert claimed == [] and sent == [(7, "q")]


def test_a_claim_the_machine_fails_puts_the_worker_in_trouble_and_passes_the_lease_on(
    monkeypatch,
):
    w = _worker(monkeypatch)
    said: list[OSError] = []
    monkeypatch.setattr(w.machine, "trouble", said.append)

    def no_files(*_args):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(runtime, "claim_lease", no_files)
    with pytest.raises(runtime.PassOn):
        w.run(7)
    assert [e.errno for e in said] == [errno.EMFILE]


def test_the_celery_task_rejects_a_passed_on_lease_with_requeue(monkeypatch):
    class Sick:
        def run(self, lease: int) -> None:
            raise runtime.PassOn(lease)

    monkeypatch.setattr(celery_tasks, "current", lambda: Sick())
    with pytest.raises(Reject) as caught:
        celery_tasks.run_attempt.run(7)
    assert caught.value.requeue
