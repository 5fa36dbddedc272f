"""Placement quality: best-fit against first-fit, random and Kueue-style most-free-first placement.

Two seeded traces of arrivals and departures, each replayed on one copy of a fleet per strategy
(a departure frees a reservation only where it was accepted):

- pods and racks only: 10 pods x 12 racks x 8 nodes, sizes 1-16, about 10% rack-scale, some
  pinned to a pod; then place() is timed on a 10,000-node fleet (10 pods x 125 racks x 8 nodes),
  half of it busy;
- a 3-level fabric, `pod > spine_group > leaf > nvlink_domain` (default_layout(2048,
  racks_per_leaf=2, spine_groups_per_pod=2): 2 pods of 2 spine groups of 32 leaves of 2 racks of
  8 nodes), sizes 1-40, about 10% whole NVLink domains: the leaves and spine groups each
  reservation spans, the share of whole-domain requests accepted, and fragmentation (partly used
  domains per level) on average and at three checkpoints.

Exits 1 unless best-fit accepts more rack-scale requests than first-fit and keeps more whole racks
free, and spans the fewest leaves; --no-target reports those checks but exits 0 (a trace too short
to tell the strategies apart).
Run from the repository root: .venv/bin/python -m bench.placement_quality [--seed N] [--arrivals N]
[--fabric-arrivals N] [--place-calls N] [--no-target]
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from core.topology import LEAF, NVLINK_DOMAIN, SPINE_GROUP, default_layout
from reservations.placement import Path, PlacementRefused, PlacementRequest, RackCapacity, place
from tests.support.placement_baselines import (
    Strategy,
    count_domains,
    count_whole_free_racks,
    first_fit,
    most_free_first,
    random_fit,
)
from tests.support.table import print_table

WHOLE_SHARE = 0.1
PINNED_SHARE = 0.2
TARGET_LOAD = 0.85  # offered node-time as a share of the fleet: busy enough that placement matters
FABRIC_LEVELS = (SPINE_GROUP, LEAF, NVLINK_DOMAIN)  # the levels whose domains the 3-level trace counts


@dataclass(frozen=True)
class Arrival:
    at: float
    request: PlacementRequest
    duration: float


class Fleet:
    """Racks with their pods and fabric paths; tracks which nodes are busy."""

    def __init__(self, racks: list[tuple[str, str, tuple[str, ...], Path]]):
        self.racks = racks
        self.busy: set[str] = set()

    @classmethod
    def of_pods(cls, pods: int, racks_per_pod: int, nodes_per_rack: int) -> Fleet:
        width = len(str(pods * racks_per_pod * nodes_per_rack))
        racks: list[tuple[str, str, tuple[str, ...], Path]] = []
        number = 0
        for p in range(pods):
            for r in range(racks_per_pod):
                nodes = tuple(f"n{number + i:0{width}d}" for i in range(nodes_per_rack))
                number += nodes_per_rack
                racks.append((f"p{p + 1:02d}", f"r{p * racks_per_pod + r + 1:04d}", nodes, ()))
        return cls(racks)

    @classmethod
    def of_fabric(cls, node_count: int, spine_groups_per_pod: int) -> Fleet:
        racks: dict[tuple[str, str, Path], list[str]] = {}
        for spec in default_layout(node_count, spine_groups_per_pod=spine_groups_per_pod, gpus_per_node=0):
            racks.setdefault((spec.pod, spec.rack, spec.fabric[1:-1]), []).append(spec.name)
        return cls([(pod, rack, tuple(nodes), path) for (pod, rack, path), nodes in racks.items()])

    @property
    def pods(self) -> list[str]:
        return sorted({pod for pod, *_ in self.racks})

    @property
    def size(self) -> int:
        return sum(len(nodes) for _, _, nodes, _ in self.racks)

    def capacity(self) -> list[RackCapacity]:
        return [
            RackCapacity(pod=pod, rack=rack, nodes=nodes, free=tuple(n for n in nodes if n not in self.busy), path=path)
            for pod, rack, nodes, path in self.racks
        ]


def synthetic_trace(seed: int, arrivals: int, fleet: Fleet, sizes: tuple[int, int], whole: str | None) -> list[Arrival]:
    """Arrivals one per time unit; WHOLE_SHARE of them whole racks (8 or 16 nodes), the rest of a
    size drawn uniformly from `sizes`; `whole` None asks for whole racks as rack_scale."""
    rng = random.Random(seed)
    mean_size = (1 - WHOLE_SHARE) * sum(sizes) / 2 + WHOLE_SHARE * 12
    # Little's law: one arrival per time unit, so this mean duration offers TARGET_LOAD of the fleet.
    mean_duration = TARGET_LOAD * fleet.size / mean_size
    trace = []
    for i in range(arrivals):
        in_whole = rng.random() < WHOLE_SHARE
        request = PlacementRequest(
            node_count=rng.choice((8, 16)) if in_whole else rng.randint(*sizes),
            pod=rng.choice(fleet.pods) if rng.random() < PINNED_SHARE else None,
            rack_scale=in_whole and whole is None,
            whole=whole if in_whole else None,
        )
        trace.append(Arrival(at=float(i), request=request, duration=rng.expovariate(1 / mean_duration)))
    return trace


@dataclass
class Outcome:
    accepted: int = 0
    requests: int = 0
    whole_accepted: int = 0
    whole_requests: int = 0
    whole_racks: list[int] = field(default_factory=list)  # whole free racks after each arrival
    spans: dict[str, list[int]] = field(default_factory=dict)  # level -> domains each accepted reservation spans
    partly_used: dict[str, list[int]] = field(default_factory=dict)  # level -> partly used domains after each arrival
    seconds: float = 0.0


def replay(trace: list[Arrival], fleet: Fleet, strategy: Strategy, warm_up: int, levels: tuple[str, ...]) -> Outcome:
    """Replay the trace; `levels` are those whose spans and partly used domains are counted."""
    outcome = Outcome(spans={level: [] for level in levels}, partly_used={level: [] for level in levels})
    domain_of = _domains_of_nodes(fleet, levels)
    departures: list[tuple[float, int, list[str]]] = []
    started = time.perf_counter()
    for index, arrival in enumerate(trace):
        while departures and departures[0][0] <= arrival.at:
            fleet.busy.difference_update(heapq.heappop(departures)[2])
        chosen: list[str] | None
        try:
            chosen = strategy(arrival.request, fleet.capacity())
        except PlacementRefused:
            chosen = None
        if chosen is not None:
            fleet.busy.update(chosen)
            heapq.heappush(departures, (arrival.at + arrival.duration, index, chosen))
        if index < warm_up:
            continue
        outcome.requests += 1
        outcome.accepted += chosen is not None
        if arrival.request.whole_level:
            outcome.whole_requests += 1
            outcome.whole_accepted += chosen is not None
        capacity = fleet.capacity()
        outcome.whole_racks.append(count_whole_free_racks(capacity))
        for level in levels:
            if chosen is not None:
                outcome.spans[level].append(len({domain_of[level][node] for node in chosen}))
            outcome.partly_used[level].append(count_domains(capacity, level)[1])
    outcome.seconds = time.perf_counter() - started
    return outcome


def _domains_of_nodes(fleet: Fleet, levels: tuple[str, ...]) -> dict[str, dict[str, tuple[str, ...]]]:
    """level -> node -> its domain at that level (as the path from the pod down)."""
    domain_of: dict[str, dict[str, tuple[str, ...]]] = {level: {} for level in levels}
    for pod, rack, nodes, path in fleet.racks:
        full = ((pod,), *((pod, *(name for _, name in path[: i + 1])) for i in range(len(path))), (pod, rack))
        names = [level for level, _ in path] + [NVLINK_DOMAIN]
        for level in levels:
            for node in nodes:
                domain_of[level][node] = full[names.index(level) + 1]
    return domain_of


def time_place_at_scale(seed: int, calls: int) -> tuple[float, float, float]:
    """Median, p99 and max milliseconds of place() on 10,000 nodes, half of them busy."""
    rng = random.Random(seed)
    fleet = Fleet.of_pods(pods=10, racks_per_pod=125, nodes_per_rack=8)
    for _, _, nodes, _ in fleet.racks:
        # Busy racks, partly used racks and whole free racks in every pod, as after a while in service.
        fleet.busy.update(nodes[: rng.choice((0, 0, 3, 5, 8, 8))])
    capacity = fleet.capacity()
    timings = []
    for _ in range(calls):
        rack_scale = rng.random() < WHOLE_SHARE
        request = PlacementRequest(
            node_count=rng.choice((8, 16)) if rack_scale else rng.randint(1, 16),
            pod=rng.choice(fleet.pods) if rng.random() < PINNED_SHARE else None,
            rack_scale=rack_scale,
        )
        started = time.perf_counter()
        place(request, capacity)
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    return statistics.median(timings), timings[int(0.99 * (len(timings) - 1))], timings[-1]


Figure = tuple[str, Callable[[Outcome], str]]  # a row of the table: its name, and its cell for an outcome


def side_by_side(results: dict[str, Outcome], figures: list[Figure]) -> None:
    cells = [(figure, [show(o) for o in results.values()]) for figure, show in figures]
    width = max(len(cell) for cell in [*results, *(c for _, row in cells for c in row)]) + 2
    print_table(
        [(figure, "".join(f"{cell:>{width}}" for cell in row)) for figure, row in cells],
        heading=("figure", "".join(f"{name:>{width}}" for name in results)),
    )


def at(series: list[int], share: float) -> int:
    return series[min(len(series) - 1, int(share * len(series)))]


def partly_used_figures(level: str) -> list[Figure]:
    """The partly used domains of `level`: their mean, and their count at 1/3, 2/3 and the end."""
    return [
        (f"partly used {level}, mean", lambda o: f"{statistics.fmean(o.partly_used[level]):.1f}"),
        (
            f"partly used {level}, 1/3 2/3 end",
            lambda o: "/".join(str(at(o.partly_used[level], s)) for s in (1 / 3, 2 / 3, 1)),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--arrivals", type=int, default=4000)
    parser.add_argument("--fabric-arrivals", type=int, default=3000)
    parser.add_argument("--place-calls", type=int, default=300, help="place() calls timed on 10,000 nodes")
    parser.add_argument("--no-target", action="store_true", help="exit 0 though best-fit does not win")
    args = parser.parse_args()

    def strategies() -> dict[str, Strategy]:
        return {
            "best-fit": place,
            "first-fit": first_fit,
            "random": random_fit(args.seed),
            "most-free": most_free_first,
        }

    shape = (10, 12, 8)
    warm_up = args.arrivals // 10
    trace = synthetic_trace(args.seed, args.arrivals, Fleet.of_pods(*shape), sizes=(1, 16), whole=None)
    print(
        f"Pods and racks: {shape[0]} pods x {shape[1]} racks x {shape[2]} nodes, {args.arrivals} arrivals, "
        f"seed {args.seed}, offered load {TARGET_LOAD:.0%}, first {warm_up} arrivals not counted"
    )
    flat = {name: replay(trace, Fleet.of_pods(*shape), s, warm_up, ()) for name, s in strategies().items()}
    side_by_side(
        flat,
        [
            ("rack-scale accepted", lambda o: f"{o.whole_accepted / o.whole_requests:.1%}"),
            ("all accepted", lambda o: f"{o.accepted / o.requests:.1%}"),
            ("whole free racks, mean", lambda o: f"{statistics.fmean(o.whole_racks):.1f}"),
            ("whole free racks, min", lambda o: f"{min(o.whole_racks)}"),
            ("seconds", lambda o: f"{o.seconds:.1f}"),
        ],
    )
    median, p99, slowest = time_place_at_scale(args.seed, calls=args.place_calls)
    print(
        f"place() on 10,000 nodes (10 pods x 125 racks x 8): median {median:.1f} ms, p99 {p99:.1f} ms, "
        f"max {slowest:.1f} ms\n"
    )

    fabric = Fleet.of_fabric(2048, spine_groups_per_pod=2)
    warm_up = args.fabric_arrivals // 10
    trace = synthetic_trace(args.seed, args.fabric_arrivals, fabric, sizes=(1, 40), whole=NVLINK_DOMAIN)
    print(
        f"3-level fabric: 2048 nodes, pod > spine_group > leaf > nvlink_domain (2 x 2 x 32 x 2 x 8), "
        f"{args.fabric_arrivals} arrivals, sizes 1-40, {WHOLE_SHARE:.0%} whole nvlink_domains; "
        f"first {warm_up} not counted; partly used domains at 1/3, 2/3 and the end"
    )
    deep = {
        name: replay(trace, Fleet.of_fabric(2048, 2), s, warm_up, FABRIC_LEVELS) for name, s in strategies().items()
    }
    figures: list[Figure] = [
        ("leaves spanned, mean", lambda o: f"{statistics.fmean(o.spans[LEAF]):.2f}"),
        ("spine groups spanned, mean", lambda o: f"{statistics.fmean(o.spans[SPINE_GROUP]):.2f}"),
        ("whole-domain accepted", lambda o: f"{o.whole_accepted / o.whole_requests:.1%}"),
        ("all accepted", lambda o: f"{o.accepted / o.requests:.1%}"),
    ]
    for level in FABRIC_LEVELS:
        figures += partly_used_figures(level)
    figures.append(("seconds", lambda o: f"{o.seconds:.1f}"))
    side_by_side(deep, figures)

    best, first = flat["best-fit"], flat["first-fit"]
    beats = (
        best.whole_accepted / best.whole_requests > first.whole_accepted / first.whole_requests
        and statistics.fmean(best.whole_racks) > statistics.fmean(first.whole_racks)
    )
    fewer_leaves = all(
        statistics.fmean(deep["best-fit"].spans[LEAF]) <= statistics.fmean(o.spans[LEAF]) for o in deep.values()
    )
    print("best-fit beats first-fit" if beats else "FAIL: best-fit does not beat first-fit")
    print("best-fit spans the fewest leaves" if fewer_leaves else "FAIL: best-fit does not span the fewest leaves")
    sys.exit(0 if (beats and fewer_leaves) or args.no_target else 1)


if __name__ == "__main__":
    main()
