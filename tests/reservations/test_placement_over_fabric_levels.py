"""Placement over a fabric of levels, pure: the rules on the default 50-node fleet with its leaves,
then properties over generated fabrics of 2 to 4 levels.

The default fabric: pod > leaf > nvlink_domain; p1-leaf1 = r01 (node-001..008) + r02 (009..016),
p1-leaf2 = r03 + r04, p2-leaf1 = r05 + r06 (033..048), p2-leaf2 = r07 (node-049, node-050).
"""

import contextlib
import itertools
import random
from collections.abc import Iterable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.topology import NVLINK_DOMAIN, POD, default_layout
from reservations.placement import PlacementRefused, PlacementRequest, RackCapacity, give_back, place
from tests.support.examples import examples
from tests.support.placement_baselines import count_domains, first_fit, most_free_first, random_fit


def nodes(first: int, last: int) -> list[str]:
    return [f"node-{n:03d}" for n in range(first, last + 1)]


def fabric_fleet(
    busy: Iterable[str] = (), attributes: dict[str, dict[str, str]] | None = None, **layout
) -> list[RackCapacity]:
    busy = set(busy)
    racks: dict[tuple, list[str]] = {}
    for spec in default_layout(gpus_per_node=0, **layout):
        racks.setdefault((spec.pod, spec.rack, spec.fabric[1:-1]), []).append(spec.name)
    return [
        RackCapacity(
            pod, rack, tuple(names), tuple(n for n in names if n not in busy), path=path, attributes=attributes
        )
        for (pod, rack, path), names in racks.items()
    ]


def refusal(request: PlacementRequest, racks: list[RackCapacity]) -> str:
    with pytest.raises(PlacementRefused) as refused:
        place(request, racks)
    return refused.value.reason


# Fewest leaves, then best-fit


def test_a_reservation_stays_under_one_leaf_where_it_can():
    busy = nodes(1, 4) + nodes(17, 20)  # r01 and r03 have 4 free each, under two leaves
    flat = [RackCapacity(r.pod, r.rack, r.nodes, r.free) for r in fabric_fleet(busy)]
    assert place(PlacementRequest(8), flat) == nodes(5, 8) + nodes(21, 24)  # no whole rack broken, two leaves
    assert place(PlacementRequest(8), fabric_fleet(busy)) == nodes(9, 16)  # one leaf, r02 broken


def test_whole_leaves_stay_free_when_a_partly_used_leaf_holds_the_request():
    assert place(PlacementRequest(4), fabric_fleet(busy=nodes(17, 24))) == nodes(25, 28)  # in p1-leaf2


def test_fewest_spine_groups_after_fewest_leaves():
    # p1: sg1 = leaf1 (node-001..016) + leaf2, sg2 = leaf3 (node-033..048) + leaf4 (node-049..064)
    busy = nodes(1, 10) + nodes(33, 43)  # p1-leaf1 has 6 free, p1-leaf3 5, the others 16
    fleet = fabric_fleet(busy, node_count=128, spine_groups_per_pod=2)
    # Two leaves at least; of one spine group, not leaf2 and leaf4; sg2 fits more tightly than sg1.
    assert place(PlacementRequest(20, pod="p1"), fleet) == nodes(44, 63)


def test_a_required_leaf_keeps_the_reservation_under_one_leaf():
    assert place(PlacementRequest(16, required="leaf"), fabric_fleet(busy=["node-001"])) == nodes(17, 32)
    assert refusal(PlacementRequest(17, required="leaf"), fabric_fleet()) == (
        "no leaf has 17 free nodes; the most is p1-leaf1 with 16"
    )
    assert refusal(PlacementRequest(17, pod="p2", required="leaf"), fabric_fleet()) == (
        "no leaf in pod p2 has 17 free nodes; the most is p2-leaf1 with 16"
    )


def test_a_preferred_level_is_minimised_first():
    fleet = fabric_fleet(busy=nodes(1, 4) + nodes(9, 12))  # r01 and r02 have 4 free each
    assert place(PlacementRequest(8), fleet) == nodes(5, 8) + nodes(13, 16)  # no whole rack broken
    assert place(PlacementRequest(8, preferred="nvlink_domain"), fleet) == nodes(33, 40)  # one rack


# Whole domains


def test_whole_leaves_are_taken_whole():
    assert place(PlacementRequest(16, whole="leaf"), fabric_fleet()) == nodes(33, 48)
    assert place(PlacementRequest(16, whole="leaf"), fabric_fleet(busy=["node-048"])) == nodes(1, 16)
    assert refusal(PlacementRequest(24, whole="leaf"), fabric_fleet()) == (
        "whole leaf needs 24 nodes in whole leaf domains; no pod has free whole leaf domains adding up to "
        "exactly 24; the most is p1 with 2 free whole leaf domains of 16 nodes"
    )


