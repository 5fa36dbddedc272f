"""GET /v1/capacity is kept per process: a repeated read of an unchanged fleet is one query, the
answer follows every change of allocations, nodes and switches at once, and the clock within the
maximum age. Committed, as the web processes see it. The 12-node fleet: p1 is r01 (node-001..008)
under p1-leaf1, p2 is r02 (node-009..012) under p2-leaf1."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from fleet.fabric_health import CRITICAL
from fleet.models import FabricSwitch, Node, Pod
from reservations import selectors, services
from reservations.models import Tenant
from tests.support.factories import drive, enrol_default_fleet, make_available

pytestmark = pytest.mark.django_db(transaction=True)


class Rollback(Exception):
    pass


@pytest.fixture
def acme(settings) -> Tenant:
    """A tenant of the 12 available nodes; kept answers never expire by age unless a test says so."""
    settings.CAPACITY_MAX_AGE_SECONDS = 3600
    make_available(enrol_default_fleet())
    return Tenant.objects.create(name="acme")


def capacity() -> dict[str, tuple[int, int]]:
    """Per pod: available and free_open_ended."""
    answer = APIClient().get("/v1/capacity")
    assert answer.status_code == 200
    return counted(answer.json()["pods"])


def counted(pods: list[dict]) -> dict[str, tuple[int, int]]:
    return {pod["name"]: (pod["available"], pod["free_open_ended"]) for pod in pods}


def reserve(tenant: Tenant, count: int, pod: str, **period):
    return services.create_reservation(
        tenant=tenant, node_count=count, pod=Pod.objects.get(name=pod), actor="test", **period
    )


def test_a_repeated_read_of_an_unchanged_fleet_is_one_query_and_the_same_json(acme):
    client = APIClient()
    first = client.get("/v1/capacity")
    with CaptureQueriesContext(connection) as queries:
        again = client.get("/v1/capacity")
    assert len(queries) == 1
    assert (again.status_code, again["Content-Type"], again.content) == (200, "application/json", first.content)
    # Another JSON form is still negotiated, from the same answer.
    indented = client.get("/v1/capacity", HTTP_ACCEPT="application/json; indent=2")
    assert indented.content.startswith(b'{\n  "pods"')
    assert json.loads(indented.content) == json.loads(first.content)


def test_the_answer_follows_every_change_at_once(acme):
    assert capacity() == {"p1": (8, 8), "p2": (4, 4)}

    now = reserve(acme, 2, "p1")
    assert capacity()["p1"] == (6, 6)
    tomorrow = timezone.now() + timedelta(days=1)
    later = reserve(acme, 4, "p2", starts_at=tomorrow, ends_at=tomorrow + timedelta(hours=2))
    assert capacity()["p2"] == (4, 0)  # free now, not for as long as a reservation without an end

    services.change_reservation(reservation_id=now.pk, tenant=acme, actor="test", node_count=3)
    assert capacity()["p1"] == (5, 5)
    kept = selectors.capacity_by_pod()
    services.change_reservation(
        reservation_id=later.pk, tenant=acme, actor="test", ends_at=tomorrow + timedelta(hours=3)
    )
    with CaptureQueriesContext(connection) as queries:
        # Read again; the same counts give the very answer (and the view its JSON) again.
        assert selectors.capacity_by_pod() is kept
    assert len(queries) > 1
    services.release_reservation(reservation_id=later.pk, actor="test")
    assert capacity()["p2"] == (4, 4)

    drive(Node.objects.get(name="node-012"), "operator_quarantine")
    assert capacity()["p2"] == (3, 3)
    Node.objects.filter(name="node-011").update(under_repair=True)
    assert capacity()["p2"] == (2, 2)
    FabricSwitch.objects.filter(name="p1-leaf1").update(health=CRITICAL, state="UnavailableOffline")
    assert capacity()["p1"] == (0, 0)


def test_the_clock_moves_the_answer_within_the_maximum_age(acme, settings):
    starts = timezone.now() + timedelta(hours=1)
    reserve(acme, 2, "p2", starts_at=starts, ends_at=starts + timedelta(hours=1))
    assert capacity()["p2"] == (4, 2)

    # The hold starts: no row changes, only the clock (a later `now`, as capacity_by_pod reads it).
    started = starts + timedelta(minutes=1)
    # The kept answer, younger than the maximum age:
    assert counted(selectors.capacity_by_pod(now=started))["p2"] == (4, 2)
    settings.CAPACITY_MAX_AGE_SECONDS = 0
    assert counted(selectors.capacity_by_pod(now=started))["p2"] == (2, 2)


def test_an_answer_seen_inside_a_transaction_that_rolls_back_is_not_kept(acme):
    assert capacity()["p1"] == (8, 8)
    with pytest.raises(Rollback), transaction.atomic():
        reserve(acme, 3, "p1")
        assert capacity()["p1"] == (5, 5)  # its own reservation, seen before it commits
        raise Rollback
    assert capacity()["p1"] == (8, 8)
