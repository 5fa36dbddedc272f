"""Free capacity as tenants see it: per pod now (GET /v1/capacity, counts kept per process and
kept up to date by deltas), and over time (for offers).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import NamedTuple

from django.conf import settings
from django.db import connection

from core import clock
from fleet.lifecycle import State
from fleet.models import Node
from reservations.capacity_counts import CapacityCounts, RackIds
from reservations.models import Allocation
from reservations.offers import Busy
from reservations.periods import START_GRACE
from reservations.selectors.holds import (
    IN_SERVICE_STATES,
    booking_limits,
    period,
    unusable,
)
from reservations.selectors.placement_reads import Topology, nodes_cut_off, not_free_ids, topology


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


@dataclass
class _KeptCounts:
    """The process's counts of free capacity, at the versions they were last read at."""

    counts: CapacityCounts  # of the topology version `topology`
    topology: int
    versions: tuple[int, int] | None = None  # (capacity version, topology version)
    read_at: float = 0.0  # time.monotonic() before they were read


_kept_counts: list[_KeptCounts] = []  # none yet, or the one
_kept_counts_lock = threading.Lock()  # one reader applies a change, the others wait for it


def capacity_versions() -> tuple[int, int]:
    """The capacity version (moved by every statement that changes what is free) and the
    topology's, in one round trip: reservations/migrations/0013 and fleet/migrations/0004. What is
    kept of the fleet's free capacity, here and on the floor, stands while they do."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.last_value, t.version FROM reservations_capacity_version_seq s, fleet_topology_version t"
        )
        capacity, topology_version = cursor.fetchone()
    return capacity, topology_version


class CapacityAnswer(NamedTuple):
    depth: int  # the fabric levels listed below each pod
    pods: list[dict]


def capacity_by_pod(*, now: datetime | None = None, depth: int | None = None) -> list[dict]:
    """Per pod: nodes, nodes free now, nodes free now and for as long as a reservation without
    ends_at lasts (no later booking holds them), racks whose every node is free now, and its
    fabric domains as a tree `depth` levels down (None: down to its racks), with their nodes and
    those free now (a domain at the cut lists no children). A node an unhealthy switch cuts off
    is free for none of them.

    Anyone may ask (the public listener serves it): the counts are kept per process
    (reservations/capacity_counts.py) and the answer shared by its callers (who must not change
    it). When the capacity or topology version moves, or the counts are CAPACITY_MAX_AGE_SECONDS
    old (a hold starting or ending changes "free now" with no row written), the nodes not free
    are read again, in one round trip, and only those that changed are counted again. The
    capacity version is a sequence, which moves outside transactions: a reader can see the
    version a writer moved before the writer commits, count without the change and keep that
    under the new version, where it stays at most the maximum age.

    Inside a transaction the answer is counted afresh, neither kept nor taken from the kept one:
    it may hold the transaction's own uncommitted changes, which a rollback takes back while the
    version they moved stays.

    Counted at `now` (None: the database's clock): kept counts stand for a later `now` as for
    the clock moving, until the maximum age.
    """
    return _capacity(now, lambda counts: counts.levels if depth is None else depth).pods


def capacity_listing(*, depth: int | None = None, now: datetime | None = None) -> CapacityAnswer:
    """capacity_by_pod's answer `depth` levels down, and the depth it went to: by default the
    whole tree while the fleet is small, else as deep as lists about a thousand domains
    (CapacityCounts.default_depth)."""
    return _capacity(now, lambda counts: counts.default_depth() if depth is None else depth)


def _capacity(now: datetime | None, depth_of: Callable[[CapacityCounts], int]) -> CapacityAnswer:
    if not connection.get_autocommit():
        fleet = topology()
        counts = CapacityCounts(_racks(fleet))
        counts.apply(*_not_free(fleet, now))
        return _listed(counts, depth_of(counts))
    versions = capacity_versions()
    with _kept_counts_lock:
        kept = _kept_counts[0] if _kept_counts else None
        if (
            kept is None
            or kept.versions != versions
            or time.monotonic() - kept.read_at >= settings.CAPACITY_MAX_AGE_SECONDS
        ):
            started = time.monotonic()
            fleet = topology()
            if kept is None or kept.topology != fleet.version:
                kept = _KeptCounts(CapacityCounts(_racks(fleet)), fleet.version)
                _kept_counts[:] = [kept]
            kept.counts.apply(*_not_free(fleet, now))
            kept.versions, kept.read_at = versions, started
        return _listed(kept.counts, depth_of(kept.counts))


def _listed(counts: CapacityCounts, depth: int) -> CapacityAnswer:
    depth = min(depth, counts.levels)
    return CapacityAnswer(depth, counts.pods(depth))


def _racks(fleet: Topology) -> list[RackIds]:
    return [
        RackIds(pod=rack.pod, path=rack.path, rack=rack.rack, ids=ids)
        for rack, ids in zip(fleet.racks, fleet.rack_ids, strict=True)
    ]


def _not_free(fleet: Topology, now: datetime | None) -> tuple[set[int], set[int]]:
    """The ids of the nodes not free at `now` (None: the database's Now(), in the query itself),
    and of those not free from then for as long as a reservation without ends_at may last: both
    read in one round trip, with the nodes cut off (nodes_cut_off)."""
    start = clock.in_query(now)
    allocations = Allocation.objects.order_by()  # unordered: no join, no sort of thousands of rows
    held_now = allocations.filter(period__contains=start).values_list("node_id")
    # What holds a node later within the longest reservation starts after `now`: bounds alone,
    # cheaper to compare than ranges over every allocation.
    longest = start + booking_limits().max_duration
    held_later = allocations.filter(period__startswith__gt=start, period__startswith__lt=longest)
    # As rack_capacity's for a period that has started: a node being repaired waits for its verdict.
    unusable_now = unusable(started=True).values_list("id")
    now_ids, (later,) = not_free_ids(fleet, [held_now, unusable_now], [held_later.values_list("node_id")])
    return now_ids, now_ids.union(later)
