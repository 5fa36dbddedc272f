"""Free capacity by fabric domain, kept up to date by deltas: what placement reads instead of every rack.

No Django import. `FreeCapacity` is built once from the fleet's racks (the topology: pod, fabric
path, nodes) and holds the fabric tree with, for every domain, its nodes, its usable (free) nodes,
whether it is wholly free, and its wholly usable domains at each level below it by size. A delta
(`apply`: nodes now free, nodes now taken, nodes now recently tested) updates the racks it names
and their ancestors only, so its cost is the delta times the depth.

Interchangeable domains are not visited one by one: every domain below the pod has a signature,
its rack states (size, usable, recently tested, wholly free) and children's signatures in order,
interned, so that two domains with one signature look the same to placement. Each domain keeps
its children grouped by signature, and each level its domains, every group in name order: a
request reads one table per signature and as many members of a group as it can use.

Domain ids are the tree's preorder with children by name, so a subtree is an id range and the ids'
order is the name order placement breaks ties by.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

NO_SIGNATURE = -1  # a pod's: nothing groups pods, so none is kept
# What a signature interns: a rack's (size, usable, tested usable, wholly free), or a domain's
# children's signatures in order.
SignatureKey = tuple[int, ...]


@dataclass(frozen=True)
class RackState:
    """A rack as the index is built from it: where it is, its nodes, and which are usable."""

    pod: str
    rack: str
    path: tuple[tuple[str, str], ...]  # (level, domain) between the pod and the rack
    nodes: tuple[str, ...]  # slot order
    usable: frozenset[str]  # the nodes a request may take
    tested: frozenset[str] = frozenset()  # nodes with a recent long diagnostics pass
    whole: bool | None = None  # every node free; None: exactly when every node is usable
    gpu_models: Mapping[str, str] | None = None  # what requests with selectors read (see placement.place_in)
    attributes: Mapping[str, Mapping[str, str]] | None = None


class _Signatures:
    """Interned signatures, each counted by the domains that have it and forgotten at zero.

    Ids are never reused: a parent's signature names its children's ids, so a reused id could
    make a changed subtree look unchanged."""

    def __init__(self) -> None:
        self.ids: dict[SignatureKey, int] = {}
        self.keys: dict[int, SignatureKey] = {}
        self.holders: Counter[int] = Counter()
        self.next = 0

    def acquire(self, key: SignatureKey) -> int:
        sig = self.ids.get(key)
        if sig is None:
            sig = self.ids[key] = self.next
            self.keys[sig] = key
            self.next += 1
        self.holders[sig] += 1
        return sig

    def release(self, sig: int) -> None:
        self.holders[sig] -= 1
        if not self.holders[sig]:
            del self.holders[sig], self.ids[self.keys.pop(sig)]


class FreeCapacity:
    """The fabric tree with free capacity per domain; see the module docstring.

    Per domain id: name, depth, parent, end (its subtree is ids [id, end)), children, size (nodes),
    usable, tested (usable nodes recently tested), not_whole and not_whole_usable (racks below it
    not wholly free, not wholly usable), units[id][depth] (a Counter of the sizes of its wholly
    usable domains at that depth, itself included), signature, and groups (its children by
    signature, each list in id order). Racks also have nodes, usable and tested node sets.
    """

    def __init__(self, racks: Iterable[RackState]):
        racks = sorted((r for r in racks if r.nodes), key=lambda r: (r.pod, *(name for _, name in r.path), r.rack))
        shapes = {tuple(level for level, _ in r.path) for r in racks}
        if len(shapes) > 1:
            raise ValueError(f"racks name different fabric levels: {sorted(shapes)}")
        self.switch_levels: tuple[str, ...] = shapes.pop() if shapes else ()
        self.rack_depth = len(self.switch_levels) + 1
        self.names: list[str] = []
        self.depth: list[int] = []
        self.parent: list[int] = []
        self.end: list[int] = []
        self.children: list[list[int]] = []
        self.size: list[int] = []
        self.usable: list[int] = []
        self.tested: list[int] = []
        self.not_whole: list[int] = []
        self.not_whole_usable: list[int] = []
        self.units: list[list[Counter[int]]] = []
        self.racks: dict[int, RackState] = {}  # as given when built
        self.nodes: dict[int, tuple[str, ...]] = {}
        self.usable_nodes: dict[int, set[str]] = {}
        self.tested_nodes: dict[int, set[str]] = {}
        self.whole_given: dict[int, bool] = {}  # racks whose wholeness was given, not read from usable
        self.rack_of: dict[str, int] = {}
        self.ids: dict[str, int] = {}  # domain name -> id (a rack's name is its NVLink domain's)
        self.pods: dict[str, int] = {}
        self.by_level: list[list[int]] = [[] for _ in range(self.rack_depth + 1)]
        self.total = 0
        self._add_racks(racks)
        self._count_racks()

    def _add_racks(self, racks: list[RackState]) -> None:
        """The tree, in the racks' order: each rack under its pod and fabric domains, each domain
        added when the first rack under it is."""
        open_path: list[tuple[str, int]] = []  # (name, id) of the domains of the rack before, top down
        for rack in racks:
            names = (rack.pod, *(name for _, name in rack.path))
            shared = 0
            while shared < len(open_path) and shared < len(names) and open_path[shared][0] == names[shared]:
                shared += 1
            del open_path[shared:]
            for name in names[shared:]:
                open_path.append((name, self._add(name, open_path[-1][1] if open_path else -1)))
            rack_id = self._add(rack.rack, open_path[-1][1])
            self.racks[rack_id] = rack
            self.nodes[rack_id] = rack.nodes
            self.usable_nodes[rack_id] = set(rack.usable)
            self.tested_nodes[rack_id] = set(rack.tested)
            if rack.whole is not None:
                self.whole_given[rack_id] = rack.whole
            for node in rack.nodes:
                self.rack_of[node] = rack_id
            self.total += len(rack.nodes)
        for domain in reversed(range(len(self.names))):
            self.end[domain] = max([domain + 1, *(self.end[c] for c in self.children[domain])])

    def _count_racks(self) -> None:
        """Every domain's size, usage and signature, from its racks."""
        self.signatures = _Signatures()
        self.signature = [NO_SIGNATURE] * len(self.names)
        self.groups: list[dict[int, list[int]]] = [{} for _ in self.names]
        self.level_groups: list[dict[int, list[int]]] = [{} for _ in range(self.rack_depth + 1)]
        for rack, nodes in self.nodes.items():
            for domain in self.ancestry(rack):
                # Every rack starts counted as neither usable nor whole, then as it is.
                self.size[domain] += len(nodes)
                self.not_whole[domain] += 1
                self.not_whole_usable[domain] += 1
        # The most nodes a domain of each level has: sizes never change, usage does.
        self.largest = [max((self.size[d] for d in domains), default=0) for domains in self.by_level]
        for rack in self.nodes:
            self._change(rack, (0, 0, 1, 1), self._state(rack))
        for domain in reversed(range(len(self.names))):  # children before parents
            self._sign(domain)

    def _add(self, name: str, parent: int) -> int:
        domain = len(self.names)
        depth = self.depth[parent] + 1 if parent >= 0 else 0
        self.names.append(name)
        self.depth.append(depth)
        self.parent.append(parent)
        self.end.append(domain + 1)
        self.children.append([])
        for values in (self.size, self.usable, self.tested, self.not_whole, self.not_whole_usable):
            values.append(0)
        self.units.append([Counter() for _ in range(self.rack_depth + 1)])
        self.by_level[depth].append(domain)
        self.ids.setdefault(name, domain)
        if parent >= 0:
            self.children[parent].append(domain)
        else:
            self.pods[name] = domain
        return domain

    def ancestry(self, domain: int) -> list[int]:
        """The domain and its ancestors, bottom up."""
        chain = []
        while domain >= 0:
            chain.append(domain)
            domain = self.parent[domain]
        return chain

    def whole(self, domain: int) -> bool:
        return not self.not_whole[domain]

    def whole_usable(self, domain: int) -> bool:
        return not self.not_whole_usable[domain]

    def rack_whole(self, rack: int) -> bool:
        return self.whole_given.get(rack, len(self.usable_nodes[rack]) == len(self.nodes[rack]))

    def ordered_usable(self, rack: int) -> tuple[str, ...]:
        """The rack's usable nodes in slot order, recently tested ones first."""
        usable, tested = self.usable_nodes[rack], self.tested_nodes[rack]
        nodes = self.nodes[rack]
        return tuple(n for n in nodes if n in usable and n in tested) + tuple(
            n for n in nodes if n in usable and n not in tested
        )

    def racks_under(self, domain: int) -> list[int]:
        return [d for d in range(domain, self.end[domain]) if d in self.nodes]

    def unit_capacity(self, domain: int, depth: int) -> int:
        """Nodes in the wholly usable domains at `depth` under `domain`."""
        return sum(size * n for size, n in self.units[domain][depth].items())

    def apply(
        self,
        *,
        freed: Iterable[str] = (),
        taken: Iterable[str] = (),
        tested: Iterable[str] = (),
        untested: Iterable[str] = (),
    ) -> None:
        """Nodes now free, now taken, now recently tested and no longer: each rack touched and its
        ancestors are updated, then their signatures bottom up. Unknown nodes are ignored."""
        before: dict[int, tuple[int, int, int, int]] = {}
        for names, into, adding in (
            (freed, self.usable_nodes, True),
            (taken, self.usable_nodes, False),
            (tested, self.tested_nodes, True),
            (untested, self.tested_nodes, False),
        ):
            for node in names:
                rack = self.rack_of.get(node)
                if rack is None:
                    continue
                if rack not in before:
                    before[rack] = self._state(rack)
                if adding:
                    into[rack].add(node)
                else:
                    into[rack].discard(node)
        for rack, old in before.items():
            self._change(rack, old, self._state(rack))
        dirty = {d for rack in before for d in self.ancestry(rack)}
        for domain in sorted(dirty, reverse=True):  # a child's id is above its parent's
            self._unsign(domain)
            self._sign(domain)

    def _state(self, rack: int) -> tuple[int, int, int, int]:
        """What the rack adds to its domains' summaries: usable, tested usable, not wholly free,
        not wholly usable."""
        usable = self.usable_nodes[rack]
        whole = self.rack_whole(rack)
        return (
            len(usable),
            len(usable & self.tested_nodes[rack]),
            int(not whole),
            int(not (whole and len(usable) == len(self.nodes[rack]))),
        )

    def _change(self, rack: int, old: tuple[int, int, int, int], new: tuple[int, int, int, int]) -> None:
        """Replace the rack's part in its own and its ancestors' summaries; keep each ancestor's
        wholly usable units by depth when a domain becomes or stops being wholly usable."""
        usable, tested, not_whole, not_whole_usable = (b - a for a, b in zip(old, new, strict=True))
        chain = self.ancestry(rack)
        for domain in chain:
            self.usable[domain] += usable
            self.tested[domain] += tested
            self.not_whole[domain] += not_whole
            was = not self.not_whole_usable[domain]
            self.not_whole_usable[domain] += not_whole_usable
            now = not self.not_whole_usable[domain]
            if was != now:
                size = self.size[domain]
                for ancestor in self.ancestry(domain):
                    units = self.units[ancestor][self.depth[domain]]
                    units[size] += 1 if now else -1
                    if not units[size]:
                        del units[size]

    def _sign(self, domain: int) -> None:
        depth = self.depth[domain]
        if depth == 0:
            return
        key: SignatureKey
        if domain in self.nodes:
            key = (
                len(self.nodes[domain]),
                len(self.usable_nodes[domain]),
                len(self.usable_nodes[domain] & self.tested_nodes[domain]),
                self.rack_whole(domain),
            )
        else:
            key = tuple(self.signature[c] for c in self.children[domain])
        sig = self.signature[domain] = self.signatures.acquire(key)
        insort(self.groups[self.parent[domain]].setdefault(sig, []), domain)
        insort(self.level_groups[depth].setdefault(sig, []), domain)

    def _unsign(self, domain: int) -> None:
        sig = self.signature[domain]
        if sig == NO_SIGNATURE:
            return
        for groups in (self.groups[self.parent[domain]], self.level_groups[self.depth[domain]]):
            members = groups[sig]
            del members[bisect_left(members, domain)]
            if not members:
                del groups[sig]
        self.signatures.release(sig)
        self.signature[domain] = NO_SIGNATURE


def first_members(members: Sequence[int], lo: int, hi: int, how_many: int, skip: set[int]) -> list[int]:
    """Up to `how_many` of the sorted `members` within ids [lo, hi), leaving out `skip`."""
    chosen: list[int] = []
    for member in members[bisect_left(members, lo) :]:
        if member >= hi or len(chosen) == how_many:
            break
        if member not in skip:
            chosen.append(member)
    return chosen