def test_rack_scale_is_whole_nvlink_domains():
    for fleet in (fabric_fleet(), fabric_fleet(node_count=128, spine_groups_per_pod=2)):
        for count in (8, 10, 16, 24):
            with contextlib.suppress(PlacementRefused):
                assert place(PlacementRequest(count, rack_scale=True), fleet) == place(
                    PlacementRequest(count, whole=NVLINK_DOMAIN), fleet
                )
    assert place(PlacementRequest(10, rack_scale=True), fabric_fleet()) == nodes(33, 40) + nodes(49, 50)


def test_whole_racks_refusal_keeps_its_words_under_leaves():
    assert refusal(PlacementRequest(4, pod="p1", rack_scale=True), fabric_fleet()) == (
        "rack_scale needs 4 nodes in whole racks; pod p1 has 4 free whole racks of 8 nodes, "
        "which cannot add up to exactly 4"
    )


def test_whole_domains_wider_than_the_required_one_are_refused():
    assert refusal(PlacementRequest(16, required="leaf", whole=POD), fabric_fleet()) == (
        "whole pod domains cannot stay inside one leaf"
    )


# Levels, selectors and bad input


def test_an_unknown_level_is_refused_naming_the_fleet_s_levels():
    assert refusal(PlacementRequest(1, preferred="spine_group"), fabric_fleet()) == (
        "the fabric has no level spine_group; its levels are pod, leaf, nvlink_domain"
    )


def test_racks_naming_different_levels_are_a_value_error():
    fleet = fabric_fleet()
    with pytest.raises(ValueError, match="different fabric levels"):
        place(PlacementRequest(1), [*fleet[:-1], RackCapacity("p2", "r07", fleet[-1].nodes, fleet[-1].free)])


def test_only_nodes_with_the_requested_attributes_are_chosen():
    attributes = {n: {"nic": "cx7" if n in nodes(41, 50) else "cx6"} for n in nodes(1, 50)}
    fleet = fabric_fleet(attributes=attributes)
    assert place(PlacementRequest(3, attributes={"nic": "cx7"}), fleet) == nodes(41, 43)  # one leaf
    assert refusal(PlacementRequest(1, attributes={"nic": "cx9"}), fleet) == "no node has nic=cx9"
    assert refusal(PlacementRequest(11, attributes={"nic": "cx7"}), fleet) == (
        "no pod has 11 free nodes with nic=cx7; the most is p2 with 10"
    )


def test_a_growing_reservation_fills_its_own_racks_first():
    fleet = fabric_fleet(busy=nodes(1, 4) + nodes(33, 36))
    assert place(PlacementRequest(4, near=frozenset({"r05"})), fleet) == nodes(37, 40)


def test_giving_back_leaves_the_reservation_under_fewer_leaves():
    held = {"r01": nodes(1, 2), "r02": nodes(9, 10), "r03": nodes(17, 19)}
    paths = {r.rack: r.path for r in fabric_fleet()}
    assert give_back(held, 3, rack_scale=False) == [*nodes(1, 2), "node-010"]
    assert give_back(held, 3, rack_scale=False, paths=paths) == nodes(17, 19)


# Properties over generated fabrics of 2 to 4 levels

MODELS = ("H100", "B200")
SWITCH_LEVELS = ("spine_group", "leaf")


@st.composite
def fabrics(draw) -> list[RackCapacity]:
    """1-2 pods; 0-2 switch levels of 1-2 domains under each parent; 1-2 racks of 1-4 nodes under
    each deepest domain; each rack whole, busy or partly used; GPU models optional."""
    levels = SWITCH_LEVELS[2 - draw(st.integers(0, 2)) :]
    with_models = draw(st.booleans())
    racks: list[RackCapacity] = []

    def grow(pod: str, path: tuple, depth: int) -> None:
        if depth == len(levels):
            for _ in range(draw(st.integers(1, 2))):
                size, first = draw(st.integers(1, 4)), sum(len(r.nodes) for r in racks)
                names = tuple(f"n{first + i:03d}" for i in range(size))
                use = draw(st.sampled_from(["whole", "busy", "partly used"]))
                mask = draw(st.lists(st.booleans(), min_size=size, max_size=size))
                free = tuple(n for i, n in enumerate(names) if use == "whole" or (use == "partly used" and mask[i]))
                models = {n: draw(st.sampled_from(MODELS)) for n in names} if with_models else None
                racks.append(RackCapacity(pod, f"r{len(racks):02d}", names, free, models, path=path))
            return
        for d in range(draw(st.integers(1, 2))):
            parent = path[-1][1] if path else pod
            grow(pod, (*path, (levels[depth], f"{parent}.{d}")), depth + 1)

    for p in range(draw(st.integers(1, 2))):
        grow(f"p{p + 1}", (), 0)
    return racks


