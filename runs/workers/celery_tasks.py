"""The Celery task of a worker: one dispatched attempt, named by its lease's id (ids only travel
through the broker). `acks_late`: a worker killed mid-attempt leaves the message to be delivered
again; a second delivery (or a duplicate the coordinator sent after a Redis restart) finds the
lease held or ended and does nothing."""

from celery import shared_task

from runs.workers.runtime import current


@shared_task(name="benchflow.run_attempt", acks_late=True, ignore_result=True)
def run_attempt(lease: int) -> None:
    current().run(lease)
