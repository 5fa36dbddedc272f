"""Why placement refuses, in words a tenant can act on."""

from __future__ import annotations

from collections import Counter

from core.topology import NVLINK_DOMAIN, POD
from reservations.free_capacity import FreeCapacity
from reservations.placement.request import PlacementRequest


def refusal(
    request: PlacementRequest, capacity: FreeCapacity, level: str, domains: list[int], whole: int | None = None
) -> str:
    """Why no domain of `level` among `domains` (ids, in name order) can hold the request; `whole`
    is the depth of the whole domains it asks for, if any."""
    names = capacity.names
    if whole is None:
        return shortage_refusal(request, level, [(names[d], capacity.usable[d]) for d in domains])
    units = [(names[d], [s for s, n in capacity.units[d][whole].items() for _ in range(n)]) for d in domains]
    return whole_refusal(request, level, units)


def selectors_of(request: PlacementRequest) -> str:
    """'GPU model B200 and nic=cx7': what every chosen node must have; '' for any node."""
    wanted = [f"GPU model {request.gpu_model}"] if request.gpu_model else []
    return " and ".join(wanted + [f"{key}={value}" for key, value in sorted(request.attributes.items())])


def shortage_refusal(request: PlacementRequest, level: str, usable: list[tuple[str, int]]) -> str:
    """Not enough usable nodes in any domain of `level`; `usable` is each domain's count, by name."""
    selectors = selectors_of(request)
    nodes = f"free nodes with {selectors}" if selectors else "free nodes"
    if level == POD and request.pod is not None:
        have = dict(usable).get(request.pod, 0)
        return f"pod {request.pod} has {have} {nodes}, fewer than the {request.node_count} requested"
    scope = f" in pod {request.pod}" if request.pod is not None else ""
    roomiest, most = max(usable, key=lambda item: item[1])
    return f"no {level}{scope} has {request.node_count} {nodes}; the most is {roomiest} with {most}"


def whole_refusal(request: PlacementRequest, level: str, sizes: list[tuple[str, list[int]]]) -> str:
    """No domain of `level` has whole units adding up to the count; `sizes` lists each domain's
    whole usable units by size, by name."""
    count, whole = request.node_count, request.whole_level or NVLINK_DOMAIN
    unit = "rack" if whole == NVLINK_DOMAIN else f"{whole} domain"
    selectors = selectors_of(request)
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
