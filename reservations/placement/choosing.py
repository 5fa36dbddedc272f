"""Which nodes a request gets: `place` over the racks it is given, `place_in` over the service's
index of free capacity; each hands the choice to the greedy by pod or to the objective.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from core.topology import NVLINK_DOMAIN, POD
from reservations.free_capacity import FreeCapacity, RackState
from reservations.placement.greedy import place_in_pods
from reservations.placement.objective import Objective
from reservations.placement.request import PlacementRefused, PlacementRequest, RackCapacity
from reservations.placement.scope import check_levels, fabric_levels, pods_in_scope


def place(request: PlacementRequest, racks: Sequence[RackCapacity]) -> list[str]:
    """The chosen node names, all in one domain of the required level, or PlacementRefused.

    Builds an index of just the racks in the request's scope, seen through it (its GPU model and
    attributes), and places over it. ValueError for a node_count below one or inconsistent
    capacity: those are the caller's bugs.
    """
    pods = pods_in_scope(request, racks)
    levels = fabric_levels(request, racks)
    view = FreeCapacity(
        RackState(r.pod, r.name, r.path, r.nodes, frozenset(r.usable), frozenset(r.usable[: r.tested]), r.whole)
        for rs in pods.values()
        for r in rs
    )
    return _place(request, view, levels, 0, len(view.names))


def place_in(request: PlacementRequest, capacity: FreeCapacity) -> list[str]:
    """`place` over the service's index of the whole fleet, brought to the requested period.

    Reads only the domains in the request's scope that are partly used and as many wholly free
    ones of each signature as the request can use. A request with a GPU model or attributes takes
    the slower path: every rack seen through its selectors, as `place` does. So does one `within`
    a domain below its required level, over that domain's racks only.
    """
    if request.gpu_model is not None or request.attributes:
        return place(request, _rack_capacity(capacity, range(len(capacity.names))))
    if request.node_count < 1:
        raise ValueError(f"node_count must be at least 1, not {request.node_count}")
    lo, hi = 0, len(capacity.names)
    if request.pod is not None:
        if request.pod not in capacity.pods:
            raise PlacementRefused(f"pod {request.pod} does not exist")
        lo = capacity.pods[request.pod]
        hi = capacity.end[lo]
    within = capacity.ids.get(request.within) if request.within is not None else None
    if request.within is not None:
        if within is None:
            raise PlacementRefused(f"domain {request.within} does not exist")
        lo, hi = max(lo, within), min(hi, capacity.end[within])
    if lo >= hi:
        raise PlacementRefused("no rack is known to placement")
    levels = check_levels(request, (POD, *capacity.switch_levels, NVLINK_DOMAIN))
    if within is not None and capacity.depth[within] > levels.index(request.required):
        return place(request, _rack_capacity(capacity, range(within, capacity.end[within])))
    return _place(request, capacity, levels, lo, hi)


def _rack_capacity(capacity: FreeCapacity, domains: Iterable[int]) -> list[RackCapacity]:
    """The racks among `domains` as they are now, for the slower path."""
    racks = []
    for domain in domains:
        if (given := capacity.racks.get(domain)) is not None:
            usable = capacity.usable_nodes[domain]
            free = given.nodes if len(usable) == len(given.nodes) else tuple(n for n in given.nodes if n in usable)
            racks.append(
                RackCapacity(
                    pod=given.pod,
                    rack=given.rack,
                    nodes=given.nodes,
                    free=free,
                    gpu_models=given.gpu_models,
                    recently_tested=frozenset(capacity.tested_nodes[domain]),
                    path=given.path,
                    attributes=given.attributes,
                )
            )
    return racks


def _place(request: PlacementRequest, capacity: FreeCapacity, levels: tuple[str, ...], lo: int, hi: int) -> list[str]:
    """Place in the domains with ids [lo, hi); the direct greedy where there is nothing to span."""
    whole = request.whole_level
    if len(levels) == 2 and request.required == POD and request.preferred in (None, POD) and whole != POD:
        return place_in_pods(request, capacity, [pod for pod in capacity.pods.values() if lo <= pod < hi])
    return Objective(request, capacity, levels).place(lo, hi)
