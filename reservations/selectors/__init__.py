"""Reads for placement and the tenants' API, a module a concern: `holds` (what holds nodes),
`placement_reads` (the topology and index of free capacity placement reads, kept per process),
`capacity_reads` (free capacity as tenants see it), `answers` (what the API says of a
reservation) and `usage_reads`. Callers import the names below from here."""

from reservations.selectors.answers import quota_of, reservation_machines, reservation_nodes, reservation_ssh_keys
from reservations.selectors.capacity_reads import (
    capacity_by_pod,
    capacity_listing,
    capacity_over_time,
    capacity_versions,
)
from reservations.selectors.holds import (
    INSTANT,
    booking_limits,
    live_allocations,
    node_hours_booked,
    nodes_held,
    period,
    tenant_quota,
)
from reservations.selectors.placement_reads import (
    Topology,
    free_capacity,
    nodes_cut_off,
    rack_capacity,
    topology,
    warm_placement,
)
from reservations.selectors.usage_reads import usage_of

__all__ = [
    "INSTANT",
    "Topology",
    "booking_limits",
    "capacity_by_pod",
    "capacity_listing",
    "capacity_over_time",
    "capacity_versions",
    "free_capacity",
    "live_allocations",
    "node_hours_booked",
    "nodes_cut_off",
    "nodes_held",
    "period",
    "quota_of",
    "rack_capacity",
    "reservation_machines",
    "reservation_nodes",
    "reservation_ssh_keys",
    "tenant_quota",
    "topology",
    "usage_of",
    "warm_placement",
]
