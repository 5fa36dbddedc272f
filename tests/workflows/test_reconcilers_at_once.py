"""Two beats may both schedule for a moment (a leader cut off from the database goes on until its
check fails: gpufleet/beat_leadership.py), so two reconcile queue workers may run the same pass at
once. Every reconciler stays safe if they do: the leases, SKIP LOCKED claims, constraints and
compare-and-set marks let one of them do each piece of work, and the other nothing."""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.models import Node
from reservations import services
from reservations.models import Reservation, ReservationEvent, Tenant
from tests.support.concurrency import at_once
from tests.support.factories import bring_up, drive, enrol_default_fleet, make_available, overlaps
from workflows import tasks

HOUR = timedelta(hours=1)
# What the beat process's worker runs, from the reconcile queue (settings.CELERY_TASK_ROUTES).
RECONCILE_QUEUE: list[Callable[[], object]] = [
    tasks.reconcile_nodes,
    tasks.reconcile_reservations,
    tasks.reconcile_remediations,
    tasks.reconcile_power_actions,
    tasks.reconcile_idle_diagnostics,
    tasks.advance_firmware_rollouts,
]


def reconcile_pass() -> None:
    for task in RECONCILE_QUEUE:
        task()


def workflow_messages(broker) -> Counter[int]:
    """How many run_workflow messages wait for each node."""
    messages = (json.loads(m) for m in broker.lrange("celery", 0, -1))
    bodies = (
        json.loads(base64.b64decode(m["body"])) for m in messages if m["headers"]["task"] == tasks.run_workflow.name
    )
    return Counter(args[0] for args, _kwargs, _embed in bodies)


@pytest.mark.django_db(transaction=True)
def test_two_reconcile_passes_at_once_do_each_piece_of_work_once(broker, settings):
    settings.RECONCILE_SECONDS = 0  # every node that owes work is overdue at once
    available = make_available(enrol_default_fleet(12))
    acme = Tenant.objects.create(name="acme")
    degraded = bring_up(services.create_reservation(tenant=acme, node_count=3, actor="test"))
    drive(Node.objects.filter(reservation=degraded)[0], "hardware_fault", reason="XID 79")
    now = timezone.now()
    ended = [
        Reservation.objects.create(tenant=acme, node_count=1, starts_at=now - 2 * HOUR, ends_at=now - HOUR)
        for _ in range(5)
    ]
    free = [n for n in available if not Node.objects.filter(pk=n.pk, reservation__isnull=False).exists()]
    wiping = [drive(node, "operator_quarantine", "operator_return") for node in free[:3]]
    broker.flushdb()  # their messages lost with Redis, waiting marks included: a pass owes each one

    at_once(reconcile_pass, reconcile_pass)

    assert Node.objects.filter(reservation=degraded).count() == 3, "healed once, not topped up twice"
    released = ReservationEvent.objects.filter(reservation__in=ended, event="released")
    assert sorted(released.values_list("reservation_id", flat=True)) == sorted(r.pk for r in ended)
    sent = workflow_messages(broker)
    assert {node.pk for node in wiping} <= set(sent), sent
    assert set(sent.values()) == {1}, f"a node was sent twice: {sent}"
    assert overlaps() == 0
