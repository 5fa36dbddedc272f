"""Free capacity as tenants see it: per pod now (GET /v1/capacity, kept per process), and over
time (for offers).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from django.conf import settings
from django.db import connection

from core.kept import Kept
from fleet import fabric
from fleet.lifecycle import State
from fleet.models import Node
from reservations.models import Allocation
from reservations.offers import Busy
from reservations.periods import START_GRACE
from reservations.selectors.holds import IN_SERVICE_STATES, INSTANT, booking_limits, not_free_for, period
from reservations.selectors.placement_reads import nodes_cut_off, topology


def capacity_over_time(*, earliest: datetime, until: datetime, pod: str | None = None):
    """What an earliest-start offer is computed from: every rack with its nodes that can serve at
    all as free, and when the others are busy between `earliest` and `until` (their holds, and a
    minute for a node in service but not available yet, as after its last tenant). A node an
    unhealthy switch cuts off cannot serve: nobody knows when the switch is back."""
    fleet = topology()
    names = {node_id: name for name, node_id in fleet.node_ids.items()}
    states = dict(Node.objects.exclude(state=State.AVAILABLE).order_by().values_list("id", "state"))
    cut_off = nodes_cut_off(fleet)

    def can_serve(node_id: int) -> bool:
        return node_id not in cut_off and states.get(node_id, State.AVAILABLE) in IN_SERVICE_STATES

    racks = []
    for rack, ids in zip(fleet.racks, fleet.rack_ids, strict=True):
        if pod is not None and rack.pod != pod:
            continue
        if not all(map(can_serve, ids)):
            free = tuple(name for node_id, name in zip(ids, rack.nodes, strict=True) if can_serve(node_id))
            rack = replace(rack, free=free)
        racks.append(rack)
    holds = Allocation.objects.filter(period__overlap=period(earliest, until)).order_by()
    busy = [
        Busy(names[node_id], lower, upper or until)
        for node_id, lower, upper in holds.values_list("node_id", "period__startswith", "period__endswith")
        if node_id in names
    ]
    busy += [
        Busy(names[node_id], earliest, earliest + START_GRACE)
        for node_id, state in states.items()
        if state in IN_SERVICE_STATES and node_id in names
    ]
    return racks, busy


_kept_capacity: Kept[list[dict]] = Kept()  # at (capacity version, topology version)


# Both versions in one round trip: reservations/migrations/0013 and fleet/migrations/0004.
_CAPACITY_VERSIONS = "SELECT s.last_value, t.version FROM reservations_capacity_version_seq s, fleet_topology_version t"


def capacity_by_pod(*, now: datetime | None = None) -> list[dict]:
    """Per pod: nodes, nodes free now, nodes free now and for as long as a reservation without
    ends_at lasts (no later booking holds them), racks whose every node is free now, and its
    fabric domains as a tree down to its racks, with their nodes and those free now. A node an
    unhealthy switch cuts off is free for none of them.

    Anyone may ask (the public listener serves it), and counting walks every rack: the answer is
    kept per process, shared by its callers (who must not change it), and computed again when the
    capacity or topology version moves or it is CAPACITY_MAX_AGE_SECONDS old, since a hold
    starting or ending changes "free now" with no row written. The capacity version is a
    sequence, which moves outside transactions: a reader can see the version a writer moved
    before the writer commits, count without the change and keep that answer under the new
    version, where it stays at most the maximum age.

    Inside a transaction the answer is counted afresh, neither kept nor taken from the kept one:
    it may hold the transaction's own uncommitted changes, which a rollback takes back while the
    version they moved stays.

    Counted at `now` (None: the database's clock): a kept answer stands for a later `now` as for
    the clock moving, until the maximum age.
    """
    if not connection.get_autocommit():
        return _count_capacity(now)
    with connection.cursor() as cursor:
        cursor.execute(_CAPACITY_VERSIONS)
        versions = cursor.fetchone()
    return _kept_capacity.get(versions, lambda: _count_capacity(now), max_age=settings.CAPACITY_MAX_AGE_SECONDS)


def _count_capacity(now: datetime | None) -> list[dict]:
    """capacity_by_pod's answer, from the allocations, nodes and switches as they are at `now`
    (None: the database's Now(), in the queries themselves: a count costs no round trip for it)."""
    fleet = topology()
    # Counts only: no rack's free nodes are listed, as placement needs them.
    cut_off = nodes_cut_off(fleet).keys()
    busy_now = {*not_free_for(INSTANT, now=now), *cut_off}
    busy_open_ended = {*not_free_for(booking_limits().max_duration, now=now), *cut_off}
    pods: dict[str, dict] = {}
    loads = []
    for rack, ids in zip(fleet.racks, fleet.rack_ids, strict=True):
        summary = pods.setdefault(
            rack.pod,
            {"name": rack.pod, "nodes": 0, "available": 0, "free_open_ended": 0, "whole_free_racks": 0},
        )
        free_now = sum(node_id not in busy_now for node_id in ids)
        summary["nodes"] += len(ids)
        summary["available"] += free_now
        summary["free_open_ended"] += sum(node_id not in busy_open_ended for node_id in ids)
        summary["whole_free_racks"] += free_now == len(ids)
        loads.append(fabric.RackLoad(pod=rack.pod, path=rack.path, rack=rack.rack, nodes=len(ids), available=free_now))
    trees = fabric.domain_tree(loads)
    return [{**pods[name], "domains": trees[name]} for name in sorted(pods)]
