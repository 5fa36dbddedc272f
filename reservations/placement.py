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
fewest whole racks broken, then the tightest). Placement reads free capacity from the index of
reservations/free_capacity.py: the service keeps one per process and brings it to the requested
period by deltas (`place_in`); `place` builds one of the racks it is given. `_Objective` solves
the order exactly by dynamic programming over the index's tree, one table per domain signature,
reading of interchangeable domains only as many as the request can use, so its cost follows the
request and the partly used domains, not the fleet. A fleet without switch levels and a request
without levels has nothing to span, and takes the direct greedy `_place_in_pods` over each pod's
racks grouped by signature. tests/support/placement_reference.py keeps the walk of every rack this
replaced, which the tests and bench/placement.py check it against; tests/support/placement_baselines.py
holds first-fit, random and most-free-first placement to measure that choice against.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from core.errors import Conflict
from core.topology import NVLINK_DOMAIN, POD
from fleet.fabric import Path
from reservations.free_capacity import NO_SIGNATURE, FreeCapacity, RackState, first_members

INF = float("inf")  # the cost of a count a domain cannot give


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

    Builds an index of just the racks in the request's scope, seen through it (its GPU model and
    attributes), and places over it. ValueError for a node_count below one or inconsistent
    capacity: those are the caller's bugs.
    """
    pods = _pods_in_scope(request, racks)
    levels = _fabric_levels(request, racks)
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
    levels = _check_levels(request, (POD, *capacity.switch_levels, NVLINK_DOMAIN))
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
        return _place_in_pods(request, capacity, [pod for pod in capacity.pods.values() if lo <= pod < hi])
    return _Objective(request, capacity, levels).place(lo, hi)


def _place_in_pods(request: PlacementRequest, capacity: FreeCapacity, pods: list[int]) -> list[str]:
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
            raise PlacementRefused(_refusal(request, capacity, POD, pods, capacity.rack_depth))
        # Fewest racks first; then the pod with the least whole capacity, so bigger pods keep theirs.
        pod = min(options, key=lambda p: (len(options[p]), capacity.unit_capacity(p, capacity.rack_depth), p))
        return [node for rack in options[pod] for node in capacity.nodes[rack]]

    fits = {pod: _best_fit_in(capacity, pod, count, request.near) for pod in pods if capacity.usable[pod] >= count}
    if not fits:
        raise PlacementRefused(_refusal(request, capacity, POD, pods))
    # Breaking no whole rack beats fitting tightly: a tighter pod that must break a rack loses
    # to a roomier one that can use its partly used racks.
    pod = min(fits, key=lambda p: (sum(capacity.rack_whole(r) for r, _ in fits[p]), capacity.usable[p], p))
    return [node for rack, taken in fits[pod] for node in capacity.ordered_usable(rack)[:taken]]


def _rack_groups(capacity: FreeCapacity, pod: int) -> Iterable[tuple[tuple, list[int]]]:
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
    partly, whole = [], []
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
    _fewest_whole_racks), by name; None if none do."""
    plan = _fewest_by_size(capacity.units[pod][capacity.rack_depth], count)
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


class CostOrder(NamedTuple):
    required: int  # the depth of the required level
    rack: int  # the depth of the racks: the last level
    whole: int | None  # the depth of the whole level, if any
    order: list[tuple]  # the costs, most important first: ("near",), ("span", depth), ("broken", depth)...


def cost_order(request: PlacementRequest, levels: tuple[str, ...]) -> CostOrder:
    """The module docstring's order of costs for this request over these levels, top first."""
    required = levels.index(request.required)
    rack = len(levels) - 1
    whole = levels.index(request.whole_level) if request.whole_level else None
    deepest = whole if whole is not None else rack
    spans = [d for d in range(min(deepest, rack - 1), required, -1)]
    if whole == rack:
        spans.append(rack)  # whole racks: fewest racks, after fewest leaves and spines
    preferred = levels.index(request.preferred) if request.preferred else None
    if preferred is not None and required < preferred <= deepest:
        spans = [preferred, *(d for d in spans if d != preferred)]
    below = range(required, deepest + (whole is None))  # levels taken in part, top down
    order = [
        *(("near",) if request.near and whole is None else ()),
        *(("span", d) for d in spans),
        *(("broken", d) for d in below if d > 0),
        *(("left", d) for d in below),
        ("untested",),
    ]
    return CostOrder(required, rack, whole, order)


