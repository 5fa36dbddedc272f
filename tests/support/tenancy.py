"""A tenant's reservation as the end-to-end tests watch it."""

from __future__ import annotations

from fleet.models import Node, Pod
from reservations import services as reservations
from reservations.models import Reservation, Tenant
from tests.support.processes import wait_for


def state_of(reservation: Reservation) -> str:
    return Reservation.objects.values_list("state", flat=True).get(pk=reservation.pk)


def active_under_watch(control_plane, *, node_count: int = 4, pod: str = "p2") -> Reservation:
    """The whole stack started (Prometheus and Alertmanager too), every node available, and a
    tenant's reservation active on nodes that Prometheus scrapes."""
    monitoring = control_plane.start_stack()
    nodes = Node.objects.count()
    wait_for("every node available", lambda: Node.objects.filter(state="available").count() == nodes, 180)
    reservation = reservations.create_reservation(
        tenant=Tenant.objects.create(name="acme"), node_count=node_count, pod=Pod.objects.get(name=pod), actor="test"
    )
    wait_for("the reservation active", lambda: state_of(reservation) == "active", timeout=120)
    wait_for("Prometheus scraping every agent", lambda: monitoring.active_targets() == nodes, timeout=60)
    return reservation
