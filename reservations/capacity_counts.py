"""Free capacity per pod and fabric domain as tenants see it (GET /v1/capacity), kept up to date
by deltas. Pure: no Django.

`CapacityCounts` is built once from the fleet's racks (pod, fabric path, node ids) and holds the
fabric tree with, for every domain (a pod, a fabric domain, a rack), its nodes, those free now,
those free for as long as a reservation without an end lasts, and its racks wholly free now. It is
told the nodes that are not free (`apply`: not free now, not free open-ended), keeps the sets it
was told last, and updates only the racks whose nodes moved between them and those racks'
ancestors: a change costs the nodes that changed times the tree's depth, not the fleet.

Its answer (`pods`) lists each pod's domains down to a depth, built again only after the counts
changed: an answer given out is never changed afterwards, callers share it.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from core.topology import NVLINK_DOMAIN, POD

WHOLE_TREE_RACKS = 2_000  # up to so many racks, the answer lists every domain by default
MOST_DOMAINS_LISTED = 1_000  # else the deepest depth that lists at most so many


@dataclass(frozen=True)
class RackIds:
    """One rack as it is counted: where it is, and its nodes' ids."""

    pod: str
    path: tuple[tuple[str, str], ...]  # (level, domain) between the pod and the rack, top down
    rack: str
    ids: tuple[int, ...]


class CapacityCounts:
    """The fabric tree with free capacity per domain; see the module docstring.

    Domain ids are the tree's preorder with children by name (a pod's id is its own, depth 0).
    Per domain: level, name, depth, children, nodes, available (free now), open_free (free
    open-ended) and whole_free (racks below it, itself if a rack, whose every node is free now).
    """

    def __init__(self, racks: Iterable[RackIds]):
        ordered = sorted(racks, key=lambda r: (r.pod, *(name for _, name in r.path), r.rack))
        self.level: list[str] = []
        self.name: list[str] = []
        self.depth: list[int] = []
        self.children: list[list[int]] = []
        self.nodes: list[int] = []
        self.pod_ids: list[int] = []  # by name
        self.rack_of: dict[int, int] = {}  # node id -> its rack's domain id
        self.chain: dict[int, tuple[int, ...]] = {}  # rack -> it and its ancestors, bottom up
        ids: dict[tuple[int, str], int] = {}  # (parent, name) -> domain id; a pod's parent is -1
        for rack in ordered:
            chain = []
            parent = -1
            for level, name in ((POD, rack.pod), *rack.path, (NVLINK_DOMAIN, rack.rack)):
                domain = ids.get((parent, name))
                if domain is None:
                    domain = ids[(parent, name)] = self._add(level, name, parent)
                chain.append(domain)
                parent = domain
            for domain in chain:
                self.nodes[domain] += len(rack.ids)
            self.rack_of.update(dict.fromkeys(rack.ids, parent))
            self.chain[parent] = tuple(reversed(chain))
        self.levels = max(self.depth, default=0)  # levels listed below a pod, its racks' included
        self.per_depth = [self.depth.count(d) for d in range(self.levels + 1)]  # domains of each depth
        # Every node free until told otherwise.
        self.available = list(self.nodes)
        self.open_free = list(self.nodes)
        self.whole_free = [0] * len(self.nodes)
        for ancestry in self.chain.values():
            for domain in ancestry:
                self.whole_free[domain] += 1
        self.not_free_now: AbstractSet[int] = frozenset()
        self.not_free_open_ended: AbstractSet[int] = frozenset()
        self._answers: dict[int, list[dict[str, Any]]] = {}  # per depth, since the counts last changed

    def _add(self, level: str, name: str, parent: int) -> int:
        domain = len(self.name)
        self.level.append(level)
        self.name.append(name)
        self.depth.append(self.depth[parent] + 1 if parent >= 0 else 0)
        self.children.append([])
        self.nodes.append(0)
        if parent >= 0:
            self.children[parent].append(domain)
        else:
            self.pod_ids.append(domain)
        return domain

    def apply(self, not_free_now: AbstractSet[int], not_free_open_ended: AbstractSet[int]) -> bool:
        """The nodes not free now, and not free for as long as a reservation without an end lasts
        (unknown ids are ignored): only what changed since the sets applied last is counted. The
        sets are kept as given (the caller must not change them). Whether any count changed."""
        moved: dict[int, list[int]] = {}  # rack -> [change of available, change of open_free]
        for column, old, new in (
            (0, self.not_free_now, not_free_now),
            (1, self.not_free_open_ended, not_free_open_ended),
        ):
            if old == new:  # as after a change elsewhere, or a read again at the maximum age
                continue
            for nodes, step in ((old - new, 1), (new - old, -1)):
                for node in nodes:
                    if (rack := self.rack_of.get(node)) is not None:
                        moved.setdefault(rack, [0, 0])[column] += step
        self.not_free_now, self.not_free_open_ended = not_free_now, not_free_open_ended
        changed = False
        for rack, (available, open_free) in moved.items():
            if not (available or open_free):
                continue
            was_whole = self.available[rack] == self.nodes[rack]
            is_whole = self.available[rack] + available == self.nodes[rack]
            for domain in self.chain[rack]:
                self.available[domain] += available
                self.open_free[domain] += open_free
                self.whole_free[domain] += is_whole - was_whole
            changed = True
        if changed:
            self._answers = {}  # the answers given out stay as they were
        return changed

    def default_depth(self) -> int:
        """The whole tree while the fleet has at most WHOLE_TREE_RACKS racks, else the deepest
        depth that lists at most MOST_DOMAINS_LISTED domains (0: the pods alone)."""
        if self.per_depth[self.levels] <= WHOLE_TREE_RACKS:
            return self.levels
        listed = 0
        for depth in range(1, self.levels + 1):
            listed += self.per_depth[depth]
            if listed > MOST_DOMAINS_LISTED:
                return depth - 1
        return self.levels

    def pods(self, depth: int | None = None) -> list[dict[str, Any]]:
        """Per pod, by name: `{"name", "nodes", "available", "free_open_ended", "whole_free_racks",
        "domains"}`, its domains listed `depth` levels down (None: to the racks), each `{"level",
        "name", "nodes", "available", "children"}` with its children by name; a domain at the cut
        has none listed. Built once per depth until the counts change, then shared: not to be changed."""
        depth = self.levels if depth is None else min(depth, self.levels)
        answer = self._answers.get(depth)
        if answer is None:
            answer = self._answers[depth] = [
                {
                    "name": self.name[pod],
                    "nodes": self.nodes[pod],
                    "available": self.available[pod],
                    "free_open_ended": self.open_free[pod],
                    "whole_free_racks": self.whole_free[pod],
                    "domains": self._listed(self.children[pod], depth - 1),
                }
                for pod in self.pod_ids
            ]
        return answer

    def _listed(self, domains: list[int], below: int) -> list[dict[str, Any]]:
        if below < 0:
            return []
        return [
            {
                "level": self.level[d],
                "name": self.name[d],
                "nodes": self.nodes[d],
                "available": self.available[d],
                "children": self._listed(self.children[d], below - 1),
            }
            for d in domains
        ]