class _Objective:
    """The module docstring's order of costs as one integer per choice: each cost is a digit in
    base `base`, which exceeds any cost's value, so comparing integers compares the order.

    It solves the order exactly by dynamic programming over the index's tree: table[c] of a domain
    is the least cost of taking c nodes from it (None: c cannot be taken). Domains of one
    signature have one table, computed once. A domain's table merges its children's; of children
    of one signature only as many as the request can use are merged: `copies`.
    """

    def __init__(self, request: PlacementRequest, capacity: FreeCapacity, levels: tuple[str, ...]):
        self.request, self.capacity, self.levels, self.count = request, capacity, levels, request.node_count
        self.required, self.rack, self.whole, order = cost_order(request, levels)
        # Any base above every cost's value orders the same; the fleet's size is one for every request.
        base = max(self.count, capacity.total) + 1
        self.weight = {name: base ** (len(order) - 1 - i) for i, name in enumerate(order)}
        # Racks near the request and their ancestors have tables of their own, not their signature's.
        self.apart = {
            domain
            for name in (request.near if self.whole is None else ())
            if (rack := capacity.ids.get(name)) is not None and rack in capacity.nodes
            for domain in capacity.ancestry(rack)
        }
        self.by_signature: dict[int, tuple[list[float], list[list[float]]]] = {}
        self.by_domain: dict[int, tuple[list[float], list[list[float]]]] = {}
        self.subadditive: dict[int, bool] = {}

    def place(self, lo: int, hi: int) -> list[str]:
        best = None
        # Cheapest bound first: once a domain's bound exceeds the best cost found, so do the rest's,
        # so a request reads few of a fleet's many pods. Equal costs go to the first by name.
        for bound, domain in sorted((self.bound(domain), domain) for domain in self.candidates(lo, hi)):
            if best is not None and (bound, domain) > best:
                break
            table = self.table(domain)
            cost = table[self.count] if len(table) > self.count else INF
            if cost != INF and (best is None or (cost, domain) < best):
                best = (cost, domain)
        if best is None:
            required = self.capacity.by_level[self.required]
            domains = required[bisect_left(required, lo) : bisect_left(required, hi)]
            level = self.levels[self.required]
            raise PlacementRefused(_refusal(self.request, self.capacity, level, domains, self.whole))
        return self.take(best[1], self.count)

    def candidates(self, lo: int, hi: int) -> list[int]:
        """The domains of the required level in [lo, hi) that can hold the request, in name order:
        of those of one signature only the first, since it wins every tie."""
        capacity, depth = self.capacity, self.required
        if depth == 0:
            found = [pod for pod in capacity.pods.values() if lo <= pod < hi]
        else:
            found = [d for d in self.apart if capacity.depth[d] == depth and lo <= d < hi]
            for members in capacity.level_groups[depth].values():
                found += first_members(members, lo, hi, 1, self.apart)
        return sorted(d for d in found if self.room(d) >= self.count)

    def bound(self, domain: int) -> int:
        """At most the cost of taking the request from this domain of the required level: what it
        leaves of the domain's room and breaking the domain if whole (both exact); the fewest
        children whose room adds up to the count, since every choice spans at least that many;
        and the fewest whole children among them (or among all, with no cost for the span), since
        fewer whole ones would take more children, which costs more than any breaking saves; and
        under those whole children, whose own children are all whole, as few of those as can hold
        what the others cannot give. Deeper down, the count over the level's largest domain."""
        capacity, depth, count = self.capacity, self.required, self.count
        cost = self._cost(("left", depth), self.room(domain) - count)
        if depth > 0 and capacity.whole(domain):
            cost += self._cost(("broken", depth))
        for deeper in range(depth + 2, len(self.levels)):  # no domain there holds more than the largest
            cost += self._cost(("span", deeper), -(-count // capacity.largest[deeper]))
        if domain in capacity.nodes:
            return cost
        span, broken = self.weight.get(("span", depth + 1), 0), self.weight.get(("broken", depth + 1), 0)
        rooms: dict[bool, list[int]] = {False: [], True: []}  # by whether the child is whole
        for members in capacity.groups[domain].values():
            if room := self.room(members[0]):
                rooms[capacity.whole(members[0])] += [room] * min(len(members), count)
        partly, whole = sorted(rooms[False], reverse=True), sorted(rooms[True], reverse=True)
        fewest = _fewest_adding_up(sorted(partly + whole, reverse=True), count)
        if fewest is None:
            return cost
        if not span:
            return cost + broken * (_fewest_adding_up(whole, count - sum(partly)) or 0)
        for whole_ones in range(fewest + 1):
            from_whole = count - sum(partly[: fewest - whole_ones])
            if from_whole <= sum(whole[:whole_ones]):
                cost += span * fewest + broken * whole_ones
                if whole_ones and (below := self.weight.get(("broken", depth + 2), 0)):
                    cost += below * -(-from_whole // capacity.largest[depth + 2])
                return cost
        return cost + span * fewest

    def room(self, domain: int) -> int:
        """What the request can use of the domain: usable nodes, or the nodes of whole usable units."""
        if self.whole is None:
            return self.capacity.usable[domain]
        return self.capacity.unit_capacity(domain, self.whole)

    def _cost(self, name: tuple, times: int = 1) -> int:
        return self.weight.get(name, 0) * times

    def table(self, domain: int) -> list[float]:
        return self.solve(domain)[0]

    def solve(self, domain: int) -> tuple[list[float], list[list[float]]]:
        """The domain's table, and the children's tables merged, child by child (see _merged)."""
        capacity = self.capacity
        sig = capacity.signature[domain]
        alone = domain in self.apart or sig == NO_SIGNATURE
        known = self.by_domain.get(domain) if alone else self.by_signature.get(sig)
        if known is not None:
            return known
        depth = capacity.depth[domain]
        if depth == self.whole:
            solved = self._whole_unit(domain), []
        elif depth == self.rack:
            solved = self._rack(domain), []
        else:
            prefixes = _merged([self.table(child) for child in self.children(domain)], self.count)
            table = list(prefixes[-1]) if prefixes else [0]
            broken = self._cost(("broken", depth)) if capacity.whole(domain) else 0
            own, room = self._cost(("span", depth)) + broken, self.room(domain)
            for c in range(1, len(table)):
                if table[c] != INF:
                    table[c] += own + self._cost(("left", depth), room - c)
            solved = table, prefixes
        (self.by_domain if alone else self.by_signature)[domain if alone else sig] = solved
        return solved

    def children(self, domain: int) -> list[int]:
        """The children to merge, in name order: those with a table of their own, and of each
        signature the first `copies` (the same for every domain of the domain's signature)."""
        capacity = self.capacity
        least = self.least_usable(domain)
        kept = [
            child
            for child in self.apart
            if capacity.parent[child] == domain and capacity.usable[child] >= least and len(self.table(child)) > 1
        ]
        for sig, members in capacity.groups[domain].items():
            first = first_members(members, 0, len(capacity.names), 1, self.apart)
            if not first or capacity.usable[first[0]] < least or len(table := self.table(first[0])) <= 1:
                continue
            kept += first_members(members, 0, len(capacity.names), self.copies(sig, table, len(members)), self.apart)
        return sorted(kept)

    def least_usable(self, domain: int) -> int:
        """The fewest usable nodes a child of a required domain needs to be part of a best choice,
        when the first cost is the children spanned (and a required domain is read only at the
        request's count): every best choice spans the fewest children k that can hold the count,
        so a child with less than the count minus the k - 1 roomiest others is in none. 0 otherwise.
        """
        order = next(iter(self.weight))
        if (
            self.capacity.depth[domain] != self.required
            or self.whole is not None
            or order != ("span", self.required + 1)
        ):
            return 0
        room = sorted(
            ((self.capacity.usable[members[0]], len(members)) for members in self.capacity.groups[domain].values()),
            reverse=True,
        )
        held = 0
        for usable, how_many in room:
            if held + usable * how_many >= self.count:
                return self.count - held - usable * ((self.count - held - 1) // usable)
            held += usable * how_many
        return 0

    def copies(self, sig: int, table: list[float], members: int) -> int:
        """How many children of one table a choice can use: each gives at least its smallest take.

        If the table is subadditive (taking a+b from one child costs no more than a from one and b
        from another, whenever one child can give a+b), no best choice takes from two children
        what one could give: moving it to the earlier child costs no more, and ties go to earlier
        children. Then at most one child gives half its most or less, so fewer suffice.
        """
        takes = [c for c in range(1, len(table)) if table[c] != INF]
        if not takes:
            return 0
        most = self.count // takes[0]
        most_taken = len(table) - 1
        fewer = 1 + self.count // (most_taken // 2 + 1)
        if members > fewer and fewer < most:
            if sig not in self.subadditive:
                self.subadditive[sig] = _subadditive(table, takes)
            if self.subadditive[sig]:
                return fewer
        return most

    def _rack(self, rack: int) -> list[float]:
        capacity, depth = self.capacity, self.rack
        usable, tested = capacity.usable[rack], capacity.tested[rack]
        near = capacity.names[rack] in self.request.near
        own = self._cost(("span", depth)) + (self._cost(("broken", depth)) if capacity.whole(rack) else 0)
        table: list[float] = [0]
        for c in range(1, min(usable, self.count) + 1):
            table.append(
                own
                + (0 if near else self._cost(("near",), c))
                + self._cost(("left", depth), usable - c)
                + self._cost(("untested",), max(0, c - tested))
            )
        return table

    def _whole_unit(self, domain: int) -> list[float]:
        capacity = self.capacity
        size = capacity.size[domain]
        if not capacity.whole_usable(domain) or size > self.count:
            return [0]
        table: list[float] = [0, *([INF] * (size - 1))]
        table.append(self._cost(("span", self.whole)) + self._cost(("untested",), size - capacity.tested[domain]))
        return table

    def take(self, domain: int, count: int) -> list[str]:
        capacity = self.capacity
        if capacity.depth[domain] == self.whole:
            return [node for rack in capacity.racks_under(domain) for node in capacity.nodes[rack]]
        if capacity.depth[domain] == self.rack:
            return list(capacity.ordered_usable(domain)[:count])
        parts = []
        _, prefixes = self.solve(domain)
        children = self.children(domain)
        for i in reversed(range(len(children))):
            # The least the child gives of an optimum: ties go to the earlier children.
            table, before, least = self.table(children[i]), prefixes[i - 1] if i else [0], prefixes[i][count]
            given = next(
                b
                for b in range(min(count, len(table) - 1) + 1)
                if count - b < len(before) and before[count - b] + table[b] == least
            )
            parts.append(self.take(children[i], given) if given else [])
            count -= given
        return [node for part in reversed(parts) for node in part]


def _subadditive(table: list[float], takes: list[int]) -> bool:
    """Whether table[a + b] is defined and at most table[a] + table[b] wherever a and b can be
    taken and a + b is within the table."""
    for i, a in enumerate(takes):
        for b in takes[i:]:
            if a + b >= len(table):
                break
            if table[a + b] > table[a] + table[b]:
                return False
    return True


def _refusal(
    request: PlacementRequest, capacity: FreeCapacity, level: str, domains: list[int], whole: int | None = None
) -> str:
    """Why no domain of `level` among `domains` (ids, in name order) can hold the request; `whole`
    is the depth of the whole domains it asks for, if any."""
    names = capacity.names
    if whole is None:
        return _shortage_refusal(request, level, [(names[d], capacity.usable[d]) for d in domains])
    units = [(names[d], [s for s, n in capacity.units[d][whole].items() for _ in range(n)]) for d in domains]
    return _whole_refusal(request, level, units)


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
    """The fleet's levels, top down, from the racks' paths, checked by _check_levels. ValueError if
    the racks disagree."""
    shapes = {tuple(level for level, _ in r.path) if r.path else () for r in racks}
    if len(shapes) > 1:
        raise ValueError(f"racks name different fabric levels: {sorted(shapes)}")
    return _check_levels(request, (POD, *shapes.pop(), NVLINK_DOMAIN))


def _check_levels(request: PlacementRequest, levels: tuple[str, ...]) -> tuple[str, ...]:
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


def _fewest_whole_racks(racks: list[_Rack], count: int) -> list[_Rack] | None:
    """Whole usable racks whose sizes add up to exactly `count`, as few as possible; None if none do.

    Racks of one size are interchangeable, so this solves for how many of each size to take
    and then takes them by name.
    """
    by_size: dict[int, list[_Rack]] = defaultdict(list)
    # Of racks of one size, those with the most recently tested nodes are taken first.
    for rack in sorted(racks, key=lambda r: (-r.tested, r.name)):
        if rack.whole_usable:
            by_size[rack.size].append(rack)
    plan = _fewest_by_size({size: len(rs) for size, rs in by_size.items()}, count)
    if plan is None:
        return None
    return sorted((rack for size, how_many in plan for rack in by_size[size][:how_many]), key=lambda r: r.name)


def _fewest_by_size(available: Mapping[int, int], count: int) -> list[tuple[int, int]] | None:
    """How many units of each size (size -> how many there are) add up to exactly `count` with the
    fewest units, as (size, how many); None if none do. A small bounded knapsack over the sizes."""
    # plans[total] = (units used, ((size, how many), ...)), the fewest units reaching `total`.
    plans: dict[int, tuple[int, tuple[tuple[int, int], ...]]] = {0: (0, ())}
    for size in sorted(available, reverse=True):
        extended: dict[int, tuple[int, tuple[tuple[int, int], ...]]] = {}
        for total, (used, plan) in plans.items():
            for how_many in range(min(available[size], (count - total) // size) + 1):
                reached = total + how_many * size
                if reached not in extended or used + how_many < extended[reached][0]:
                    extended[reached] = (used + how_many, (*plan, (size, how_many)))
        plans = extended
    return list(plans[count][1]) if count in plans else None


def _fewest_adding_up(rooms: list[int], count: int) -> int | None:
    """How many of `rooms` (largest first) it takes to add up to `count` (none for a count of 0 or
    less); None if all do not."""
    held = 0
    for taken, room in enumerate(rooms):
        if held >= count:
            return taken
        held += room
    return len(rooms) if held >= count else None


def _merged(tables: list[list[float]], cap: int) -> list[list[float]]:
    """The least cost of c nodes (c up to cap) from the first i + 1 domains together, for each i,
    given each domain's table. Tables are merged for every domain a request reads, choices
    recovered only for the one it takes (_Objective.take)."""
    merged: list[float] = [0]
    prefixes = []
    for table in tables:
        best = [INF] * min(cap + 1, len(merged) + len(table) - 1)
        for b, cost in enumerate(table):
            n = min(len(merged), len(best) - b)
            if n <= 0:
                break
            if cost != INF:
                best[b : b + n] = [
                    least if least <= so_far + cost else so_far + cost
                    for least, so_far in zip(best[b : b + n], merged, strict=False)
                ]
        merged = best
        prefixes.append(merged)
    return prefixes


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
