"""The Celery app: used for scale-out when BENCHFLOW_REDIS_URL is set."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchflow_site.settings")

app = Celery("benchflow_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runs"])
