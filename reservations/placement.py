"""Placement: which free nodes a reservation gets, a pure function of (request, free capacity).

No Django import. The service reads free capacity per rack for the requested period inside
a transaction, calls `place`, and inserts allocations; the exclusion constraint on
allocations stays the final guard against double booking.

The fabric is a tree of domains (fleet/fabric.py): the pod at the top, the rack (NVLink domain)
at the bottom, and between them the switch levels each rack's `path` names, such as spine
groups and leaves. A reservation stays inside one domain of its `required` level (a pod unless
it asks for a deeper one), and takes whole domains of its `whole` level if it asks for them
(`rack_scale` is whole racks). Inside the required domain placement chooses the nodes that
minimise, in this order:

1. nodes outside the racks `near` (a growing reservation fills its own racks first);
2. domains spanned at the `preferred` level, if the request names one below the required level;
3. domains spanned at each switch level, the deepest first: fewest leaves, then fewest spine
   groups (and for whole racks, then fewest racks);
4. whole domains broken at each level below the pod (and above a whole level), top down: partly
   used domains are used first, so whole domains stay free for whole-domain requests;
5. free nodes left beside the chosen ones in each domain touched, top down: the tightest fit;
6. nodes chosen without a recent diagnostics pass: a tie-breaker, never a reason to touch
   another domain; then names.

The required domain is chosen by the same order (so by 4 and 5 it is today's pod choice: the
fewest whole racks broken, then the tightest). `_Objective` solves this exactly by dynamic
programming over the tree, one table per domain of the least cost for each node count; its
input is per-domain free counts, the seam for keeping such summaries incrementally. A fleet
without switch levels and a request without levels has nothing to span, and takes the direct
greedy `_place_in_pods` (the same objective, and fast at 10,000 nodes).
bench/placement_baselines.py holds first-fit, random and most-free-first placement to measure
that choice against.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from core.errors import Conflict
from core.topology import NVLINK_DOMAIN, POD
from fleet.fabric import Path


@dataclass(frozen=True)
class RackCapacity:
    pod: str
    rack: str
    nodes: tuple[str, ...]  # every node of the rack in slot order; defines the rack's size
    free: tuple[str, ...]  # the nodes free for the requested period
    gpu_models: Mapping[str, str] | None = None  # node -> GPU model; None: models unknown
    recently_tested: frozenset[str] = frozenset()  # nodes with a recent long diagnostics pass
    path: Path = ()  # the rack's domains between its pod and itself; () when the fabric has no such level
    attributes: Mapping[str, Mapping[str, str]] | None = None  # node -> operator-defined attributes

    @property
    def domains(self) -> tuple[str, ...]:
        return _domains(self.pod, self.path, self.rack)

    def domain_at(self, level: str) -> str | None:
        """The rack's domain at `level`: its pod, a domain of its path, or itself; None if no such level."""
        if level == POD:
            return self.pod
        if level == NVLINK_DOMAIN:
            return self.rack
        return dict(self.path).get(level)


@dataclass(frozen=True)
class PlacementRequest:
    node_count: int
    pod: str | None = None  # None: any pod
    rack_scale: bool = False  # whole racks only, every node of each chosen rack: whole="nvlink_domain"
    gpu_model: str | None = None  # None: any model
    near: frozenset[str] = frozenset()  # racks to fill first: where a growing reservation has its nodes
    required: str = POD  # the level one domain of which holds every chosen node
    preferred: str | None = None  # a level whose domains spanned are minimised before any other's
    whole: str | None = None  # a level whose domains are taken whole, every node of each
    attributes: Mapping[str, str] = field(default_factory=dict)  # every chosen node has these values
    within: str | None = None  # a domain (of any level) that holds every chosen node: where a reservation heals

    @property
    def whole_level(self) -> str | None:
        return self.whole or (NVLINK_DOMAIN if self.rack_scale else None)


