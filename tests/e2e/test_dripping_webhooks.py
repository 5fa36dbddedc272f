"""A tenant whose webhook receivers drip their answers one byte every 2 s holds no worker past the
outbound deadline, and holds no node work at all: while ten such webhooks are registered and
their deliveries are being sent, another tenant's new reservation goes active as fast as it did
before they were registered.

All real processes: gunicorn, a node worker, a webhooks worker (the Procfile's two pools), beat,
and bmcsim. The fleet is enrolled and walked to available in this process, as in
test_webhook_delivery_crash.py. "As fast" is a ratio against a reservation made in the same run
before the webhooks, with room for a noisy machine; the test's point is that node work never
waits on a receiver at all, which it did when both shared one pool.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import requests
from django.core.management import call_command

from fleet.models import Node
from reservations.models import WebhookDelivery, WebhookEvent
from tests.support.factories import make_available_as_inspected, tenant_token
from tests.support.hostile_servers import Dripping, running
from tests.support.processes import wait_for

DEADLINE_SECONDS = 3
PLANE = {
    "GPUFLEET_OUTBOUND_DEADLINE_SECONDS": str(DEADLINE_SECONDS),
    "GPUFLEET_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
}
WEBHOOKS = 10
EVENTS = list(WebhookEvent.values)


def seconds_to_active(session: requests.Session, web: str) -> float:
    began = time.monotonic()
    created = session.post(f"{web}/v1/reservations", json={"node_count": 1})
    assert created.status_code == 201, created.text
    path = f"{web}/v1/reservations/{created.json()['id']}"
    wait_for("the reservation active", lambda: session.get(path).json()["state"] == "active", 180, 0.2)
    took = time.monotonic() - began
    assert session.post(f"{path}/release", json={}).status_code == 200
    return took


@pytest.mark.parametrize("control_plane", [PLANE], indirect=True)
def test_dripping_receivers_hold_no_worker_past_the_deadline_and_no_node_work(bmcsim, control_plane):
    nodes = control_plane.start_worker("nodes", queues="celery")
    hooks = control_plane.start_worker("hooks", queues="webhooks")
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    make_available_as_inspected(list(Node.objects.all()))
    beat = control_plane.start_beat()
    web = control_plane.start_web()
    wait_for("the workers and beat ready", lambda: all(" ready." in p.output() for p in (nodes, hooks, beat)), 60)
    honest, hostile = requests.Session(), requests.Session()
    honest.headers["Authorization"] = f"Token {tenant_token('honest')}"
    hostile.headers["Authorization"] = f"Token {tenant_token('hostile')}"

    before = seconds_to_active(honest, web)

    with ExitStack() as stack:
        drippers = [stack.enter_context(running(Dripping(interval=2.0, give_up_after=60))) for _ in range(WEBHOOKS)]
        for dripper in drippers:
            made = hostile.post(f"{web}/v1/webhooks", json={"url": f"{dripper.url}/hooks", "events": EVENTS})
            assert made.status_code == 201, made.text
        # Events for every webhook: reservations for later, released at once (no node is provisioned).
        now = datetime.now(UTC)
        later = {"starts_at": (now + timedelta(hours=1)).isoformat(), "ends_at": (now + timedelta(hours=2)).isoformat()}
        for _ in range(2):
            created = hostile.post(f"{web}/v1/reservations", json={"node_count": 1, **later})
            assert created.status_code == 201, created.text
            assert hostile.post(f"{web}/v1/reservations/{created.json()['id']}/release", json={}).status_code == 200
        wait_for("a receiver dripping", lambda: any(d.connections for d in drippers), 30, 0.2)

        during = seconds_to_active(honest, web)
        pending = WebhookDelivery.objects.filter(webhook__tenant__name="hostile", state="pending", attempts=0).count()
        # Every attempt so far ended at the deadline, as an error, not when the receiver finished.
        wait_for(
            "attempts recorded",
            lambda: WebhookDelivery.objects.filter(webhook__tenant__name="hostile", attempts__gte=1).count() >= 4,
            8 * DEADLINE_SECONDS,
            0.5,
        )
        tried = WebhookDelivery.objects.filter(webhook__tenant__name="hostile", attempts__gte=1)
        errors = set(tried.values_list("last_error", flat=True))

    print(f"to active: {before:.1f} s before the webhooks, {during:.1f} s while {pending} deliveries waited")
    assert pending > 0, "the deliveries were all sent before the reservation: nothing was measured"
    assert during <= max(3 * before, before + 15), f"{during:.1f} s to active, against {before:.1f} s before"
    assert all(error and "deadline" in error.lower() for error in errors), errors
