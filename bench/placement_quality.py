"""Placement quality: best-fit against first-fit and random placement on one seeded trace.

The same synthetic trace of arrivals and departures (sizes 1-16, about 10% rack-scale,
some pinned to a pod) is replayed on three copies of a fleet of 10 pods x 12 racks x 8 nodes,
one per strategy; a departure frees a reservation only where it was accepted. Then place()
is timed on a 10,000-node fleet (10 pods x 125 racks x 8 nodes), half of it busy.

Run from the repository root: .venv/bin/python -m bench.placement_quality [--seed N]
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import sys
import time
from dataclasses import dataclass

from bench.placement_baselines import Strategy, count_whole_free_racks, first_fit, random_fit
from reservations.placement import PlacementRefused, PlacementRequest, RackCapacity, place

RACK_SCALE_SHARE = 0.1
PINNED_SHARE = 0.2
TARGET_LOAD = 0.85  # offered node-time as a share of the fleet: busy enough that placement matters


@dataclass(frozen=True)
class Arrival:
    at: float
    request: PlacementRequest
    duration: float


class Fleet:
    """Pods of equal racks; tracks which nodes are busy."""

    def __init__(self, pods: int, racks_per_pod: int, nodes_per_rack: int):
        width = len(str(pods * racks_per_pod * nodes_per_rack))
        self.racks: list[tuple[str, str, tuple[str, ...]]] = []
        number = 0
        for p in range(pods):
            for r in range(racks_per_pod):
                nodes = tuple(f"n{number + i:0{width}d}" for i in range(nodes_per_rack))
                number += nodes_per_rack
                self.racks.append((f"p{p + 1:02d}", f"r{p * racks_per_pod + r + 1:04d}", nodes))
        self.busy: set[str] = set()

    @property
    def pods(self) -> list[str]:
        return sorted({pod for pod, _, _ in self.racks})

    @property
    def size(self) -> int:
        return sum(len(nodes) for _, _, nodes in self.racks)

    def capacity(self) -> list[RackCapacity]:
        return [
            RackCapacity(pod=pod, rack=rack, nodes=nodes, free=tuple(n for n in nodes if n not in self.busy))
            for pod, rack, nodes in self.racks
        ]


def synthetic_trace(seed: int, arrivals: int, fleet: Fleet) -> list[Arrival]:
    rng = random.Random(seed)
    mean_size = (1 - RACK_SCALE_SHARE) * 8.5 + RACK_SCALE_SHARE * 12
    # Little's law: one arrival per time unit, so this mean duration offers TARGET_LOAD of the fleet.
    mean_duration = TARGET_LOAD * fleet.size / mean_size
    trace = []
    for i in range(arrivals):
        rack_scale = rng.random() < RACK_SCALE_SHARE
        request = PlacementRequest(
            node_count=rng.choice((8, 16)) if rack_scale else rng.randint(1, 16),
            pod=rng.choice(fleet.pods) if rng.random() < PINNED_SHARE else None,
            rack_scale=rack_scale,
        )
        trace.append(Arrival(at=float(i), request=request, duration=rng.expovariate(1 / mean_duration)))
    return trace


@dataclass
class Outcome:
    accepted: int = 0
    requests: int = 0
    rack_scale_accepted: int = 0
    rack_scale_requests: int = 0
    whole_racks: list[int] | None = None


def replay(trace: list[Arrival], fleet: Fleet, strategy: Strategy, warm_up: int) -> Outcome:
    outcome = Outcome(whole_racks=[])
    departures: list[tuple[float, int, list[str]]] = []
    for index, arrival in enumerate(trace):
        while departures and departures[0][0] <= arrival.at:
            fleet.busy.difference_update(heapq.heappop(departures)[2])
        capacity = fleet.capacity()
        try:
            chosen = strategy(arrival.request, capacity)
        except PlacementRefused:
            chosen = None
        else:
            fleet.busy.update(chosen)
            heapq.heappush(departures, (arrival.at + arrival.duration, index, chosen))
        if index < warm_up:
            continue
        outcome.requests += 1
        outcome.accepted += chosen is not None
        if arrival.request.rack_scale:
            outcome.rack_scale_requests += 1
            outcome.rack_scale_accepted += chosen is not None
        outcome.whole_racks.append(count_whole_free_racks(fleet.capacity()))
    return outcome


def time_place_at_scale(seed: int, calls: int) -> tuple[float, float, float]:
    """Median, p99 and max milliseconds of place() on 10,000 nodes, half of them busy."""
    rng = random.Random(seed)
    fleet = Fleet(pods=10, racks_per_pod=125, nodes_per_rack=8)
    for *_, nodes in fleet.racks:
        # Busy racks, partly used racks and whole free racks in every pod, as after a while in service.
        fleet.busy.update(nodes[: rng.choice((0, 0, 3, 5, 8, 8))])
    capacity = fleet.capacity()
    timings = []
    for _ in range(calls):
        rack_scale = rng.random() < RACK_SCALE_SHARE
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--arrivals", type=int, default=4000)
    args = parser.parse_args()

    shape = (10, 12, 8)
    trace = synthetic_trace(args.seed, args.arrivals, Fleet(*shape))
    warm_up = args.arrivals // 10
    strategies: dict[str, Strategy] = {
        "best-fit": place,
        "first-fit": first_fit,
        "random": random_fit(args.seed),
    }
    total_racks = shape[0] * shape[1]
    print(
        f"Placement quality: {shape[0]} pods x {shape[1]} racks x {shape[2]} nodes ({total_racks} racks), "
        f"{args.arrivals} arrivals, seed {args.seed}, offered load {TARGET_LOAD:.0%}, "
        f"first {warm_up} arrivals not counted"
    )
    print(
        f"{'strategy':<10} {'rack-scale accepted':>20} {'all accepted':>13} {'whole free racks mean':>22} "
        f"{'min':>5} {'seconds':>8}"
    )
    results = {}
    for name, strategy in strategies.items():
        started = time.perf_counter()
        outcome = replay(trace, Fleet(*shape), strategy, warm_up)
        elapsed = time.perf_counter() - started
        results[name] = outcome
        rack_scale = outcome.rack_scale_accepted / outcome.rack_scale_requests
        print(
            f"{name:<10} {rack_scale:>20.1%} {outcome.accepted / outcome.requests:>13.1%} "
            f"{statistics.fmean(outcome.whole_racks):>22.1f} {min(outcome.whole_racks):>5} {elapsed:>8.1f}"
        )

    median, p99, slowest = time_place_at_scale(args.seed, calls=300)
    print(
        f"place() on 10,000 nodes (10 pods x 125 racks x 8): median {median:.1f} ms, p99 {p99:.1f} ms, "
        f"max {slowest:.1f} ms"
    )

    best, first = results["best-fit"], results["first-fit"]
    beats = (
        best.rack_scale_accepted / best.rack_scale_requests > first.rack_scale_accepted / first.rack_scale_requests
        and statistics.fmean(best.whole_racks) > statistics.fmean(first.whole_racks)
    )
    print("best-fit beats first-fit" if beats else "FAIL: best-fit does not beat first-fit")
    sys.exit(0 if beats else 1)


if __name__ == "__main__":
    main()
