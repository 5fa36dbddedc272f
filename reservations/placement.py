"""Placement: which free nodes a reservation gets, a pure function of (request, free capacity).

No Django import. The service reads free capacity per rack for the requested period inside
a transaction, calls `place`, and inserts allocations; the exclusion constraint on
allocations stays the final guard against double booking.

A rack is an NVLink domain and a pod a fabric domain, so a reservation never spans pods.
Within a pod, placement is best-fit: it uses partly used racks first, tightest fit first,
and breaks whole racks only when it must, so whole racks stay free for rack-scale requests.
Among choices equal by those rules (racks that fit as tightly, the free nodes of one rack), nodes
with a recent diagnostics pass go first: a tie-breaker, never a reason to touch another rack.
bench/placement_baselines.py holds first-fit and random placement to measure that choice against.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from core.errors import Conflict


@dataclass(frozen=True)
class RackCapacity:
    pod: str
    rack: str
    nodes: tuple[str, ...]  # every node of the rack in slot order; defines the rack's size
    free: tuple[str, ...]  # the nodes free for the requested period
    gpu_models: Mapping[str, str] | None = None  # node -> GPU model; None: models unknown
    recently_tested: frozenset[str] = frozenset()  # nodes with a recent long diagnostics pass


@dataclass(frozen=True)
class PlacementRequest:
    node_count: int
    pod: str | None = None  # None: any pod
    rack_scale: bool = False  # whole racks only, every node of each chosen rack
    gpu_model: str | None = None  # None: any model
    near: frozenset[str] = frozenset()  # racks to fill first: where a growing reservation has its nodes


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
    usable: tuple[str, ...]  # free nodes of the requested model, in slot order
    whole: bool  # every node free: taking any of it costs a whole rack
    whole_usable: bool  # whole, and every node of the requested model: fit for rack_scale
    tested: int = 0  # usable nodes with a recent diagnostics pass, which `usable` lists first

    @property
    def size(self) -> int:
        return len(self.nodes)


def place(request: PlacementRequest, racks: Sequence[RackCapacity]) -> list[str]:
    """Best-fit placement: the chosen node names, all in one pod, or PlacementRefused.

    With no pod given, the pod is the one that breaks the fewest whole racks, then the one with
    the fewest usable free nodes (the tightest fit), then the first by name; for rack_scale, the
    one that needs the fewest racks, then the least whole capacity, then the name.
    ValueError for a node_count below one or inconsistent capacity: those are the caller's bugs.
    """
    pods = _pods_in_scope(request, racks)
    count = request.node_count
    if request.rack_scale:
        options = {pod: chosen for pod, rs in pods.items() if (chosen := _fewest_whole_racks(rs, count)) is not None}
        if not options:
            raise PlacementRefused(_rack_scale_refusal(request, pods))
        # Fewest racks first; then the pod with the least whole capacity, so bigger pods keep theirs.
        pod = min(options, key=lambda p: (len(options[p]), _whole_usable_nodes(pods[p]), p))
        return [node for rack in options[pod] for node in rack.nodes]

    options = {pod: _best_fit(rs, count, request.near) for pod, rs in pods.items() if _usable_nodes(rs) >= count}
    if not options:
        raise PlacementRefused(_shortage_refusal(request, pods))
    # Breaking no whole rack beats fitting tightly: a tighter pod that must break a rack loses
    # to a roomier one that can use its partly used racks.
    pod = min(options, key=lambda p: (_whole_racks_broken(options[p]), _usable_nodes(pods[p]), p))
    return [node for rack, taken in options[pod] for node in rack.usable[:taken]]


def _pods_in_scope(request: PlacementRequest, racks: Sequence[RackCapacity]) -> dict[str, list[_Rack]]:
    """The pods the request may use, by name, each with its racks by name, seen through the request."""
    if request.node_count < 1:
        raise ValueError(f"node_count must be at least 1, not {request.node_count}")
    _check_capacity(racks)
    if request.pod is not None and all(r.pod != request.pod for r in racks):
        raise PlacementRefused(f"pod {request.pod} does not exist")
    model = request.gpu_model
    pods: dict[str, list[_Rack]] = defaultdict(list)
    model_present = model is None
    for r in sorted(racks, key=lambda r: (r.pod, r.rack)):
        # A rack with no nodes can hold nothing and is no NVLink domain to keep whole.
        if not r.nodes or request.pod not in (None, r.pod):
            continue
        if model is None and r.free is r.nodes:  # a wholly free rack, as the service hands most of them
            usable, tested = _tested_first(r.nodes, r.recently_tested)
            pods[r.pod].append(_Rack(r.pod, r.rack, r.nodes, usable, True, True, tested))
            continue
        free = set(r.free)  # a subset of r.nodes: _check_capacity made sure
        models = r.gpu_models or {}
        if model is None and len(free) == len(r.nodes):
            usable = r.nodes
        else:
            usable = tuple(n for n in r.nodes if n in free and (model is None or models.get(n) == model))
        model_present = model_present or any(models.get(n) == model for n in r.nodes)
        whole = len(free) == len(r.nodes)
        usable, tested = _tested_first(usable, r.recently_tested)
        pods[r.pod].append(_Rack(r.pod, r.rack, r.nodes, usable, whole, whole and len(usable) == len(r.nodes), tested))
    if not pods:
        raise PlacementRefused("no rack is known to placement")
    if not model_present:
        where = f"in pod {request.pod} " if request.pod else ""
        raise PlacementRefused(f"no node {where}has GPU model {model}")
    return dict(sorted(pods.items()))


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


def give_back(held: Mapping[str, Sequence[str]], count: int, *, rack_scale: bool) -> list[str]:
    """Which `count` of a reservation's nodes to release, given them by rack (rack -> nodes, in
    slot order): whole holdings first, smallest first, so each rack given back is whole again
    for others, then the last slots of the smallest holding left. rack_scale gives back whole
    holdings only; PlacementRefused if none add up to `count`."""
    racks = sorted(held.items(), key=lambda item: (len(item[1]), item[0]))
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


def _first_whole_racks(racks: list[_Rack], count: int) -> list[_Rack] | None:
    """The first racks in the given order whose sizes add up to exactly `count`; None if none do.

    reachable[i] has bit s set when racks[i:] hold a subset of total s, so walking the racks in
    order we take each one that still leaves the rest reachable.
    """
    mask = (1 << (count + 1)) - 1
    reachable = [1] * (len(racks) + 1)
    for i in reversed(range(len(racks))):
        reachable[i] = (reachable[i + 1] | reachable[i + 1] << racks[i].size) & mask
    if not reachable[0] >> count & 1:
        return None
    chosen, remainder = [], count
    for i, rack in enumerate(racks):
        if remainder == 0:
            break
        if rack.size <= remainder and reachable[i + 1] >> (remainder - rack.size) & 1:
            chosen.append(rack)
            remainder -= rack.size
    return chosen


def _shortage_refusal(request: PlacementRequest, pods: dict[str, list[_Rack]]) -> str:
    nodes = f"free nodes with GPU model {request.gpu_model}" if request.gpu_model else "free nodes"
    if request.pod is not None:
        have = _usable_nodes(pods[request.pod])
        return f"pod {request.pod} has {have} {nodes}, fewer than the {request.node_count} requested"
    roomiest = max(pods, key=lambda p: _usable_nodes(pods[p]))
    return f"no pod has {request.node_count} {nodes}; the most is {roomiest} with {_usable_nodes(pods[roomiest])}"


def _rack_scale_refusal(request: PlacementRequest, pods: dict[str, list[_Rack]]) -> str:
    count = request.node_count
    model = f" of GPU model {request.gpu_model}" if request.gpu_model else ""
    needs = f"rack_scale needs {count} nodes in whole racks{model}"
    if request.pod is not None:
        racks = pods[request.pod]
        why = f"pod {request.pod} has {_describe_whole_racks(racks)}"
        if _whole_usable_nodes(racks) >= count:
            why += f", which cannot add up to exactly {count}"
        return f"{needs}; {why}"
    roomiest = max(pods, key=lambda p: _whole_usable_nodes(pods[p]))
    if not _whole_usable_nodes(pods[roomiest]):
        return f"{needs}; no pod has a free whole rack"
    most = f"the most is {roomiest} with {_describe_whole_racks(pods[roomiest])}"
    return f"{needs}; no pod has free whole racks adding up to exactly {count}; {most}"


def _describe_whole_racks(racks: list[_Rack]) -> str:
    """'2 free whole racks of 8 nodes and 1 of 2 nodes', largest racks first."""
    groups = sorted(Counter(r.size for r in racks if r.whole_usable).items(), reverse=True)
    if not groups:
        return "no free whole rack"
    (size, how_many), *others = groups
    first = f"{how_many} free whole rack{_plural(how_many)} of {size} node{_plural(size)}"
    return " and ".join([first, *(f"{n} of {s} node{_plural(s)}" for s, n in others)])


def _plural(n: int) -> str:
    return "" if n == 1 else "s"
