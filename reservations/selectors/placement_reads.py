"""What placement reads: the fleet's topology and the process's index of free capacity, each
kept per process while its version stands, and the nodes a failed switch cuts off.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import QuerySet

from core import clock
from core.kept import Kept
from fleet.fabric_health import RackNodes
from fleet.models import GPU, Node
from fleet.selectors import nodes_cut_off_in, rack_fabric_paths, troubled_switch_source
from fleet.services.network_attachments import held_source, hold_reasons
from reservations.free_capacity import FreeCapacity, RackState
from reservations.placement import RackCapacity
from reservations.selectors.holds import INSTANT, ids_of_each, not_free_sources, tested_source


@dataclass(frozen=True)
class Topology:
    """The fleet's racks and nodes as placement sees them, with every rack wholly free."""

    version: int
    racks: tuple[RackCapacity, ...]
    rack_ids: tuple[tuple[int, ...], ...]  # node ids of each rack, in slot order
    rack_of: dict[int, int]  # node id -> index into racks
    node_ids: dict[str, int]  # node name -> id


_topology: Kept[Topology] = Kept()


def topology() -> Topology:
    """The fleet's topology, read again only when enrolment changed it.

    Placement runs on every reservation; the topology changes on enrolment only, so it is kept
    per process and checked with one cheap query instead of being read whole each time.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT version FROM fleet_topology_version")  # see fleet/migrations/0004
        (version,) = cursor.fetchone()
    return _topology.get(version, lambda: _read_topology(version))


def _read_topology(version: int) -> Topology:
    paths = rack_fabric_paths()
    # A node's GPUs are of one model: its first GPU's names it.
    models = dict(GPU.objects.order_by("node_id", "index").distinct("node_id").values_list("node__name", "model"))
    racks: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    attributes: dict[str, dict] = {}
    rows = Node.objects.order_by("rack__pod__name", "rack__name", "position")
    for node_id, name, rack, pod, said in rows.values_list("id", "name", "rack__name", "rack__pod__name", "attributes"):
        racks[(pod, rack)].append((node_id, name))
        if said:
            attributes[name] = said
    members = [tuple(zip(*nodes, strict=True)) for nodes in racks.values()]
    return Topology(
        version=version,
        racks=tuple(
            RackCapacity(
                pod=pod,
                rack=rack,
                nodes=names,
                free=names,
                gpu_models={name: models[name] for name in names if name in models} or None,
                path=paths[rack],
                attributes={name: attributes[name] for name in names if name in attributes} or None,
            )
            for (pod, rack), (_, names) in zip(racks, members, strict=True)
        ),
        rack_ids=tuple(ids for ids, _ in members),
        rack_of={node_id: i for i, (ids, _) in enumerate(members) for node_id in ids},
        node_ids={name: node_id for ids, names in members for node_id, name in zip(ids, names, strict=True)},
    )


def rack_capacity(*, starts_at: datetime, ends_at: datetime | None, now: datetime | None = None) -> list[RackCapacity]:
    """Every rack with its nodes, those free for the period, and those with a recent long
    diagnostics pass (which placement prefers among equal choices).

    Free: no allocation overlaps the period, the node can serve then (available if the period
    starts by `now` (None: core.clock's), in service (not quarantined, in maintenance or still
    unenrolled) if later), and no
    unhealthy switch cuts it off from the fabric now (nodes_cut_off). Only the racks that hold a
    node that is not free, or a recently tested one, are looked at node by node.
    """
    fleet = topology()
    not_free, tested_ids = _not_free_and_tested(starts_at=starts_at, ends_at=ends_at, fleet=fleet, now=now)
    blocked, tested = _by_rack(fleet, not_free), _by_rack(fleet, tested_ids)
    racks = []
    for i, rack in enumerate(fleet.racks):
        ids = fleet.rack_ids[i]
        if i in blocked:
            out = blocked[i]
            free = tuple(name for node_id, name in zip(ids, rack.nodes, strict=True) if node_id not in out)
            rack = replace(rack, free=free)
        if i in tested:
            passed = frozenset(name for node_id, name in zip(ids, rack.nodes, strict=True) if node_id in tested[i])
            rack = replace(rack, recently_tested=passed)  # `free` stays the very tuple `nodes` if it was
        racks.append(rack)
    return racks


@dataclass
class _KeptFree:
    """The process's index of free capacity, and the nodes it was last told were not free or
    recently tested (by id)."""

    version: int
    capacity: FreeCapacity
    names: dict[int, str]  # node id -> name
    not_free: set[int] = field(default_factory=set)
    tested: set[int] = field(default_factory=set)


_kept_free: Kept[_KeptFree] = Kept()


_kept_free_lock = threading.Lock()  # one period at a time: the index is the process's, threads share it


@contextmanager
def free_capacity(
    *, starts_at: datetime, ends_at: datetime | None, fleet: Topology | None = None, now: datetime | None = None
) -> Iterator[FreeCapacity]:
    """The process's index of free capacity (reservations/free_capacity.py) as it is for the
    period, free as rack_capacity says (at `now`), held for the caller alone until the block ends.

    Built from the topology once per version; each call applies only the difference between the
    nodes not free for this period (one array query, the cut-off nodes, the recently tested) and
    those it applied last, so a request costs what changed since the last one, not the fleet.
    """
    fleet = fleet or topology()
    not_free, tested = _not_free_and_tested(starts_at=starts_at, ends_at=ends_at, fleet=fleet, now=now)
    with _kept_free_lock:
        kept = _kept_free.get(fleet.version, lambda: _fresh_index(fleet))
        names = kept.names
        kept.capacity.apply(
            freed=[names[i] for i in kept.not_free - not_free if i in names],
            taken=[names[i] for i in not_free - kept.not_free if i in names],
            tested=[names[i] for i in tested - kept.tested if i in names],
            untested=[names[i] for i in kept.tested - tested if i in names],
        )
        kept.not_free, kept.tested = not_free, tested
        yield kept.capacity


def _fresh_index(fleet: Topology) -> _KeptFree:
    """An index of the fleet with every node free and none tested."""
    racks = (
        RackState(
            rack.pod,
            rack.rack,
            rack.path,
            rack.nodes,
            frozenset(rack.nodes),
            gpu_models=rack.gpu_models,
            attributes=rack.attributes,
        )
        for rack in fleet.racks
    )
    return _KeptFree(
        version=fleet.version,
        capacity=FreeCapacity(racks),
        names={node_id: name for name, node_id in fleet.node_ids.items()},
    )


def warm_placement() -> None:
    """Read the topology and build the index of free capacity before a request needs them: at
    100,000 nodes that takes seconds, which a web process's first tenants would wait for."""
    now = clock.now()
    with free_capacity(starts_at=now, ends_at=now + INSTANT, now=now):
        pass


