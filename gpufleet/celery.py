"""The Celery app. Messages are only triggers: the database says what work is owed, and the
reconciler (beat) enqueues it again if a message is lost."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpufleet.settings")

app = Celery("gpufleet")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Named, not imported: `python -m gpufleet.heartbeat`, the liveness probe, imports this package
# first and must not find its own module imported already.
app.steps["consumer"].add("gpufleet.worker_heartbeat:HeartbeatFile")
