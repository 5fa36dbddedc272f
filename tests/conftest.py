"""Shared fixtures: a small enrolled fleet and named tenants, on the real PostgreSQL."""

from io import StringIO

import pytest
from django.core.management import call_command

from fleet.inventory import records_from_layout
from fleet.models import Node
from fleet.services import enrol_nodes, transition
from fleet.topology import default_layout
from reservations.models import Reservation, Tenant

SMALL_FLEET = 12  # two racks: r01 full, r02 with four nodes


def tenant_token(name: str) -> str:
    """Create the tenant as an operator would, and read its API token from the last line printed."""
    out = StringIO()
    call_command("create_tenant", name, stdout=out)
    return out.getvalue().strip().splitlines()[-1]


def enrol_default_fleet(node_count: int = SMALL_FLEET) -> list[Node]:
    enrol_nodes(records=records_from_layout(default_layout(node_count), "http://127.0.0.1:8100"), actor="test")
    return list(Node.objects.order_by("name"))


@pytest.fixture
def fleet(db) -> list[Node]:
    return enrol_default_fleet()


@pytest.fixture
def node(fleet) -> Node:
    return fleet[0]


@pytest.fixture
def alice(db) -> Tenant:
    return Tenant.objects.create(name="alice")


@pytest.fixture
def bob(db) -> Tenant:
    return Tenant.objects.create(name="bob")


@pytest.fixture
def alices_reservation(alice) -> Reservation:
    return Reservation.objects.create(tenant=alice, node_count=1)


def drive(node: Node, *events: str, reservation=None, reason="test") -> Node:
    """Walk a node through events with the real service, as the workflows will."""
    for event in events:
        node = transition(node_id=node.pk, event=event, actor="test", reason=reason, reservation=reservation)
    return node


def make_available(nodes: list[Node]) -> list[Node]:
    return [drive(node, "inspection_started", "inspection_passed", "attestation_passed") for node in nodes]


@pytest.fixture
def available_fleet(fleet) -> list[Node]:
    """The 12-node fleet, inspected and attested: p1 is rack r01 (8 nodes), p2 is r02 (4 nodes)."""
    return make_available(fleet)


@pytest.fixture
def available_node(node) -> Node:
    return drive(node, "inspection_started", "inspection_passed", "attestation_passed")


@pytest.fixture
def active_node(available_node, alices_reservation) -> Node:
    return drive(available_node, "provision_requested", "provision_succeeded", reservation=alices_reservation)
