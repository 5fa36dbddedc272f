"""Which sizes add up to a count: whole racks, whole units and rooms, each as few or as early
as can be.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from reservations.placement.request import Rack


def fewest_whole_racks(racks: list[Rack], count: int) -> list[Rack] | None:
    """Whole usable racks whose sizes add up to exactly `count`, as few as possible; None if none do.

    Racks of one size are interchangeable, so this solves for how many of each size to take
    and then takes them by name.
    """
    by_size: dict[int, list[Rack]] = defaultdict(list)
    # Of racks of one size, those with the most recently tested nodes are taken first.
    for rack in sorted(racks, key=lambda r: (-r.tested, r.name)):
        if rack.whole_usable:
            by_size[rack.size].append(rack)
    plan = fewest_by_size({size: len(rs) for size, rs in by_size.items()}, count)
    if plan is None:
        return None
    return sorted((rack for size, how_many in plan for rack in by_size[size][:how_many]), key=lambda r: r.name)


def fewest_by_size(available: Mapping[int, int], count: int) -> list[tuple[int, int]] | None:
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


def fewest_adding_up(rooms: list[int], count: int) -> int | None:
    """How many of `rooms` (largest first) it takes to add up to `count` (none for a count of 0 or
    less); None if all do not."""
    held = 0
    for taken, room in enumerate(rooms):
        if held >= count:
            return taken
        held += room
    return len(rooms) if held >= count else None