def levels_of(racks: list[RackCapacity]) -> tuple[str, ...]:
    return (POD, *(level for level, _ in racks[0].path), NVLINK_DOMAIN)


def domain(rack: RackCapacity, depth: int) -> tuple[str, ...]:
    return (rack.pod, *(name for _, name in rack.path), rack.rack)[: depth + 1]


@st.composite
def fabrics_and_requests(draw):
    racks = draw(fabrics())
    levels = levels_of(racks)
    request = PlacementRequest(
        node_count=draw(st.integers(1, 12)),
        pod=draw(st.sampled_from([None, None, "p1"])),
        required=draw(st.sampled_from([POD, POD, *levels])),
        preferred=draw(st.sampled_from([None, *levels])),
        whole=draw(st.sampled_from([None, None, *levels[1:]])),
        rack_scale=draw(st.booleans()),
        gpu_model=draw(st.sampled_from([None, None, *MODELS])),
    )
    return racks, request


def usable(rack: RackCapacity, request: PlacementRequest) -> list[str]:
    return [n for n in rack.free if request.gpu_model in (None, (rack.gpu_models or {}).get(n))]


def required_domains(racks: list[RackCapacity], request: PlacementRequest) -> dict[tuple, list[RackCapacity]]:
    depth = levels_of(racks).index(request.required)
    domains: dict[tuple, list[RackCapacity]] = {}
    for rack in racks:
        if request.pod in (None, rack.pod):
            domains.setdefault(domain(rack, depth), []).append(rack)
    return domains


def whole_units(racks: list[RackCapacity], request: PlacementRequest) -> list[list[RackCapacity]]:
    depth = levels_of(racks).index(request.whole_level)
    units: dict[tuple, list[RackCapacity]] = {}
    for rack in racks:
        units.setdefault(domain(rack, depth), []).append(rack)
    return [unit for unit in units.values() if all(len(usable(r, request)) == len(r.nodes) for r in unit)]


def choices(racks: list[RackCapacity], request: PlacementRequest) -> Iterable[list[RackCapacity]]:
    """By brute force, for whole requests: every set of whole units of one required domain adding up
    to exactly the count, as their racks; for others: every set of racks of one required domain whose
    usable nodes suffice (a superset of what a placement touches)."""
    for rs in required_domains(racks, request).values():
        if request.whole_level:
            units = whole_units(rs, request)
            for k in range(len(units) + 1):
                for combo in itertools.combinations(units, k):
                    if sum(len(r.nodes) for unit in combo for r in unit) == request.node_count:
                        yield [r for unit in combo for r in unit]
        else:
            for k in range(len(rs) + 1):
                for picked in itertools.combinations(rs, k):
                    if sum(len(usable(r, request)) for r in picked) >= request.node_count:
                        yield list(picked)


def assert_valid(request: PlacementRequest, racks: list[RackCapacity], chosen: list[str]) -> None:
    rack_of = {n: r for r in racks for n in r.nodes}
    levels = levels_of(racks)
    assert len(chosen) == request.node_count and len(set(chosen)) == len(chosen)
    assert all(n in usable(rack_of[n], request) for n in chosen), "a busy, unknown or other-model node"
    required = levels.index(request.required)
    assert len({domain(rack_of[n], required) for n in chosen}) == 1, "crosses the required level"
    assert request.pod in (None, rack_of[chosen[0]].pod)
    if request.whole_level:
        whole = levels.index(request.whole_level)
        for touched in {domain(rack_of[n], whole) for n in chosen}:
            members = [n for r in racks if domain(r, whole) == touched for n in r.nodes]
            assert set(members) <= set(chosen), "a whole-domain request split a domain"


def first_level_minimised(racks: list[RackCapacity], request: PlacementRequest) -> int | None:
    """The level the objective minimises first: the preferred one if below the required level (and
    not below a whole level), else the deepest switch level below the required one."""
    levels = levels_of(racks)
    required, rack = levels.index(request.required), len(levels) - 1
    deepest = levels.index(request.whole_level) if request.whole_level else rack
    if request.preferred and required < levels.index(request.preferred) <= deepest:
        return levels.index(request.preferred)
    return min(deepest, rack - 1) if required < min(deepest, rack - 1) else None


