"""Which nodes a shrinking reservation gives back."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from fleet.fabric import Path
from reservations.placement.request import PlacementRefused, Rack
from reservations.placement.sums import fewest_whole_racks


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

    def smallest_first(item: tuple[str, Sequence[str]]) -> tuple[int | str, ...]:
        rack, nodes = item
        path = paths.get(rack, ())
        return (*(held_under[path[:depth]] for depth in range(1, len(path) + 1)), len(nodes), rack)

    racks = sorted(held.items(), key=smallest_first)
    if rack_scale:
        as_racks = [Rack("", name, tuple(nodes), tuple(nodes), True, True) for name, nodes in racks]
        whole_racks = fewest_whole_racks(as_racks, count)
        if whole_racks is None:
            sizes = ", ".join(str(len(nodes)) for _, nodes in racks)
            raise PlacementRefused(f"a rack-scale reservation gives back whole racks; it holds racks of {sizes} nodes")
        return [node for rack in whole_racks for node in rack.nodes]
    chosen: list[str] = []
    rest: list[Sequence[str]] = []
    for _, nodes in racks:
        if len(nodes) <= count - len(chosen):
            chosen += nodes
        else:
            rest.append(nodes)
    if len(chosen) < count:
        chosen += rest[0][len(rest[0]) - (count - len(chosen)) :]
    return chosen
