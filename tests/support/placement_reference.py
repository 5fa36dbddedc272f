"""The placement algorithm as it was before the free-capacity index: a walk of every rack in
scope per request, then the greedy `_place_in_pods` or the dynamic programme `_Objective` over the
racks' tree. Kept as the reference the index is checked against (tests/reservations/
test_placement_index.py) and timed against (bench/placement.py), and for the baselines' view of
a request (tests/support/placement_baselines.py); never used by the control plane.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from core.topology import NVLINK_DOMAIN, POD
from reservations.placement import PlacementRefused, PlacementRequest, RackCapacity, cost_order
from reservations.placement.refusals import shortage_refusal, whole_refusal
from reservations.placement.request import Rack
from reservations.placement.scope import fabric_levels, pods_in_scope
from reservations.placement.sums import fewest_whole_racks


def place(request: PlacementRequest, racks: Sequence[RackCapacity]) -> list[str]:
    """The chosen node names, all in one domain of the required level, or PlacementRefused.

    ValueError for a node_count below one or inconsistent capacity: those are the caller's bugs.
    """
    pods = pods_in_scope(request, racks)
    levels = fabric_levels(request, racks)
    whole = request.whole_level
    if len(levels) == 2 and request.required == POD and request.preferred in (None, POD) and whole != POD:
        return _place_in_pods(request, pods)
    return _Objective(request, levels).place(pods)


def _place_in_pods(request: PlacementRequest, pods: dict[str, list[Rack]]) -> list[str]:
    """The objective where the fabric has no switch level and the request is by pod and rack only.

    With no pod given, the pod is the one that breaks the fewest whole racks, then the one with
    the fewest usable free nodes (the tightest fit), then the first by name; for whole racks, the
    one that needs the fewest racks, then the least whole capacity, then the name.
    """
    count = request.node_count
    if request.whole_level:
        options = {pod: chosen for pod, rs in pods.items() if (chosen := fewest_whole_racks(rs, count)) is not None}
        if not options:
            raise PlacementRefused(_refusal_by_pod(request, pods))
        # Fewest racks first; then the pod with the least whole capacity, so bigger pods keep theirs.
        pod = min(options, key=lambda p: (len(options[p]), _whole_usable_nodes(pods[p]), p))
        return [node for rack in options[pod] for node in rack.nodes]

    fits = {pod: _best_fit(rs, count, request.near) for pod, rs in pods.items() if _usable_nodes(rs) >= count}
    if not fits:
        raise PlacementRefused(_refusal_by_pod(request, pods))
    # Breaking no whole rack beats fitting tightly: a tighter pod that must break a rack loses
    # to a roomier one that can use its partly used racks.
    pod = min(fits, key=lambda p: (_whole_racks_broken(fits[p]), _usable_nodes(pods[p]), p))
    return [node for rack, taken in fits[pod] for node in rack.usable[:taken]]


def _refusal_by_pod(request: PlacementRequest, pods: dict[str, list[Rack]]) -> str:
    return _Objective(request, (POD, NVLINK_DOMAIN)).refusal({(pod,): rs for pod, rs in pods.items()})


def _usable_nodes(racks: Iterable[Rack]) -> int:
    return sum(len(r.usable) for r in racks)


def _whole_usable_nodes(racks: Iterable[Rack]) -> int:
    return sum(r.size for r in racks if r.whole_usable)


def _whole_racks_broken(picks: list[tuple[Rack, int]]) -> int:
    return sum(1 for rack, _ in picks if rack.whole)


def _best_fit(racks: list[Rack], count: int, near: frozenset[str] = frozenset()) -> list[tuple[Rack, int]]:
    """(rack, nodes taken) pairs: the racks `near` first, then partly used racks, and whole racks
    only for what they cannot hold."""
    picks: list[tuple[Rack, int]] = []
    for group in (
        [r for r in racks if r.usable and r.name in near],
        [r for r in racks if r.usable and not r.whole and r.name not in near],
        [r for r in racks if r.usable and r.whole and r.name not in near],
    ):
        picks += _tightest_first(group, count - sum(taken for _, taken in picks))
    return picks


def _tightest_first(racks: list[Rack], count: int) -> list[tuple[Rack, int]]:
    """The rack with the fewest usable nodes that holds the rest; if none does, the one with the
    most (fewest racks touched), then go on. Ties go to the rack with the most recently tested
    nodes, then to the rack first by name."""
    pool = sorted(racks, key=lambda r: (len(r.usable), -r.tested, r.name))
    picks = []
    while count > 0 and pool:
        rack = next((r for r in pool if len(r.usable) >= count), None) or max(pool, key=lambda r: len(r.usable))
        pool.remove(rack)
        taken = min(count, len(rack.usable))
        picks.append((rack, taken))
        count -= taken
    return picks


class _Subtree(NamedTuple):
    """One domain as the objective sees it: table[c] is the least cost of taking c nodes from it
    (None: c cannot be taken); a domain with children took choices[i][c] nodes from children[i]
    when children[:i + 1] gave c; a rack or a whole unit gives a prefix of `nodes`."""

    table: list[int | None]
    children: list[_Subtree]
    choices: list[list[int]]
    nodes: tuple[str, ...]


class _Objective:
    """The module docstring's order of costs as one integer per choice: each cost is a digit in
    base `base`, which exceeds any cost's value, so comparing integers compares the order."""

    def __init__(self, request: PlacementRequest, levels: tuple[str, ...]):
        self.request, self.levels, self.count = request, levels, request.node_count
        self.required, self.rack, self.whole, self.order = cost_order(request, levels)

    def place(self, pods: dict[str, list[Rack]]) -> list[str]:
        domains = self.domains(pods)
        capacity = {key: self.capacity(rs) for key, rs in domains.items()}
        self.base = max(self.count, *capacity.values()) + 1
        self.weight = {name: self.base ** (len(self.order) - 1 - i) for i, name in enumerate(self.order)}
        best = None
        for key, rs in domains.items():
            if capacity[key] < self.count:
                continue
            subtree = self._subtree(rs, self.required)
            cost = subtree.table[self.count] if len(subtree.table) > self.count else None
            if cost is not None and (best is None or cost < best[0]):
                best = (cost, subtree)
        if best is None:
            raise PlacementRefused(self.refusal(domains))
        return self._take(best[1], self.count)

    def domains(self, pods: dict[str, list[Rack]]) -> dict[tuple[str, ...], list[Rack]]:
        """The domains of the required level, each keyed by its domains from the pod down, in order."""
        domains: dict[tuple[str, ...], list[Rack]] = defaultdict(list)
        for rs in pods.values():
            for rack in rs:
                domains[rack.domains[: self.required + 1]].append(rack)
        return {key: sorted(domains[key], key=lambda r: r.domains) for key in sorted(domains)}

    def capacity(self, racks: list[Rack]) -> int:
        """What the request can use of these racks: usable nodes, or the nodes of whole usable units."""
        if self.whole is None:
            return _usable_nodes(racks)
        return sum(sum(r.size for r in unit) for unit in self.whole_units(racks))

    def whole_units(self, racks: list[Rack]) -> list[list[Rack]]:
        """The domains of the whole level in these racks that are usable in full, each as its racks."""
        assert self.whole is not None  # only a request for whole units has any
        units: dict[tuple[str, ...], list[Rack]] = defaultdict(list)
        for rack in racks:
            units[rack.domains[: self.whole + 1]].append(rack)
        return [unit for _, unit in sorted(units.items()) if all(r.whole_usable for r in unit)]

    def refusal(self, domains: dict[tuple[str, ...], list[Rack]]) -> str:
        level = self.levels[self.required]
        if self.whole is None:
            return shortage_refusal(self.request, level, [(key[-1], _usable_nodes(rs)) for key, rs in domains.items()])
        units = [(key[-1], [sum(r.size for r in unit) for unit in self.whole_units(rs)]) for key, rs in domains.items()]
        return whole_refusal(self.request, level, units)

    def _cost(self, name: tuple, times: int = 1) -> int:
        return self.weight.get(name, 0) * times

    def _subtree(self, racks: list[Rack], depth: int) -> _Subtree:
        """The table of the domain at `depth` that holds `racks` (all of it, sorted by domains)."""
        if depth == self.whole:
            return self._whole_unit(racks)
        if depth == self.rack:
            return self._rack(racks[0])
        groups: dict[str, list[Rack]] = defaultdict(list)
        for rack in racks:
            groups[rack.domains[depth + 1]].append(rack)
        children: list[_Subtree] = []
        seen: Counter[tuple[int | None, ...]] = Counter()
        for _, group in sorted(groups.items()):
            child = self._subtree(group, depth + 1)
            # Children with equal tables are interchangeable: no choice takes from more than
            # `count` of them, so the rest (later by name) need not be merged in.
            signature = tuple(child.table)
            if len(child.table) > 1 and seen[signature] < self.count:
                seen[signature] += 1
                children.append(child)
        table, choices = _merge([c.table for c in children], self.count)
        capacity = self.capacity(racks)
        broken = self._cost(("broken", depth)) if all(r.whole for r in racks) else 0
        own = self._cost(("span", depth)) + broken
        for c in range(1, len(table)):
            cost = table[c]
            if cost is not None:
                table[c] = cost + own + self._cost(("left", depth), capacity - c)
        return _Subtree(table, children, choices, ())

    def _rack(self, rack: Rack) -> _Subtree:
        depth, near = self.rack, rack.name in self.request.near
        own = self._cost(("span", depth)) + (self._cost(("broken", depth)) if rack.whole else 0)
        table: list[int | None] = [0]
        for c in range(1, min(len(rack.usable), self.count) + 1):
            table.append(
                own
                + (0 if near else self._cost(("near",), c))
                + self._cost(("left", depth), len(rack.usable) - c)
                + self._cost(("untested",), max(0, c - rack.tested))
            )
        return _Subtree(table, [], [], rack.usable)

    def _whole_unit(self, racks: list[Rack]) -> _Subtree:
        size = sum(r.size for r in racks)
        if not all(r.whole_usable for r in racks) or size > self.count:
            return _Subtree([0], [], [], ())
        tested = sum(r.tested for r in racks)
        table: list[int | None] = [0, *([None] * (size - 1))]
        table.append(self._cost(("span", self.whole)) + self._cost(("untested",), size - tested))
        return _Subtree(table, [], [], tuple(node for r in racks for node in r.nodes))

    def _take(self, subtree: _Subtree, count: int) -> list[str]:
        if not subtree.children:
            return list(subtree.nodes[:count])
        parts = []
        for child, choice in zip(reversed(subtree.children), reversed(subtree.choices), strict=True):
            parts.append(self._take(child, choice[count]) if choice[count] else [])
            count -= choice[count]
        return [node for part in reversed(parts) for node in part]


def _merge(tables: list[list[int | None]], cap: int) -> tuple[list[int | None], list[list[int]]]:
    """The least cost of c nodes (c up to cap) from several domains together, and for each domain
    how many of the c it gives, given each domain's table. Ties go to the earlier domains."""
    merged: list[int | None] = [0]
    choices = []
    for table in tables:
        takeable = [(b, cost) for b, cost in enumerate(table) if cost is not None]
        best: list[int | None] = [None] * min(cap + 1, len(merged) + len(table) - 1)
        choice = [0] * len(best)
        for a in reversed(range(len(merged))):  # the most from the earlier domains first: ties go to them
            so_far = merged[a]
            if so_far is None:
                continue
            for b, cost in takeable:
                if a + b > cap:
                    break
                total = so_far + cost
                best_yet = best[a + b]
                if best_yet is None or total < best_yet:
                    best[a + b], choice[a + b] = total, b
        merged = best
        choices.append(choice)
    return merged, choices
