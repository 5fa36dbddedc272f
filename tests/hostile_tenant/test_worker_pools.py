"""Tenants' webhook deliveries run on a queue and worker pool of their own, and no task can hold
a worker for ever: each has a soft and a hard time limit sized to its job."""

from __future__ import annotations

import shlex

from django.conf import settings

from gpufleet.celery import app
from tests.support import REPO_ROOT


def test_webhook_deliveries_go_to_their_own_queue_and_the_procfile_works_it_apart():
    app.loader.import_default_modules()
    route = app.amqp.router.route({}, "workflows.tasks.deliver_webhooks")
    assert route["queue"].name == "webhooks"
    assert app.amqp.router.route({}, "workflows.tasks.run_workflow")["queue"].name == "celery"
    processes = dict(line.split(": ", 1) for line in (REPO_ROOT / "Procfile").read_text().splitlines() if line)
    webhooks = shlex.split(processes["webhooks"])
    assert webhooks[webhooks.index("--queues") + 1] == "webhooks"
    assert "--queues" not in shlex.split(processes["worker"]), "node workers work the default queue alone"


def test_every_task_has_a_soft_and_a_hard_time_limit_beyond_its_calls_deadline():
    app.loader.import_default_modules()
    tasks = {name: task for name, task in app.tasks.items() if name.startswith("workflows.tasks.")}
    assert len(tasks) >= 10
    for name, task in tasks.items():
        soft = task.soft_time_limit or app.conf.task_soft_time_limit
        hard = task.time_limit or app.conf.task_time_limit
        assert soft and hard and soft < hard, name
    assert (tasks["workflows.tasks.deliver_webhooks"].soft_time_limit or 0) > settings.OUTBOUND_DEADLINE_SECONDS
    assert (tasks["workflows.tasks.run_workflow"].soft_time_limit or 0) > settings.WORKFLOW_HOLD_SECONDS
