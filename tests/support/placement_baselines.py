"""What best-fit placement (reservations.placement.place) is measured against: first-fit, random
placement, a Kueue-style most-free-first, and the counts of whole free domains that tell them
apart. Used by bench/placement_quality.py and by the placement tests; never by the control plane.

The baselines see a request and the racks through placement's own helpers and the reference
walk's objective (tests/support/placement_reference.py: the domains of the required level, the whole
units, the refusals), so that the comparison differs only in the choice each makes.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

from core.topology import NVLINK_DOMAIN
from reservations.placement import PlacementRefused, PlacementRequest, RackCapacity
from reservations.placement.request import Rack
from reservations.placement.scope import fabric_levels, pods_in_scope
from tests.support.placement_reference import _Objective

Strategy = Callable[[PlacementRequest, Sequence[RackCapacity]], list[str]]
Domains = dict[tuple[str, ...], list[Rack]]


def first_whole_units(sizes: list[int], count: int) -> list[int] | None:
    """The indexes of the first units in the given order whose sizes add up to exactly `count`;
    None if none do.

    reachable[i] has bit s set when sizes[i:] hold a subset of total s, so walking the units in
    order we take each one that still leaves the rest reachable.
    """
    mask = (1 << (count + 1)) - 1
    reachable = [1] * (len(sizes) + 1)
    for i in reversed(range(len(sizes))):
        reachable[i] = (reachable[i + 1] | reachable[i + 1] << sizes[i]) & mask
    if not reachable[0] >> count & 1:
        return None
    chosen: list[int] = []
    remainder = count
    for i, size in enumerate(sizes):
        if remainder == 0:
            break
        if size <= remainder and reachable[i + 1] >> (remainder - size) & 1:
            chosen.append(i)
            remainder -= size
    return chosen


def _scope(request: PlacementRequest, racks: Sequence[RackCapacity]) -> tuple[_Objective, Domains]:
    pods = pods_in_scope(request, racks)
    objective = _Objective(request, fabric_levels(request, racks))
    return objective, objective.domains(pods)


def _fill(objective: _Objective, racks: list[Rack], count: int) -> list[str] | None:
    """The first nodes of `racks` in the given order, or the first whole units adding up to
    `count`; None if they cannot hold the request."""
    if objective.whole is None:
        usable = [node for rack in racks for node in rack.usable]
        return usable[:count] if len(usable) >= count else None
    units = objective.whole_units(racks)
    chosen = first_whole_units([sum(r.size for r in unit) for unit in units], count)
    return None if chosen is None else [node for i in chosen for rack in units[i] for node in rack.nodes]


def first_fit(request: PlacementRequest, racks: Sequence[RackCapacity]) -> list[str]:
    """The first domain of the required level by name that can hold the request; within it, free
    nodes (or whole units) in fabric, rack and slot order."""
    objective, domains = _scope(request, racks)
    for rs in domains.values():
        if (chosen := _fill(objective, rs, request.node_count)) is not None:
            return chosen
    raise PlacementRefused(objective.refusal(domains))


def most_free_first(request: PlacementRequest, racks: Sequence[RackCapacity]) -> list[str]:
    """Kueue-style topology-aware placement: the domain of the required level with the most free
    capacity, and within it, at each level down, the domain with the most free capacity first
    (fewest domains spanned, at the cost of breaking the roomiest ones)."""
    objective, domains = _scope(request, racks)
    by_room = sorted(domains.items(), key=lambda item: -objective.capacity(item[1]))
    for _, rs in by_room:
        under: dict[tuple[str, ...], list[Rack]] = defaultdict(list)
        for rack in rs:
            for depth in range(objective.required + 1, len(rack.domains)):
                under[rack.domains[: depth + 1]].append(rack)
        room = {key: objective.capacity(members) for key, members in under.items()}
        ordered = sorted(
            rs,
            key=lambda r: (
                *(-room[r.domains[: d + 1]] for d in range(objective.required + 1, len(r.domains))),
                r.domains,
            ),
        )
        if (chosen := _fill(objective, ordered, request.node_count)) is not None:
            return chosen
    raise PlacementRefused(objective.refusal(domains))


def random_fit(seed: int) -> Strategy:
    """A strategy that picks a random feasible domain of the required level and random nodes (or
    whole units) in it.

    It keeps its own random.Random, so a sequence of calls is reproducible from the seed.
    """
    rng = random.Random(seed)

    def strategy(request: PlacementRequest, racks: Sequence[RackCapacity]) -> list[str]:
        objective, domains = _scope(request, racks)
        count = request.node_count
        if objective.whole is not None:
            options = []
            for rs in domains.values():
                units = objective.whole_units(rs)
                rng.shuffle(units)
                chosen = first_whole_units([sum(r.size for r in unit) for unit in units], count)
                if chosen is not None:
                    options.append([node for i in chosen for rack in units[i] for node in rack.nodes])
            if not options:
                raise PlacementRefused(objective.refusal(domains))
            return rng.choice(options)
        feasible = [rs for rs in domains.values() if objective.capacity(rs) >= count]
        if not feasible:
            raise PlacementRefused(objective.refusal(domains))
        return rng.sample([node for rack in rng.choice(feasible) for node in rack.usable], count)

    return strategy


def count_whole_free_racks(racks: Iterable[RackCapacity], *, pod: str | None = None) -> int:
    """Racks (of `pod`, or of all pods) whose every node is free: what rack-scale requests need."""
    return sum(1 for r in racks if r.nodes and (pod is None or r.pod == pod) and set(r.nodes) <= set(r.free))


def count_domains(racks: Iterable[RackCapacity], level: str) -> tuple[int, int]:
    """(whole free, partly used) domains of `level` (NVLINK_DOMAIN for racks, or a level of the
    racks' paths): partly used means some but not every node free."""
    free: dict[tuple[str, ...], list[int]] = {}
    for r in racks:
        key: tuple[str, ...]
        if level == NVLINK_DOMAIN:
            key = (r.pod, r.rack)
        else:
            depth = [name for name, _ in r.path].index(level)
            key = (r.pod, *(domain for _, domain in r.path[: depth + 1]))
        counts = free.setdefault(key, [0, 0])
        counts[0] += len(r.free)
        counts[1] += len(r.nodes)
    whole = sum(1 for have, size in free.values() if size and have == size)
    partly = sum(1 for have, size in free.values() if 0 < have < size)
    return whole, partly