class PlacementRefused(Conflict):
    """No placement exists; `reason` says why in words a tenant can act on, and `offer` (set by the
    service, a reservations.offers.Offer) when the request would fit later."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
        self.offer = None


class _Rack(NamedTuple):
    """A rack as one request sees it (a tuple: placement builds one per rack per request)."""

    pod: str
    name: str
    nodes: tuple[str, ...]
    usable: tuple[str, ...]  # free nodes of the requested model and attributes, in slot order
    whole: bool  # every node free: taking any of it costs a whole rack
    whole_usable: bool  # whole, and every node usable: fit for a whole-rack request
    tested: int = 0  # usable nodes with a recent diagnostics pass, which `usable` lists first
    path: Path = ()

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def domains(self) -> tuple[str, ...]:
        return _domains(self.pod, self.path, self.name)


def _domains(pod: str, path: Path, rack: str) -> tuple[str, ...]:
    """A rack's domain at every level, top down: pod, the path's domains, the rack."""
    return (pod, *(name for _, name in path), rack)


def place(request: PlacementRequest, racks: Sequence[RackCapacity]) -> list[str]:
    """The chosen node names, all in one domain of the required level, or PlacementRefused.

    ValueError for a node_count below one or inconsistent capacity: those are the caller's bugs.
    """
    pods = _pods_in_scope(request, racks)
    levels = _fabric_levels(request, racks)
    whole = request.whole_level
    if len(levels) == 2 and request.required == POD and request.preferred in (None, POD) and whole != POD:
        return _place_in_pods(request, pods)
    return _Objective(request, levels).place(pods)


def _place_in_pods(request: PlacementRequest, pods: dict[str, list[_Rack]]) -> list[str]:
    """The objective where the fabric has no switch level and the request is by pod and rack only.

    With no pod given, the pod is the one that breaks the fewest whole racks, then the one with
    the fewest usable free nodes (the tightest fit), then the first by name; for whole racks, the
    one that needs the fewest racks, then the least whole capacity, then the name.
    """
    count = request.node_count
    if request.whole_level:
        options = {pod: chosen for pod, rs in pods.items() if (chosen := _fewest_whole_racks(rs, count)) is not None}
        if not options:
            raise PlacementRefused(_refusal_by_pod(request, pods))
        # Fewest racks first; then the pod with the least whole capacity, so bigger pods keep theirs.
        pod = min(options, key=lambda p: (len(options[p]), _whole_usable_nodes(pods[p]), p))
        return [node for rack in options[pod] for node in rack.nodes]

    options = {pod: _best_fit(rs, count, request.near) for pod, rs in pods.items() if _usable_nodes(rs) >= count}
    if not options:
        raise PlacementRefused(_refusal_by_pod(request, pods))
    # Breaking no whole rack beats fitting tightly: a tighter pod that must break a rack loses
    # to a roomier one that can use its partly used racks.
    pod = min(options, key=lambda p: (_whole_racks_broken(options[p]), _usable_nodes(pods[p]), p))
    return [node for rack, taken in options[pod] for node in rack.usable[:taken]]


def _refusal_by_pod(request: PlacementRequest, pods: dict[str, list[_Rack]]) -> str:
    return _Objective(request, (POD, NVLINK_DOMAIN)).refusal({(pod,): rs for pod, rs in pods.items()})


def _pods_in_scope(request: PlacementRequest, racks: Sequence[RackCapacity]) -> dict[str, list[_Rack]]:
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
    pods: dict[str, list[_Rack]] = defaultdict(list)
    selectors_present = any_node
    for r in sorted(racks, key=lambda r: (r.pod, r.rack)):
        # A rack with no nodes can hold nothing and is no NVLink domain to keep whole.
        if not r.nodes or request.pod not in (None, r.pod) or (within and within not in r.domains):
            continue
        if any_node and r.free is r.nodes:  # a wholly free rack, as the service hands most of them
            usable, tested = _tested_first(r.nodes, r.recently_tested)
            pods[r.pod].append(_Rack(r.pod, r.rack, r.nodes, usable, True, True, tested, r.path))
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
        pods[r.pod].append(_Rack(r.pod, r.rack, r.nodes, usable, whole, whole_usable, tested, r.path))
    if not pods:
        raise PlacementRefused("no rack is known to placement")
    if not selectors_present:
        where = f"in pod {request.pod} " if request.pod else ""
        raise PlacementRefused(f"no node {where}has {_selectors(request)}")
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


def _fabric_levels(request: PlacementRequest, racks: Sequence[RackCapacity]) -> tuple[str, ...]:
    """The fleet's levels, top down, from the racks' paths; a refusal for a request naming another
    level or whole domains wider than its required one. ValueError if the racks disagree."""
    shapes = {tuple(level for level, _ in r.path) if r.path else () for r in racks}
    if len(shapes) > 1:
        raise ValueError(f"racks name different fabric levels: {sorted(shapes)}")
    levels = (POD, *shapes.pop(), NVLINK_DOMAIN)
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


def _usable_nodes(racks: Iterable[_Rack]) -> int:
    return sum(len(r.usable) for r in racks)


def _whole_usable_nodes(racks: Iterable[_Rack]) -> int:
    return sum(r.size for r in racks if r.whole_usable)


def _whole_racks_broken(picks: list[tuple[_Rack, int]]) -> int:
    return sum(1 for rack, _ in picks if rack.whole)


def _best_fit(racks: list[_Rack], count: int, near: frozenset[str] = frozenset()) -> list[tuple[_Rack, int]]:
    """(rack, nodes taken) pairs: the racks `near` first, then partly used racks, and whole racks
    only for what they cannot hold."""
    picks = []
    for group in (
        [r for r in racks if r.usable and r.name in near],
        [r for r in racks if r.usable and not r.whole and r.name not in near],
        [r for r in racks if r.usable and r.whole and r.name not in near],
    ):
        picks += _tightest_first(group, count - sum(taken for _, taken in picks))
    return picks


def _tightest_first(racks: list[_Rack], count: int) -> list[tuple[_Rack, int]]:
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


def _fewest_whole_racks(racks: list[_Rack], count: int) -> list[_Rack] | None:
    """Whole usable racks whose sizes add up to exactly `count`, as few as possible; None if none do.

    Racks of one size are interchangeable, so this solves for how many of each size to take
    (a small bounded knapsack over the distinct sizes) and then takes them by name.
    """
    by_size: dict[int, list[_Rack]] = defaultdict(list)
    # Of racks of one size, those with the most recently tested nodes are taken first.
    for rack in sorted(racks, key=lambda r: (-r.tested, r.name)):
        if rack.whole_usable:
            by_size[rack.size].append(rack)
    # plans[total] = (racks used, ((size, how many), ...)), the fewest racks reaching `total`.
    plans: dict[int, tuple[int, tuple[tuple[int, int], ...]]] = {0: (0, ())}
    for size in sorted(by_size, reverse=True):
        extended: dict[int, tuple[int, tuple[tuple[int, int], ...]]] = {}
        for total, (used, plan) in plans.items():
            for how_many in range(min(len(by_size[size]), (count - total) // size) + 1):
                reached = total + how_many * size
                if reached not in extended or used + how_many < extended[reached][0]:
                    extended[reached] = (used + how_many, (*plan, (size, how_many)))
        plans = extended
    if count not in plans:
        return None
    return sorted(
        (rack for size, how_many in plans[count][1] for rack in by_size[size][:how_many]), key=lambda r: r.name
    )


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
        self.required = levels.index(request.required)
        self.rack = len(levels) - 1
        whole = request.whole_level
        self.whole = levels.index(whole) if whole else None
        deepest = self.whole if self.whole is not None else self.rack
        spans = [d for d in range(min(deepest, self.rack - 1), self.required, -1)]
        if self.whole == self.rack:
            spans.append(self.rack)  # whole racks: fewest racks, after fewest leaves and spines
        preferred = levels.index(request.preferred) if request.preferred else None
        if preferred is not None and self.required < preferred <= deepest:
            spans = [preferred, *(d for d in spans if d != preferred)]
        below = range(self.required, deepest + (self.whole is None))  # levels taken in part, top down
        self.order = [
            *(("near",) if request.near and self.whole is None else ()),
            *(("span", d) for d in spans),
            *(("broken", d) for d in below if d > 0),
            *(("left", d) for d in below),
            ("untested",),
        ]

    def place(self, pods: dict[str, list[_Rack]]) -> list[str]:
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

    def domains(self, pods: dict[str, list[_Rack]]) -> dict[tuple[str, ...], list[_Rack]]:
        """The domains of the required level, each keyed by its domains from the pod down, in order."""
        domains: dict[tuple[str, ...], list[_Rack]] = defaultdict(list)
        for rs in pods.values():
            for rack in rs:
                domains[rack.domains[: self.required + 1]].append(rack)
        return {key: sorted(domains[key], key=lambda r: r.domains) for key in sorted(domains)}

    def capacity(self, racks: list[_Rack]) -> int:
        """What the request can use of these racks: usable nodes, or the nodes of whole usable units."""
        if self.whole is None:
            return _usable_nodes(racks)
        return sum(sum(r.size for r in unit) for unit in self.whole_units(racks))

    def whole_units(self, racks: list[_Rack]) -> list[list[_Rack]]:
        """The domains of the whole level in these racks that are usable in full, each as its racks."""
        units: dict[tuple[str, ...], list[_Rack]] = defaultdict(list)
        for rack in racks:
            units[rack.domains[: self.whole + 1]].append(rack)
        return [unit for _, unit in sorted(units.items()) if all(r.whole_usable for r in unit)]

    def refusal(self, domains: dict[tuple[str, ...], list[_Rack]]) -> str:
        level = self.levels[self.required]
        if self.whole is None:
            return _shortage_refusal(self.request, level, [(key[-1], _usable_nodes(rs)) for key, rs in domains.items()])
        units = [(key[-1], [sum(r.size for r in unit) for unit in self.whole_units(rs)]) for key, rs in domains.items()]
        return _whole_refusal(self.request, level, units)

    def _cost(self, name: tuple, times: int = 1) -> int:
        return self.weight.get(name, 0) * times

    def _subtree(self, racks: list[_Rack], depth: int) -> _Subtree:
        """The table of the domain at `depth` that holds `racks` (all of it, sorted by domains)."""
        if depth == self.whole:
            return self._whole_unit(racks)
        if depth == self.rack:
            return self._rack(racks[0])
        groups: dict[str, list[_Rack]] = defaultdict(list)
        for rack in racks:
            groups[rack.domains[depth + 1]].append(rack)
        children, seen = [], Counter()
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
            if table[c] is not None:
                table[c] += own + self._cost(("left", depth), capacity - c)
        return _Subtree(table, children, choices, ())

    def _rack(self, rack: _Rack) -> _Subtree:
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

    def _whole_unit(self, racks: list[_Rack]) -> _Subtree:
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
                if best[a + b] is None or total < best[a + b]:
                    best[a + b], choice[a + b] = total, b
        merged = best
        choices.append(choice)
    return merged, choices


def give_back(
    held: Mapping[str, Sequence[str]], count: int, *, rack_scale: bool, paths: Mapping[str, Path] | None = None
) -> list[str]:
    """Which `count` of a reservation's nodes to release, given them by rack (rack -> nodes, in
    slot order): whole holdings first, smallest first, so each rack given back is whole again
    for others, then the last slots of the smallest holding left. With every rack's `paths`,
    the smallest holding is the smallest in its widest domain first (spine group, then leaf, then
    rack), so the reservation keeps to fewer domains. rack_scale gives back whole holdings
    only; PlacementRefused if none add up to `count`."""
    paths = paths or {}
    held_under: Counter[Path] = Counter()
    for rack, nodes in held.items():
        path = paths.get(rack, ())
        for depth in range(1, len(path) + 1):
            held_under[path[:depth]] += len(nodes)

    def smallest_first(item: tuple[str, Sequence[str]]) -> tuple:
        rack, nodes = item
        path = paths.get(rack, ())
        return (*(held_under[path[:depth]] for depth in range(1, len(path) + 1)), len(nodes), rack)

    racks = sorted(held.items(), key=smallest_first)
    if rack_scale:
        as_racks = [_Rack("", name, tuple(nodes), tuple(nodes), True, True) for name, nodes in racks]
        chosen = _fewest_whole_racks(as_racks, count)
        if chosen is None:
            sizes = ", ".join(str(len(nodes)) for _, nodes in racks)
            raise PlacementRefused(f"a rack-scale reservation gives back whole racks; it holds racks of {sizes} nodes")
        return [node for rack in chosen for node in rack.nodes]
    chosen, rest = [], []
    for _, nodes in racks:
        if len(nodes) <= count - len(chosen):
            chosen += nodes
        else:
            rest.append(nodes)
    if len(chosen) < count:
        chosen += rest[0][len(rest[0]) - (count - len(chosen)) :]
    return chosen


def _first_whole_units(sizes: list[int], count: int) -> list[int] | None:
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
    chosen, remainder = [], count
    for i, size in enumerate(sizes):
        if remainder == 0:
            break
        if size <= remainder and reachable[i + 1] >> (remainder - size) & 1:
            chosen.append(i)
            remainder -= size
    return chosen


def _selectors(request: PlacementRequest) -> str:
    """'GPU model B200 and nic=cx7': what every chosen node must have; '' for any node."""
    wanted = [f"GPU model {request.gpu_model}"] if request.gpu_model else []
    return " and ".join(wanted + [f"{key}={value}" for key, value in sorted(request.attributes.items())])


def _shortage_refusal(request: PlacementRequest, level: str, usable: list[tuple[str, int]]) -> str:
    """Not enough usable nodes in any domain of `level`; `usable` is each domain's count, by name."""
    selectors = _selectors(request)
    nodes = f"free nodes with {selectors}" if selectors else "free nodes"
    if level == POD and request.pod is not None:
        have = dict(usable).get(request.pod, 0)
        return f"pod {request.pod} has {have} {nodes}, fewer than the {request.node_count} requested"
    scope = f" in pod {request.pod}" if request.pod is not None else ""
    roomiest, most = max(usable, key=lambda item: item[1])
    return f"no {level}{scope} has {request.node_count} {nodes}; the most is {roomiest} with {most}"