def fewest_spanned(racks: list[RackCapacity], request: PlacementRequest, depth: int) -> int | None:
    """By brute force: the fewest domains at `depth` any valid placement spans."""
    best = None
    for combo in choices(racks, request):
        if request.whole_level:
            spanned = len({domain(r, depth) for r in combo})
        else:
            by_domain: dict[tuple, int] = {}
            for r in combo:
                by_domain[domain(r, depth)] = by_domain.get(domain(r, depth), 0) + len(usable(r, request))
            sizes = sorted(by_domain.values(), reverse=True)
            spanned = next(k for k, total in enumerate(itertools.accumulate(sizes), 1) if total >= request.node_count)
        best = spanned if best is None else min(best, spanned)
    return best


@pytest.mark.parametrize(
    "strategy", [place, first_fit, most_free_first, random_fit(0)], ids=["best-fit", "first-fit", "most-free", "random"]
)
@settings(max_examples=examples(300), deadline=None)
@given(case=fabrics_and_requests())
def test_every_strategy_stays_in_the_required_domain_keeps_whole_domains_whole_and_refuses_only_what_cannot_fit(
    strategy, case
):
    racks, request = case
    try:
        chosen = strategy(request, racks)
    except PlacementRefused as refused:
        levels = levels_of(racks)
        wider = request.whole_level and levels.index(request.whole_level) < levels.index(request.required)
        assert wider or next(iter(choices(racks, request)), None) is None, refused.reason
    else:
        assert_valid(request, racks, chosen)


@settings(max_examples=examples(300), deadline=None)
@given(case=fabrics_and_requests())
def test_the_preferred_level_or_else_the_deepest_switch_level_spans_the_fewest_domains_possible(case):
    racks, request = case
    depth = first_level_minimised(racks, request)
    try:
        chosen = place(request, racks)
    except PlacementRefused:
        return
    if depth is None:
        return
    spanned = len({domain(r, depth) for r in racks if set(r.nodes) & set(chosen)})
    assert spanned == fewest_spanned(racks, request, depth)


@settings(max_examples=examples(200), deadline=None)
@given(case=fabrics_and_requests(), seed=st.integers(0, 2**32))
def test_fabric_placement_is_deterministic_and_ignores_the_order_of_its_input(case, seed):
    racks, request = case
    outcomes: list[list[str] | str] = []
    for rs in (racks, random.Random(seed).sample(racks, len(racks))):
        try:
            outcomes.append(place(request, rs))
        except PlacementRefused as refused:
            outcomes.append(refused.reason)
    assert outcomes[0] == outcomes[1]


def whole_free_from(racks: list[RackCapacity], depth: int) -> tuple[int, ...]:
    """Whole free domains at each level from `depth` down to the racks, top down."""
    levels = levels_of(racks)
    return tuple(count_domains(racks, levels[d])[0] if d else 0 for d in range(depth, len(levels)))


def take(racks: list[RackCapacity], chosen: Iterable[str]) -> list[RackCapacity]:
    chosen = set(chosen)
    return [replace(r, free=tuple(n for n in r.free if n not in chosen)) for r in racks]


def release(racks: list[RackCapacity], freed: Iterable[str]) -> list[RackCapacity]:
    freed = set(freed) | {n for r in racks for n in r.free}
    return [replace(r, free=tuple(n for n in r.nodes if n in freed)) for r in racks]


@settings(max_examples=examples(200), deadline=None)
@given(
    racks=fabrics(),
    trace=st.lists(st.tuples(st.integers(1, 8), st.booleans(), st.integers(0, 100)), max_size=12),
)
def test_over_reserves_and_releases_best_fit_keeps_as_many_whole_domains_free_as_first_fit(racks, trace):
    """Inside one domain of the deepest switch level (the pod when there is none), at every step of a
    random trace driven by best-fit, best-fit leaves at least as many whole domains free as
    first-fit would from the same state, compared level by level from the required one down.
    (Wider, the fewest leaves come first and may break a whole domain first-fit keeps.)"""
    levels = levels_of(racks)
    required = max(0, len(levels) - 2)
    held: list[list[str]] = []
    for count, leaving, which in trace:
        if leaving and held:
            racks = release(racks, held.pop(which % len(held)))
            continue
        request = PlacementRequest(count, required=levels[required])
        try:
            best = place(request, racks)
        except PlacementRefused:
            with pytest.raises(PlacementRefused):
                first_fit(request, racks)
            continue
        first = first_fit(request, racks)
        assert whole_free_from(take(racks, best), required) >= whole_free_from(take(racks, first), required)
        racks = take(racks, best)
        held.append(best)
