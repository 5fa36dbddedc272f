"""What the API's answers about a reservation read: its machines, nodes, SSH keys, networks, and
the tenant's quota and use of it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db.models import QuerySet

from core import clock
from fleet.models import Node
from fleet.network_selectors import NO_NETWORKS, networks_by_reservation, private_address_of_node
from reservations import usage
from reservations.models import Reservation, ReservationState, Tenant
from reservations.selectors.holds import (
    INSTANT,
    booking_limits,
    live_allocations,
    node_hours_booked,
    nodes_held,
    tenant_quota,
)


def reservation_machines(reservations: list[Reservation]) -> dict[int, list[dict]]:
    """The nodes serving each reservation now, with what a tenant needs to reach them."""
    machines: dict[int, list[dict]] = defaultdict(list)
    # A reservation is provisioning before its first node is: a pending one has none serving.
    started = [r for r in reservations if r.state != ReservationState.PENDING]
    if not started:
        return machines
    serving = (
        Node.objects.filter(reservation__in=started)
        .select_related("address__pool")
        .annotate(private_address=private_address_of_node())
        .order_by("name")
    )
    for node in serving:
        assert node.reservation_id is not None  # it serves one of `started`
        address = getattr(node, "address", None)
        machines[node.reservation_id].append(
            {
                "name": node.name,
                "state": node.state,
                "address": address.address if address else None,
                "ssh_port": address.pool.ssh_port if address else None,
                "host_key_fingerprint": node.ssh_host_key_fingerprint or None,
                "private_address": node.private_address,
            }
        )
    return machines


def networks_of_reservations(reservations: list[Reservation]) -> dict[int, dict]:
    """Each reservation's networks on every fabric (fleet.network_selectors), in one query; a
    reservation not given any yet has none on any fabric."""
    found = networks_by_reservation(r.pk for r in reservations if r.state != ReservationState.PENDING)
    return {r.pk: found.get(r.pk, dict(NO_NETWORKS)) for r in reservations}


def reservation_nodes(reservations: list[Reservation]) -> dict[int, list[str]]:
    """Names of the nodes each reservation holds now (or will hold, if it starts later)."""
    return _placed_or_read(
        reservations,
        lambda r: r.placed_nodes,
        lambda unknown: (
            live_allocations()
            .filter(reservation__in=unknown)
            .order_by("node__name")
            .values_list("reservation_id", "node__name")
        ),
    )


def reservation_ssh_keys(reservations: list[Reservation]) -> dict[int, list[int]]:
    """Ids of the keys that may log in to each reservation's nodes, in the order of their names."""
    return _placed_or_read(
        reservations,
        lambda r: r.placed_ssh_keys,
        lambda unknown: (
            Reservation.ssh_keys.through.objects.filter(reservation__in=unknown)
            .order_by("sshkey__name")
            .values_list("reservation_id", "sshkey_id")
        ),
    )


def _placed_or_read(
    reservations: list[Reservation],
    placed: Callable[[Reservation], list | None],
    read: Callable[[list[Reservation]], QuerySet],
) -> dict[int, list]:
    """Per reservation, what the service that created it left on it (`placed`), or else the values
    of the (reservation id, value) rows `read` selects for the others, in its order."""
    found: dict[int, list] = defaultdict(list)
    found.update((r.pk, values) for r in reservations if (values := placed(r)) is not None)
    if unknown := [r for r in reservations if placed(r) is None]:
        for reservation_id, value in read(unknown):
            found[reservation_id].append(value)
    return found


def quota_of(tenant: Tenant, *, now: datetime | None = None) -> dict:
    """The tenant's limits and what it holds at `now` (None: core.clock's): GET /v1/quota."""
    quota = tenant_quota(tenant)
    limits = booking_limits(quota)
    now = now or clock.now()
    held = nodes_held(tenant, now, now + INSTANT)
    return {
        "limits": {
            "nodes": quota.nodes if quota else None,
            "nodes_per_pod": quota.nodes_per_pod if quota else None,
            "node_hours_per_month": quota.node_hours_per_month if quota else None,
            "booking_horizon_days": limits.horizon / timedelta(days=1),
            "max_duration_days": limits.max_duration / timedelta(days=1),
        },
        "used": {
            "nodes": sum(held.values()),
            "nodes_per_pod": dict(sorted(held.items())),
            "node_hours_this_month": round(node_hours_booked(tenant, usage.calendar_month(now)), 1),
        },
    }
