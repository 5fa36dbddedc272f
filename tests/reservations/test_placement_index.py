"""Placement over the free-capacity index, pure: the same nodes (or the same refusal) as the walk of
every rack it replaced (tests/support/placement_reference.py), and an index kept by deltas equal to one
built from scratch.

The fabrics are generated with few shapes (racks of 2 or 4 nodes, few free patterns, up to four
domains under a parent) so that interchangeable domains are common: those are what the index
groups by signature and reads only as many of as a request can use.
"""

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.topology import NVLINK_DOMAIN, POD
from reservations.free_capacity import FreeCapacity, RackState
from reservations.placement import PlacementRefused, PlacementRequest, RackCapacity, place, place_in
from tests.support import placement_reference as reference
from tests.support.examples import examples

SWITCH_LEVELS = ("spine_group", "leaf")
MODELS = ("H100", "B200")


@st.composite
def fabrics(draw) -> list[RackCapacity]:
    """1-6 pods, so that placement has pods to leave unread by their bounds; 0-2 switch levels of
    1-6 domains under each parent; 1-3 racks of 2 or 4 nodes under each deepest domain, each
    wholly free, busy, or free in one of a few patterns; some nodes recently tested; GPU models
    on some fleets."""
    levels = SWITCH_LEVELS[2 - draw(st.integers(0, 2)) :]
    with_models = draw(st.integers(0, 4)) == 0
    racks: list[RackCapacity] = []
    patterns = {2: [(0, 1), (1,), ()], 4: [(0, 1, 2, 3), (0,), (0, 1), (2, 3), (0, 1, 2), ()]}

    def grow(pod: str, path: tuple, depth: int) -> None:
        if depth == len(levels):
            for _ in range(draw(st.integers(1, 3))):
                size, first = draw(st.sampled_from([2, 4])), sum(len(r.nodes) for r in racks)
                names = tuple(f"n{first + i:03d}" for i in range(size))
                free = tuple(names[i] for i in draw(st.sampled_from(patterns[size])))
                tested = frozenset(n for n in names if draw(st.integers(0, 9)) == 0)
                models = {n: draw(st.sampled_from(MODELS)) for n in names} if with_models else None
                racks.append(RackCapacity(pod, f"r{len(racks):03d}", names, free, models, tested, path=path))
            return
        for d in range(draw(st.integers(1, 6))):
            parent = path[-1][1] if path else pod
            grow(pod, (*path, (levels[depth], f"{parent}.{d}")), depth + 1)

    for p in range(draw(st.integers(1, 6))):
        grow(f"p{p + 1}", (), 0)
    return racks


def levels_of(racks: list[RackCapacity]) -> tuple[str, ...]:
    return (POD, *(level for level, _ in racks[0].path), NVLINK_DOMAIN)


@st.composite
def fabrics_and_requests(draw):
    racks = draw(fabrics())
    levels = levels_of(racks)
    domains = sorted({name for r in racks for name in r.domains})
    request = PlacementRequest(
        node_count=draw(st.integers(1, 32)),
        pod=draw(st.sampled_from([None, None, None, "p1", "p2"])),
        required=draw(st.sampled_from([POD, POD, *levels])),
        preferred=draw(st.sampled_from([None, None, *levels])),
        whole=draw(st.sampled_from([None, None, None, *levels[1:]])),
        rack_scale=draw(st.integers(0, 4)) == 0,
        gpu_model=draw(st.sampled_from([None, None, None, None, *MODELS])),
        near=frozenset(draw(st.lists(st.sampled_from([r.rack for r in racks]), max_size=2))),
        within=draw(st.sampled_from([None, None, None, *domains, "nowhere"])),
    )
    return racks, request


def outcome(strategy, *args) -> list[str] | str:
    try:
        return strategy(*args)
    except PlacementRefused as refused:
        return refused.reason


