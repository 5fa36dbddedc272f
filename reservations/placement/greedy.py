"""The direct greedy by pod, for a fleet without switch levels and a request by pod and rack
only: nothing to span, so no objective to solve.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from core.topology import POD
from reservations.free_capacity import FreeCapacity, SignatureKey
from reservations.placement.refusals import refusal
from reservations.placement.request import PlacementRefused, PlacementRequest
from reservations.placement.sums import fewest_by_size


def place_in_pods(request: PlacementRequest, capacity: FreeCapacity, pods: list[int]) -> list[str]:
    """The objective where the fabric has no switch level and the request is by pod and rack only.

    With no pod given, the pod is the one that breaks the fewest whole racks, then the one with
    the fewest usable free nodes (the tightest fit), then the first by name; for whole racks, the
    one that needs the fewest racks, then the least whole capacity, then the name. Racks of one
    signature are interchangeable: each pod is read as its groups of racks, not rack by rack.
    """
    count = request.node_count
    if request.whole_level:
        options = {pod: chosen for pod in pods if (chosen := _fewest_whole_racks_in(capacity, pod, count)) is not None}
        if not options:
            raise PlacementRefused(refusal(request, capacity, POD, pods, capacity.rack_depth))
        # Fewest racks first; then the pod with the least whole capacity, so bigger pods keep theirs.
        pod = min(options, key=lambda p: (len(options[p]), capacity.unit_capacity(p, capacity.rack_depth), p))
        return [node for rack in options[pod] for node in capacity.nodes[rack]]

    fits = {pod: _best_fit_in(capacity, pod, count, request.near) for pod in pods if capacity.usable[pod] >= count}
    if not fits:
        raise PlacementRefused(refusal(request, capacity, POD, pods))
    # Breaking no whole rack beats fitting tightly: a tighter pod that must break a rack loses
    # to a roomier one that can use its partly used racks.
    pod = min(fits, key=lambda p: (sum(capacity.rack_whole(r) for r, _ in fits[p]), capacity.usable[p], p))
    return [node for rack, taken in fits[pod] for node in capacity.ordered_usable(rack)[:taken]]


def _rack_groups(capacity: FreeCapacity, pod: int) -> Iterable[tuple[SignatureKey, list[int]]]:
    """The pod's racks by signature: ((size, usable, tested usable, whole), racks in name order)."""
    for sig, racks in capacity.groups[pod].items():
        yield capacity.signatures.keys[sig], racks


def _best_fit_in(capacity: FreeCapacity, pod: int, count: int, near: frozenset[str]) -> list[tuple[int, int]]:
    """(rack, nodes taken) pairs: the racks `near` first, then partly used racks, and whole racks
    only for what they cannot hold."""
    near_racks = {
        rack
        for name in near
        if (rack := capacity.ids.get(name)) is not None and rack in capacity.nodes and capacity.parent[rack] == pod
    }
    partly: list[tuple[int, int, list[int]]] = []
    whole: list[tuple[int, int, list[int]]] = []
    for (_, usable, tested, is_whole), racks in _rack_groups(capacity, pod):
        if usable:
            (whole if is_whole else partly).append((usable, tested, racks))
    picks = _tightest_first([(capacity.usable[r], capacity.tested[r], [r]) for r in sorted(near_racks)], count, set())
    for sources in (partly, whole):
        picks += _tightest_first(sources, count - sum(taken for _, taken in picks), near_racks)
    return picks


def _tightest_first(sources: list[tuple[int, int, list[int]]], count: int, skip: set[int]) -> list[tuple[int, int]]:
    """The rack with the fewest usable nodes that holds the rest; if none does, the one with the
    most (fewest racks touched), then go on. Ties go to the rack with the most recently tested
    nodes, then to the rack first by name. `sources` are racks as (usable, tested, racks in name
    order), each group read from its first rack not yet taken."""
    cursors = [0] * len(sources)
    picks = []
    while count > 0:
        heads = []
        for i, (usable, tested, racks) in enumerate(sources):
            while cursors[i] < len(racks) and racks[cursors[i]] in skip:
                cursors[i] += 1
            if cursors[i] < len(racks):
                heads.append((usable, -tested, racks[cursors[i]], i))
        if not heads:
            break
        fitting = [head for head in heads if head[0] >= count]
        usable, _, rack, i = min(fitting) if fitting else min(heads, key=lambda h: (-h[0], h[1], h[2]))
        cursors[i] += 1
        taken = min(count, usable)
        picks.append((rack, taken))
        count -= taken
    return picks


def _fewest_whole_racks_in(capacity: FreeCapacity, pod: int, count: int) -> list[int] | None:
    """The pod's wholly usable racks whose sizes add up to exactly `count`, as few as possible (see
    fewest_whole_racks), by name; None if none do."""
    plan = fewest_by_size(capacity.units[pod][capacity.rack_depth], count)
    if plan is None:
        return None
    by_size: dict[int, list[tuple[int, list[int]]]] = defaultdict(list)
    for (size, usable, tested, whole), racks in _rack_groups(capacity, pod):
        if whole and usable == size:
            by_size[size].append((tested, racks))
    chosen = []
    for size, how_many in plan:
        # Of racks of one size, those with the most recently tested nodes are taken first.
        ordered = [rack for _, racks in sorted(by_size[size], key=lambda g: -g[0]) for rack in racks]
        chosen += ordered[:how_many]
    return sorted(chosen)