def _whole_refusal(request: PlacementRequest, level: str, sizes: list[tuple[str, list[int]]]) -> str:
    """No domain of `level` has whole units adding up to the count; `sizes` lists each domain's
    whole usable units by size, by name."""
    count, whole = request.node_count, request.whole_level or NVLINK_DOMAIN
    unit = "rack" if whole == NVLINK_DOMAIN else f"{whole} domain"
    selectors = _selectors(request)
    label = "rack_scale" if request.whole is None else f"whole {whole}"
    needs = f"{label} needs {count} nodes in whole {unit}s{f' of {selectors}' if selectors else ''}"
    if level == POD and request.pod is not None:
        have = dict(sizes).get(request.pod, [])
        why = f"pod {request.pod} has {_describe_whole(have, unit)}"
        if sum(have) >= count:
            why += f", which cannot add up to exactly {count}"
        return f"{needs}; {why}"
    scope = f" in pod {request.pod}" if request.pod is not None else ""
    roomiest, most = max(sizes, key=lambda item: sum(item[1]))
    if not most:
        return f"{needs}; no {level}{scope} has a free whole {unit}"
    return (
        f"{needs}; no {level}{scope} has free whole {unit}s adding up to exactly {count}; "
        f"the most is {roomiest} with {_describe_whole(most, unit)}"
    )


def _describe_whole(sizes: list[int], unit: str) -> str:
    """'2 free whole racks of 8 nodes and 1 of 2 nodes', largest first."""
    groups = sorted(Counter(sizes).items(), reverse=True)
    if not groups:
        return f"no free whole {unit}"
    (size, how_many), *others = groups
    first = f"{how_many} free whole {unit}{_plural(how_many)} of {size} node{_plural(size)}"
    return " and ".join([first, *(f"{n} of {s} node{_plural(s)}" for s, n in others)])


def _plural(n: int) -> str:
    return "" if n == 1 else "s"