def index_of(racks: list[RackCapacity]) -> FreeCapacity:
    """The service's index of these racks: built with every node free, then brought to their free
    sets by a delta, as the service does."""
    capacity = FreeCapacity(
        RackState(r.pod, r.rack, r.path, r.nodes, frozenset(r.nodes), gpu_models=r.gpu_models) for r in racks
    )
    capacity.apply(
        taken=[n for r in racks for n in r.nodes if n not in r.free],
        tested=[n for r in racks for n in r.recently_tested],
    )
    return capacity


@pytest.mark.fuzzing
@settings(max_examples=examples(1500), deadline=None)
@given(case=fabrics_and_requests())
def test_placement_over_the_index_chooses_what_the_walk_of_every_rack_chose(case):
    racks, request = case
    expected = outcome(reference.place, request, racks)
    assert outcome(place, request, racks) == expected
    assert outcome(place_in, request, index_of(racks)) == expected


@pytest.mark.fuzzing
@settings(max_examples=examples(300), deadline=None)
@given(case=fabrics_and_requests(), seed=st.integers(0, 2**32))
def test_placement_over_the_index_ignores_the_order_of_its_input(case, seed):
    racks, request = case
    shuffled = random.Random(seed).sample(racks, len(racks))
    assert outcome(place_in, request, index_of(shuffled)) == outcome(place_in, request, index_of(racks))


def described(capacity: FreeCapacity) -> dict:
    """Everything the index keeps, by domain name, with signatures spelled out in full (their ids
    depend on the order they were made in)."""

    def spelled(domain: int):
        key = capacity.signatures.keys[capacity.signature[domain]]
        return key if domain in capacity.nodes else tuple(spelled(c) for c in capacity.children[domain])

    def groups(grouped: dict[int, list[int]]) -> dict:
        return {spelled(members[0]): [capacity.names[m] for m in members] for members in grouped.values()}

    summary: dict[tuple[int, str] | str, object] = {}
    for domain, name in enumerate(capacity.names):
        summary[(capacity.depth[domain], name)] = (
            capacity.size[domain],
            capacity.usable[domain],
            capacity.tested[domain],
            capacity.whole(domain),
            capacity.whole_usable(domain),
            [dict(units) for units in capacity.units[domain]],
            spelled(domain) if capacity.depth[domain] else None,
            groups(capacity.groups[domain]),
            sorted(capacity.usable_nodes.get(domain, ())),
        )
    summary["levels"] = [groups(grouped) for grouped in capacity.level_groups]
    held = Counter(capacity.signature[d] for d in range(len(capacity.names)) if capacity.depth[d])
    assert held == capacity.signatures.holders, "a signature counted for domains that do not hold it"
    assert set(capacity.signatures.keys) == set(held)
    return summary


@pytest.mark.fuzzing
@settings(max_examples=examples(300), deadline=None)
@given(
    racks=fabrics(),
    deltas=st.lists(
        st.tuples(st.sampled_from(["freed", "taken", "tested", "untested"]), st.lists(st.integers(0, 200))),
        max_size=8,
    ),
)
def test_an_index_kept_by_deltas_equals_one_built_from_scratch(racks, deltas):
    capacity = index_of(racks)
    every_node = [n for r in racks for n in r.nodes]
    free = {n for r in racks for n in r.free}
    tested = {n for r in racks for n in r.recently_tested}
    for change, picks in deltas:
        names = [every_node[i % len(every_node)] for i in picks] + ["unknown-node"]
        capacity.apply(**{change: names})
        {"freed": free.update, "taken": free.difference_update, "tested": tested.update}.get(
            change, tested.difference_update
        )(names)
    now = [
        RackCapacity(
            r.pod,
            r.rack,
            r.nodes,
            tuple(n for n in r.nodes if n in free),
            recently_tested=frozenset(tested & set(r.nodes)),
            path=r.path,
        )
        for r in racks
    ]
    assert described(capacity) == described(index_of(now))
