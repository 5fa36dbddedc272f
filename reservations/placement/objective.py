"""The order of costs (see the package's docstring), solved exactly by dynamic programming over
the index's tree.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import NamedTuple

from reservations.free_capacity import NO_SIGNATURE, FreeCapacity, first_members
from reservations.placement.refusals import refusal
from reservations.placement.request import PlacementRefused, PlacementRequest
from reservations.placement.sums import fewest_adding_up

INF = float("inf")  # the cost of a count a domain cannot give

Cost = tuple[str] | tuple[str, int]  # ("near",), ("span", depth), ("broken", depth)...


class CostOrder(NamedTuple):
    required: int  # the depth of the required level
    rack: int  # the depth of the racks: the last level
    whole: int | None  # the depth of the whole level, if any
    order: list[Cost]  # the costs, most important first


def cost_order(request: PlacementRequest, levels: tuple[str, ...]) -> CostOrder:
    """The package docstring's order of costs for this request over these levels, top first."""
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
    order: list[Cost] = [
        *(("near",) if request.near and whole is None else ()),
        *(("span", d) for d in spans),
        *(("broken", d) for d in below if d > 0),
        *(("left", d) for d in below),
        ("untested",),
    ]
    return CostOrder(required, rack, whole, order)


class Objective:
    """The package docstring's order of costs as one integer per choice: each cost is a digit in
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
        self.weight: dict[Cost, int] = {name: base ** (len(order) - 1 - i) for i, name in enumerate(order)}
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
            raise PlacementRefused(refusal(self.request, self.capacity, level, domains, self.whole))
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
        fewest = fewest_adding_up(sorted(partly + whole, reverse=True), count)
        if fewest is None:
            return cost
        if not span:
            return cost + broken * (fewest_adding_up(whole, count - sum(partly)) or 0)
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

    def _cost(self, name: Cost, times: int = 1) -> int:
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
        solved: tuple[list[float], list[list[float]]]
        if depth == self.whole:
            solved = self._whole_unit(domain), []
        elif depth == self.rack:
            solved = self._rack(domain), []
        else:
            prefixes = _merged([self.table(child) for child in self.children(domain)], self.count)
            table: list[float] = list(prefixes[-1]) if prefixes else [0]
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
        assert self.whole is not None  # solve reads a domain as a whole unit only at the whole level
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


def _merged(tables: list[list[float]], cap: int) -> list[list[float]]:
    """The least cost of c nodes (c up to cap) from the first i + 1 domains together, for each i,
    given each domain's table. Tables are merged for every domain a request reads, choices
    recovered only for the one it takes (Objective.take)."""
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
