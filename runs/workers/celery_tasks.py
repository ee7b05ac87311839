"""The Celery task of a worker: one dispatched attempt, named by its lease's id (ids only travel
through the broker). `acks_late`: a worker killed mid-attempt leaves the message to be delivered
again; a second delivery (or a duplicate the coordinator sent after a Redis restart) finds the
lease held or ended and does nothing. A worker whose machine is in trouble rejects the message
with requeue, for another worker."""

from celery import shared_task
from celery.exceptions import Reject

from runs.workers.runtime import PassOn, current


@shared_task(name="benchflow.run_attempt", acks_late=True, ignore_result=True)
def run_attempt(lease: int) -> None:
    try:
        current().run(lease)
    except PassOn:  # this worker's machine is in trouble: back to the queue for another worker
        raise Reject("this worker takes no attempt now", requeue=True) from None


@shared_task(name="benchflow.coordinate", acks_late=False, ignore_result=True)
def coordinate(job: int) -> None:
    """A job handed to the fleet: this worker takes it when no one holds it (its coordinator is a
    process of its own; the task returns at once). Every worker also looks every 2 s."""
    current().jobs.take(only=job)
