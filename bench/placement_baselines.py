"""What best-fit placement (reservations.placement.place) is measured against: first-fit, random
placement, and the count of whole free racks that tells them apart. Used by
bench/placement_quality.py and by the placement tests; never by the control plane.

The baselines see a request and the racks through placement's own helpers, so that the
comparison differs only in the choice each makes.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence

from reservations.placement import (
    PlacementRefused,
    PlacementRequest,
    RackCapacity,
    _first_whole_racks,
    _pods_in_scope,
    _rack_scale_refusal,
    _shortage_refusal,
    _usable_nodes,
)

Strategy = Callable[[PlacementRequest, Sequence[RackCapacity]], list[str]]


def first_fit(request: PlacementRequest, racks: Sequence[RackCapacity]) -> list[str]:
    """The first pod by name that can hold the request; within it, free nodes in rack and slot order."""
    pods = _pods_in_scope(request, racks)
    count = request.node_count
    for rs in pods.values():
        if request.rack_scale:
            chosen = _first_whole_racks([r for r in rs if r.whole_usable], count)
            if chosen is not None:
                return [node for rack in chosen for node in rack.nodes]
        elif _usable_nodes(rs) >= count:
            return [node for rack in rs for node in rack.usable][:count]
    raise PlacementRefused(
        _rack_scale_refusal(request, pods) if request.rack_scale else _shortage_refusal(request, pods)
    )


def random_fit(seed: int) -> Strategy:
    """A strategy that picks a random feasible pod and random nodes (or whole racks) in it.

    It keeps its own random.Random, so a sequence of calls is reproducible from the seed.
    """
    rng = random.Random(seed)

    def strategy(request: PlacementRequest, racks: Sequence[RackCapacity]) -> list[str]:
        pods = _pods_in_scope(request, racks)
        count = request.node_count
        if request.rack_scale:
            options = {}
            for pod, rs in pods.items():
                wholes = [r for r in rs if r.whole_usable]
                rng.shuffle(wholes)
                if (chosen := _first_whole_racks(wholes, count)) is not None:
                    options[pod] = [node for rack in chosen for node in rack.nodes]
            if not options:
                raise PlacementRefused(_rack_scale_refusal(request, pods))
            return options[rng.choice(sorted(options))]
        feasible = [pod for pod, rs in pods.items() if _usable_nodes(rs) >= count]
        if not feasible:
            raise PlacementRefused(_shortage_refusal(request, pods))
        return rng.sample([node for rack in pods[rng.choice(feasible)] for node in rack.usable], count)

    return strategy


def count_whole_free_racks(racks: Iterable[RackCapacity], *, pod: str | None = None) -> int:
    """Racks (of `pod`, or of all pods) whose every node is free: what rack-scale requests need."""
    return sum(1 for r in racks if r.nodes and (pod is None or r.pod == pod) and set(r.nodes) <= set(r.free))
