"""GET /v1/capacity's counts are kept by deltas (reservations/selectors/capacity_reads.py): after a
change, a read counts only what changed, and says what a count afresh says; its `depth` lists
the fabric's domains so many levels down. Committed, as the web processes see it. The 12-node
fleet: p1 is r01 (node-001..008) under p1-leaf1, p2 is r02 (node-009..012) under p2-leaf1."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from fleet.fabric_health import CRITICAL, OK
from fleet.models import FabricSwitch, Node, Pod
from reservations import selectors, services
from reservations.api.serializers import CapacitySerializer
from reservations.models import Tenant
from tests.support.factories import drive, enrol_default_fleet, make_available

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def acme(settings) -> Tenant:
    """A tenant of the 12 available nodes; kept counts never expire by age unless a test says so."""
    settings.CAPACITY_MAX_AGE_SECONDS = 3600
    make_available(enrol_default_fleet())
    return Tenant.objects.create(name="acme")


def reserve(tenant: Tenant, count: int, pod: str, **period):
    return services.create_reservation(
        tenant=tenant, node_count=count, pod=Pod.objects.get(name=pod), actor="test", **period
    )


def afresh(**asked) -> list[dict]:
    """The answer counted afresh: inside a transaction nothing kept is read."""
    with transaction.atomic():
        return selectors.capacity_by_pod(**asked)


def kept_equals_afresh() -> list[dict]:
    kept = selectors.capacity_by_pod()
    assert kept == afresh()
    return kept


def summary(pods: list[dict]) -> dict[str, tuple[int, int, int]]:
    """Per pod: available, free_open_ended, whole_free_racks."""
    return {pod["name"]: (pod["available"], pod["free_open_ended"], pod["whole_free_racks"]) for pod in pods}


def test_every_change_read_by_delta_counts_as_a_count_afresh(acme):
    assert summary(kept_equals_afresh()) == {"p1": (8, 8, 1), "p2": (4, 4, 1)}
    now = reserve(acme, 3, "p1")
    assert summary(kept_equals_afresh())["p1"] == (5, 5, 0)
    tomorrow = timezone.now() + timedelta(days=1)
    later = reserve(acme, 2, "p2", starts_at=tomorrow, ends_at=tomorrow + timedelta(hours=2))
    # Free now, not for as long as a reservation without an end: the rack stays wholly free.
    assert summary(kept_equals_afresh())["p2"] == (4, 2, 1)
    drive(Node.objects.filter(allocations__reservation=later).order_by("name")[0], "operator_quarantine")
    assert summary(kept_equals_afresh())["p2"] == (3, 2, 0)
    services.release_reservation(reservation_id=later.pk, actor="test")
    services.release_reservation(reservation_id=now.pk, actor="test")
    assert summary(kept_equals_afresh()) == {"p1": (5, 5, 0), "p2": (3, 3, 0)}  # p1's 3 are wiped first
    for node in Node.objects.filter(state="wiping"):
        drive(node, "wipe_succeeded", "inspection_passed", "attestation_passed")
    assert summary(kept_equals_afresh()) == {"p1": (8, 8, 1), "p2": (3, 3, 0)}
    leaf = kept_equals_afresh()[1]["domains"][0]
    assert (leaf["name"], leaf["nodes"], leaf["available"]) == ("p2-leaf1", 4, 3)
    assert leaf["children"][0] | {"children": None} == {
        "level": "nvlink_domain",
        "name": "r02",
        "nodes": 4,
        "available": 3,
        "children": None,
    }


def test_nodes_a_switch_cuts_off_are_free_for_nothing_until_it_is_back(acme):
    reserve(acme, 2, "p1")
    FabricSwitch.objects.filter(name="p1-leaf1").update(health=CRITICAL, state="UnavailableOffline")
    assert summary(kept_equals_afresh())["p1"] == (0, 0, 0)
    FabricSwitch.objects.filter(name="p1-leaf1").update(health=OK, state="Enabled")
    assert summary(kept_equals_afresh())["p1"] == (6, 6, 0)


def test_a_read_after_a_change_reads_the_nodes_not_free_in_one_round_trip(acme):
    selectors.capacity_by_pod()
    reserve(acme, 1, "p1")
    with CaptureQueriesContext(connection) as queries:
        selectors.capacity_by_pod()
    arrays = [query["sql"] for query in queries if "array(" in query["sql"]]
    # Held now, held later, and whether a switch is in trouble (none is): the nodes a tenant's
    # network holds and the switches asked in the same statement, nothing more after it.
    assert len(arrays) == 1 and arrays[0].count("array(") == 3
    assert queries[-1]["sql"] == arrays[0]


def test_an_explicit_now_is_counted_at_when_the_counts_are_read_again(acme, settings):
    starts = timezone.now() + timedelta(hours=1)
    reserve(acme, 2, "p2", starts_at=starts, ends_at=starts + timedelta(hours=1))
    started, over = starts + timedelta(minutes=1), starts + timedelta(hours=2)
    settings.CAPACITY_MAX_AGE_SECONDS = 0  # every read reads again
    assert summary(selectors.capacity_by_pod(now=started))["p2"] == (2, 2, 0) == summary(afresh(now=started))["p2"]
    assert summary(selectors.capacity_by_pod(now=over))["p2"] == (4, 4, 1) == summary(afresh(now=over))["p2"]
    assert summary(selectors.capacity_by_pod())["p2"] == (4, 2, 1)


def test_depth_lists_so_many_levels_and_the_default_lists_a_small_fleet_whole(acme):
    reserve(acme, 3, "p1")
    whole = selectors.capacity_listing()
    assert whole.depth == 2 and whole.pods == selectors.capacity_by_pod()
    assert selectors.capacity_listing(depth=5) == whole
    none = selectors.capacity_listing(depth=0)
    assert none.depth == 0 and [pod["domains"] for pod in none.pods] == [[], []]
    leaves = selectors.capacity_listing(depth=1)
    assert [pod["domains"] for pod in leaves.pods] == [
        [{"level": "leaf", "name": "p1-leaf1", "nodes": 8, "available": 5, "children": []}],
        [{"level": "leaf", "name": "p2-leaf1", "nodes": 4, "available": 4, "children": []}],
    ]
    assert [{**pod, "domains": []} for pod in whole.pods] == none.pods


def test_the_api_says_its_depth_and_keeps_the_json_of_each(acme):
    client = APIClient()
    default = client.get("/v1/capacity")
    assert default.status_code == 200
    assert list(default.json()) == ["pods", "depth"] and default.json()["depth"] == 2
    assert CapacitySerializer(default.json()).data == default.json()  # rendered without it, in its shape
    assert default.json()["pods"][0]["domains"][0]["children"][0]["name"] == "r01"
    leaves = client.get("/v1/capacity", {"depth": "1"}).json()
    assert leaves["depth"] == 1
    assert leaves["pods"][0]["domains"] == [
        {"level": "leaf", "name": "p1-leaf1", "nodes": 8, "available": 8, "children": []}
    ]
    assert client.get("/v1/capacity", {"depth": "0"}).json()["pods"][1]["domains"] == []
    assert client.get("/v1/capacity", {"depth": "7"}).json() == default.json()
    for depth, before in (("1", leaves), (None, default.json())):
        with CaptureQueriesContext(connection) as queries:
            again = client.get("/v1/capacity", {"depth": depth} if depth else {})
        assert len(queries) == 1 and again.json() == before  # each depth's JSON kept
    reserve(acme, 2, "p1")
    assert client.get("/v1/capacity", {"depth": "1"}).json()["pods"][0]["domains"][0]["available"] == 6


@pytest.mark.parametrize("depth", ["-1", "one", "1.5", "", " 1", "²"])
def test_a_depth_that_is_not_a_whole_number_is_refused(acme, depth):
    answer = APIClient().get("/v1/capacity", {"depth": depth})
    assert answer.status_code == 400
    assert answer.json()["detail"].startswith("depth: ")


def test_the_schema_documents_the_depth(acme):
    schema = APIClient().get("/v1/schema", HTTP_ACCEPT="application/json").json()
    get = schema["paths"]["/v1/capacity"]["get"]
    (depth,) = (p for p in get["parameters"] if p["name"] == "depth")
    assert depth["in"] == "query" and depth["schema"] == {"type": "integer", "minimum": 0}
    assert "400" in get["responses"]
    assert "depth" in schema["components"]["schemas"]["Capacity"]["required"]
