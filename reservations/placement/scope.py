"""What a request may use: the racks in its scope seen through its GPU model and attributes,
and the fabric's levels it names; inconsistent capacity refused.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from core.topology import NVLINK_DOMAIN, POD
from reservations.placement.refusals import selectors_of
from reservations.placement.request import PlacementRefused, PlacementRequest, Rack, RackCapacity


def pods_in_scope(request: PlacementRequest, racks: Sequence[RackCapacity]) -> dict[str, list[Rack]]:
    """The pods the request may use, by name, each with its racks by name, seen through the request."""
    if request.node_count < 1:
        raise ValueError(f"node_count must be at least 1, not {request.node_count}")
    _check_capacity(racks)
    if request.pod is not None and all(r.pod != request.pod for r in racks):
        raise PlacementRefused(f"pod {request.pod} does not exist")
    within = request.within
    if within is not None and all(within not in r.domains for r in racks):
        raise PlacementRefused(f"domain {within} does not exist")
    model, wanted = request.gpu_model, request.attributes
    any_node = model is None and not wanted
    pods: dict[str, list[Rack]] = defaultdict(list)
    selectors_present = any_node
    for r in sorted(racks, key=lambda r: (r.pod, r.rack)):
        # A rack with no nodes can hold nothing and is no NVLink domain to keep whole.
        if not r.nodes or request.pod not in (None, r.pod) or (within and within not in r.domains):
            continue
        if any_node and r.free is r.nodes:  # a wholly free rack, as the service hands most of them
            usable, tested = _tested_first(r.nodes, r.recently_tested)
            pods[r.pod].append(Rack(r.pod, r.rack, r.nodes, usable, True, True, tested, r.path))
            continue
        free = set(r.free)  # a subset of r.nodes: _check_capacity made sure
        if any_node:
            usable = r.nodes if len(free) == len(r.nodes) else tuple(n for n in r.nodes if n in free)
        else:
            selected = _selected(request, r)
            usable = tuple(n for n in r.nodes if n in free and n in selected)
            selectors_present = selectors_present or bool(selected)
        whole = len(free) == len(r.nodes)
        usable, tested = _tested_first(usable, r.recently_tested)
        whole_usable = whole and len(usable) == len(r.nodes)
        pods[r.pod].append(Rack(r.pod, r.rack, r.nodes, usable, whole, whole_usable, tested, r.path))
    if not pods:
        raise PlacementRefused("no rack is known to placement")
    if not selectors_present:
        where = f"in pod {request.pod} " if request.pod else ""
        raise PlacementRefused(f"no node {where}has {selectors_of(request)}")
    return dict(sorted(pods.items()))


def _selected(request: PlacementRequest, rack: RackCapacity) -> set[str]:
    """The rack's nodes, free or not, of the requested GPU model and attributes."""
    models, attributes = rack.gpu_models or {}, rack.attributes or {}
    return {
        node
        for node in rack.nodes
        if request.gpu_model in (None, models.get(node))
        and all(attributes.get(node, {}).get(key) == value for key, value in request.attributes.items())
    }


def fabric_levels(request: PlacementRequest, racks: Sequence[RackCapacity]) -> tuple[str, ...]:
    """The fleet's levels, top down, from the racks' paths, checked by check_levels. ValueError if
    the racks disagree."""
    shapes = {tuple(level for level, _ in r.path) if r.path else () for r in racks}
    if len(shapes) > 1:
        raise ValueError(f"racks name different fabric levels: {sorted(shapes)}")
    return check_levels(request, (POD, *shapes.pop(), NVLINK_DOMAIN))


def check_levels(request: PlacementRequest, levels: tuple[str, ...]) -> tuple[str, ...]:
    """The fleet's levels; a refusal for a request naming another level or whole domains wider than
    its required one."""
    for level in (request.required, request.preferred, request.whole):
        if level is not None and level not in levels:
            raise PlacementRefused(f"the fabric has no level {level}; its levels are {', '.join(levels)}")
    whole = request.whole_level
    if whole is not None and levels.index(whole) < levels.index(request.required):
        raise PlacementRefused(f"whole {whole} domains cannot stay inside one {request.required}")
    return levels


def _tested_first(usable: tuple[str, ...], tested: frozenset[str]) -> tuple[tuple[str, ...], int]:
    """The usable nodes with the recently tested ones first, each group in slot order; and how many
    of them are recently tested."""
    if not tested:
        return usable, 0
    first = tuple(n for n in usable if n in tested)
    return first + tuple(n for n in usable if n not in tested), len(first)


def _check_capacity(racks: Sequence[RackCapacity]) -> None:
    """Refuse input that could make placement pick an unknown node or one node twice."""
    every_node = [node for r in racks for node in r.nodes]
    if len({(r.pod, r.rack) for r in racks}) == len(racks) and len(set(every_node)) == len(every_node):
        suspects = [r for r in racks if r.free is not r.nodes]  # the rest are free in full: nothing to check
    else:
        suspects = list(racks)
    seen_racks: set[tuple[str, str]] = set()
    seen_nodes: set[str] = set()
    for r in suspects:
        if (r.pod, r.rack) in seen_racks:
            raise ValueError(f"rack {r.rack} of pod {r.pod} is listed twice")
        seen_racks.add((r.pod, r.rack))
        nodes = set(r.nodes)
        if len(nodes) != len(r.nodes) or nodes & seen_nodes:
            raise ValueError(f"rack {r.rack} lists a node twice or a node of another rack")
        seen_nodes |= nodes
        if not nodes.issuperset(r.free):
            raise ValueError(f"rack {r.rack} lists free nodes that are not its nodes: {sorted(set(r.free) - nodes)}")
