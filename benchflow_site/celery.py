"""The Celery app: `bench worker` runs it; `bench run` sends attempts through it (scale-out, with
BENCHFLOW_REDIS_URL)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchflow_site.settings")

app = Celery("benchflow_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runs.workers"], related_name="celery_tasks")


class CeleryBroker:
    """runs.workers.broker.Broker: a lease's id to a queue. No retries here: the coordinator sends
    it again on its next poll when Redis does not take it now."""

    def enqueue(self, lease: int, queue: str) -> None:
        app.send_task("benchflow.run_attempt", args=[lease], queue=queue, retry=False)


def send_coordination(job: int, queue: str) -> None:
    """A job handed to the worker fleet (runs.operations.fleet.FleetLauncher)."""
    app.send_task("benchflow.coordinate", args=[job], queue=queue, retry=False)