def nodes_cut_off(fleet: Topology | None = None, *, lasting: timedelta = timedelta(0)) -> dict[int, str]:
    """The ids of the nodes an unhealthy switch cuts off from the fabric, and of those held because
    their removal from a tenant's networks is not read back yet (network_cleanup_pending; a
    serving node is never held), each with why (fleet/fabric_health.py,
    fleet.services.network_attachments): placement gives them to nobody, for any period, until the
    switch manager reads their switch healthy again, or the fabrics their removal. With
    `lasting`, only switch trouble that has lasted so long."""
    return hold_reasons() | _switch_cut_off(fleet or topology(), lasting=lasting)


def _switch_cut_off(fleet: Topology, *, lasting: timedelta = timedelta(0)) -> dict[int, str]:
    """The ids of the nodes an unhealthy switch cuts off (nodes_cut_off_in), each with why."""
    racks = (
        RackNodes(pod=rack.pod, path=rack.path, ids=ids, names=rack.nodes)
        for rack, ids in zip(fleet.racks, fleet.rack_ids, strict=True)
    )
    return nodes_cut_off_in(racks, lasting=lasting)


def _by_rack(fleet: Topology, node_ids: Iterable[int]) -> dict[int, set[int]]:
    """The nodes by the index of their rack; nodes enrolled since the topology was read are left out
    (not placeable yet)."""
    racks: dict[int, set[int]] = defaultdict(set)
    for node_id in node_ids:
        if (rack := fleet.rack_of.get(node_id)) is not None:
            racks[rack].add(node_id)
    return racks


def _not_free_and_tested(
    *, starts_at: datetime, ends_at: datetime | None, fleet: Topology, now: datetime | None
) -> tuple[set[int], set[int]]:
    """The ids of the nodes not free for the period (not_free's, and those a switch cuts off), and
    of those with a recent long diagnostics pass: what placement's free capacity is read from."""
    sources = not_free_sources(starts_at=starts_at, ends_at=ends_at, now=now)
    not_free, (tested,) = not_free_ids(fleet, sources, [tested_source()])
    return not_free, set(tested)


def not_free_ids(
    fleet: Topology, not_free: Sequence[QuerySet], *others: Sequence[QuerySet]
) -> tuple[set[int], list[list[int]]]:
    """The ids `not_free`'s one-column queries select, with the nodes a tenant's network still
    holds and those a switch in trouble cuts off (nodes_cut_off); and the ids of each group of
    `others`: all in one round trip while no switch is in trouble, as most of the time."""
    first, *rest, troubled = ids_of_each([*not_free, held_source()], *others, [troubled_switch_source()])
    cut_off = _switch_cut_off(fleet) if troubled else {}
    return {*first, *cut_off}, rest
