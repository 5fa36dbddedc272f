"""Placement, pure: the rules on the default 50-node fleet, then properties over generated fleets.

The default fleet: p1 holds r01-r04 (node-001..node-032), p2 holds r05, r06 (node-033..node-048)
and r07 with two nodes (node-049, node-050).
"""

import contextlib
import itertools
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from core.topology import default_layout
from reservations.placement import PlacementRefused, PlacementRequest, RackCapacity, place
from tests.support.examples import examples
from tests.support.placement_baselines import count_whole_free_racks, first_fit, random_fit


def nodes(first: int, last: int) -> list[str]:
    return [f"node-{n:03d}" for n in range(first, last + 1)]


def default_fleet(
    busy: Iterable[str] = (), gpu_models: dict[str, str] | None = None, tested: Iterable[str] = ()
) -> list[RackCapacity]:
    busy = set(busy)
    racks: dict[tuple[str, str], list[str]] = {}
    for spec in default_layout():
        racks.setdefault((spec.pod, spec.rack), []).append(spec.name)
    return [
        RackCapacity(
            pod=pod,
            rack=rack,
            nodes=tuple(names),
            free=tuple(n for n in names if n not in busy),
            gpu_models=gpu_models,
            recently_tested=frozenset(tested) & set(names),
        )
        for (pod, rack), names in racks.items()
    ]


def refusal(request: PlacementRequest, racks: list[RackCapacity]) -> str:
    with pytest.raises(PlacementRefused) as refused:
        place(request, racks)
    assert str(refused.value) == refused.value.reason
    return refused.value.reason


def take(racks: list[RackCapacity], chosen: Iterable[str]) -> list[RackCapacity]:
    chosen = set(chosen)
    return [
        RackCapacity(r.pod, r.rack, r.nodes, tuple(n for n in r.free if n not in chosen), r.gpu_models) for r in racks
    ]


def release(racks: list[RackCapacity], freed: Iterable[str]) -> list[RackCapacity]:
    freed = set(freed)
    return [
        RackCapacity(r.pod, r.rack, r.nodes, tuple(n for n in r.nodes if n in freed or n in r.free), r.gpu_models)
        for r in racks
    ]


# Best-fit inside a pod


def test_a_partly_used_rack_is_used_before_any_whole_rack():
    assert place(PlacementRequest(4), default_fleet(busy=nodes(1, 3))) == nodes(4, 7)


def test_the_partly_used_rack_with_the_fewest_free_nodes_that_still_fits_is_chosen():
    fleet = default_fleet(busy=nodes(1, 3) + nodes(9, 13))  # r01 has 5 free, r02 has 3
    assert place(PlacementRequest(3), fleet) == nodes(14, 16)
    assert place(PlacementRequest(4), fleet) == nodes(4, 7)


def test_when_no_partly_used_rack_fits_the_fullest_is_filled_and_placement_goes_on():
    fleet = default_fleet(busy=nodes(1, 3) + nodes(9, 13) + nodes(17, 22))  # 5, 3 and 2 free in p1
    assert place(PlacementRequest(7, pod="p1"), fleet) == nodes(4, 8) + nodes(23, 24)


def test_whole_racks_are_broken_only_after_partly_used_racks_are_exhausted():
    fleet = default_fleet(busy=nodes(1, 6))  # r01 has 2 free
    assert place(PlacementRequest(5, pod="p1"), fleet) == nodes(7, 8) + nodes(9, 11)


def test_the_smallest_whole_rack_that_fits_is_broken():
    assert place(PlacementRequest(2, pod="p2"), default_fleet()) == nodes(49, 50)
    assert place(PlacementRequest(3, pod="p2"), default_fleet()) == nodes(33, 35)


def test_without_a_whole_rack_that_fits_the_largest_is_taken_and_placement_goes_on():
    assert place(PlacementRequest(9, pod="p2"), default_fleet()) == [*nodes(33, 40), "node-049"]


def test_nodes_are_taken_in_slot_order_not_name_order():
    rack = RackCapacity(pod="p1", rack="r01", nodes=("c", "a", "b"), free=("a", "b", "c"))
    assert place(PlacementRequest(2), [rack]) == ["c", "a"]


# Choosing the pod


def test_a_reservation_never_spans_pods():
    fleet = default_fleet(busy=nodes(1, 28) + nodes(33, 46))  # p1 has 4 free, p2 has 4
    assert refusal(PlacementRequest(6), fleet) == "no pod has 6 free nodes; the most is p1 with 4"


def test_any_pod_means_the_pod_that_fits_most_tightly():
    assert place(PlacementRequest(18), default_fleet()) == nodes(33, 50)  # p2 holds exactly 18


def test_a_pod_that_breaks_no_whole_rack_wins_over_a_tighter_one_that_must():
    fleet = default_fleet(busy=nodes(1, 12))  # p1: 20 free, r02 partly used; p2: 18 free, all whole racks
    assert place(PlacementRequest(2), fleet) == nodes(13, 14)


def test_equally_good_pods_are_chosen_by_name():
    racks = [RackCapacity(pod, "r1", (f"{pod}-a", f"{pod}-b"), (f"{pod}-a", f"{pod}-b")) for pod in ("p2", "p1")]
    assert place(PlacementRequest(1), racks) == ["p1-a"]


def test_a_given_pod_is_the_only_one_used():
    assert place(PlacementRequest(4, pod="p1"), default_fleet()) == nodes(1, 4)


# Rack-scale


def test_rack_scale_takes_whole_racks_only():
    assert place(PlacementRequest(8, pod="p1", rack_scale=True), default_fleet(busy=["node-001"])) == nodes(9, 16)


def test_rack_scale_adds_racks_of_different_sizes():
    assert place(PlacementRequest(10, rack_scale=True), default_fleet()) == nodes(33, 40) + nodes(49, 50)
    assert place(PlacementRequest(18, rack_scale=True), default_fleet()) == nodes(33, 50)


def test_rack_scale_prefers_the_fewest_racks():
    racks = [
        RackCapacity("p1", f"r{i}", tuple(f"{i}-{s}" for s in range(size)), tuple(f"{i}-{s}" for s in range(size)))
        for i, size in enumerate((2, 2, 2, 2, 8))
    ]
    assert place(PlacementRequest(8, rack_scale=True), racks) == [f"4-{s}" for s in range(8)]


def test_rack_scale_in_any_pod_leaves_the_bigger_pod_its_whole_racks():
    assert place(PlacementRequest(16, rack_scale=True), default_fleet()) == nodes(33, 48)


def test_rack_scale_refuses_when_the_pod_lacks_whole_racks():
    fleet = default_fleet(busy=["node-033"])
    assert refusal(PlacementRequest(16, pod="p2", rack_scale=True), fleet) == (
        "rack_scale needs 16 nodes in whole racks; pod p2 has 1 free whole rack of 8 nodes and 1 of 2 nodes"
    )


def test_rack_scale_refuses_a_count_no_whole_racks_add_up_to():
    assert refusal(PlacementRequest(4, pod="p1", rack_scale=True), default_fleet()) == (
        "rack_scale needs 4 nodes in whole racks; pod p1 has 4 free whole racks of 8 nodes, "
        "which cannot add up to exactly 4"
    )
    assert refusal(PlacementRequest(33, rack_scale=True), default_fleet()) == (
        "rack_scale needs 33 nodes in whole racks; no pod has free whole racks adding up to exactly 33; "
        "the most is p1 with 4 free whole racks of 8 nodes"
    )


def test_rack_scale_refuses_when_no_rack_is_whole():
    fleet = default_fleet(busy=[*nodes(1, 50)[::8], "node-050"])
    assert refusal(PlacementRequest(8, rack_scale=True), fleet) == (
        "rack_scale needs 8 nodes in whole racks; no pod has a free whole rack"
    )


# GPU models


def b200_in_r02() -> dict[str, str]:
    return {n: "B200" if n in nodes(9, 16) else "H100" for n in nodes(1, 50)}


def test_only_nodes_of_the_requested_gpu_model_are_chosen():
    fleet = default_fleet(gpu_models=b200_in_r02())
    assert place(PlacementRequest(3, gpu_model="B200"), fleet) == nodes(9, 11)
    assert place(PlacementRequest(8, gpu_model="B200", rack_scale=True), fleet) == nodes(9, 16)


def test_an_absent_gpu_model_is_refused_by_name():
    fleet = default_fleet(gpu_models=b200_in_r02())
    assert refusal(PlacementRequest(1, gpu_model="A100"), fleet) == "no node has GPU model A100"
    assert refusal(PlacementRequest(1, pod="p2", gpu_model="B200"), fleet) == "no node in pod p2 has GPU model B200"
    assert refusal(PlacementRequest(9, gpu_model="B200"), fleet) == (
        "no pod has 9 free nodes with GPU model B200; the most is p1 with 8"
    )


# A recent diagnostics pass breaks ties, and only ties


def test_within_a_rack_recently_tested_nodes_are_taken_first():
    fleet = default_fleet(busy=nodes(1, 3), tested=["node-006", "node-008"])  # r01 has node-004..008 free
    assert place(PlacementRequest(2), fleet) == ["node-006", "node-008"]
    assert place(PlacementRequest(3), fleet) == ["node-006", "node-008", "node-004"]


def test_of_racks_that_fit_equally_the_one_with_more_recently_tested_nodes_is_chosen():
    busy = nodes(1, 5) + nodes(9, 13)  # r01 and r02 have 3 free each
    assert place(PlacementRequest(2), default_fleet(busy=busy)) == nodes(6, 7)  # the first by name
    assert place(PlacementRequest(2), default_fleet(busy=busy, tested=["node-015"])) == ["node-015", "node-014"]


def test_a_recent_pass_never_breaks_a_whole_rack_nor_moves_to_another_pod():
    fleet = default_fleet(busy=nodes(1, 3), tested=nodes(9, 16) + nodes(33, 50))  # all but r01, r03, r04
    assert place(PlacementRequest(2), fleet) == nodes(4, 5)


def test_of_whole_racks_of_one_size_the_one_with_more_recently_tested_nodes_is_taken():
    assert place(PlacementRequest(8, pod="p1", rack_scale=True), default_fleet()) == nodes(1, 8)
    fleet = default_fleet(tested=["node-020"])  # in r03
    assert place(PlacementRequest(8, pod="p1", rack_scale=True), fleet) == nodes(17, 24)


# Other refusals and bad input


def test_the_brief_s_shortage_is_refused_with_the_largest_pod_named():
    fleet = default_fleet(busy=nodes(1, 10))
    assert refusal(PlacementRequest(40), fleet) == "no pod has 40 free nodes; the most is p1 with 22"


def test_a_given_pod_that_is_too_small_is_refused_with_its_free_count():
    assert refusal(PlacementRequest(20, pod="p2"), default_fleet()) == (
        "pod p2 has 18 free nodes, fewer than the 20 requested"
    )


def test_an_unknown_pod_is_refused_by_name():
    assert refusal(PlacementRequest(1, pod="p3"), default_fleet()) == "pod p3 does not exist"


def test_an_empty_fleet_is_refused():
    assert refusal(PlacementRequest(1), []) == "no rack is known to placement"


@pytest.mark.parametrize("count", [0, -1])
def test_a_count_below_one_is_a_value_error_not_a_refusal(count):
    with pytest.raises(ValueError, match="at least 1"):
        place(PlacementRequest(count), default_fleet())


@pytest.mark.parametrize(
    "racks",
    [
        [RackCapacity("p1", "r1", ("a",), ("a", "z"))],
        [RackCapacity("p1", "r1", ("a",), ("a",)), RackCapacity("p1", "r2", ("a",), ("a",))],
        [RackCapacity("p1", "r1", ("a",), ("a",)), RackCapacity("p1", "r1", ("b",), ("b",))],
    ],
    ids=["free-node-not-in-rack", "node-in-two-racks", "rack-listed-twice"],
)
def test_inconsistent_capacity_is_a_value_error(racks):
    with pytest.raises(ValueError):
        place(PlacementRequest(1), racks)


def test_whole_free_racks_are_counted_per_fleet_and_per_pod():
    fleet = default_fleet(busy=["node-001", "node-050"])
    assert count_whole_free_racks(fleet) == 5
    assert count_whole_free_racks(fleet, pod="p2") == 2


def test_random_fit_repeats_itself_for_a_seed():
    requests = [PlacementRequest(n) for n in (3, 5, 1)] + [PlacementRequest(8, rack_scale=True)]
    assert [random_fit(7)(r, default_fleet()) for r in requests] == [
        random_fit(7)(r, default_fleet()) for r in requests
    ]


# The claim about sequences is false in general; these are its counterexamples.


def whole_racks_after(strategy, requests: list[PlacementRequest], racks: list[RackCapacity]) -> list[int]:
    history = []
    for request in requests:
        racks = take(racks, strategy(request, racks))
        history.append(count_whole_free_racks(racks))
    return history


def test_best_fit_can_end_behind_first_fit_once_reservations_depart():
    """Best-fit splits the 4-node request over the hole in r2 and over r1; when the 6-node
    reservation in r2 leaves, r2 still holds two of its nodes, while first-fit's r2 is whole."""
    racks = [
        RackCapacity("p1", rack, tuple(names), tuple(names))
        for rack, names in (("r1", nodes(1, 8)), ("r2", nodes(9, 16)))
    ]
    whole = {}
    for strategy in (place, first_fit):
        fleet = racks
        eight = strategy(PlacementRequest(8), fleet)
        fleet = take(fleet, eight)
        six = strategy(PlacementRequest(6), fleet)
        fleet = release(take(fleet, six), eight)
        fleet = release(take(fleet, strategy(PlacementRequest(4), fleet)), six)
        whole[strategy] = count_whole_free_racks(fleet)
    assert (whole[place], whole[first_fit]) == (0, 1)


def test_best_fit_can_end_behind_first_fit_on_arrivals_alone_with_racks_of_different_sizes():
    """Two nodes fit r07 exactly, so best-fit spends a whole (small) rack on them; three more
    then break r05, where first-fit had left a hole in r05 for them."""
    requests = [PlacementRequest(2, pod="p2"), PlacementRequest(3, pod="p2")]
    assert whole_racks_after(place, requests, default_fleet()) == [6, 5]
    assert whole_racks_after(first_fit, requests, default_fleet()) == [6, 6]


def test_best_fit_can_end_behind_first_fit_on_arrivals_alone_across_pods():
    """The tightest pod takes one node, so its hole is in the small pod; nine nodes then need
    both racks of the big pod, where first-fit had left a hole of seven."""
    racks = [
        RackCapacity(pod, rack, tuple(names), tuple(names))
        for pod, rack, names in (("p1", "r1", nodes(1, 8)), ("p1", "r2", nodes(9, 16)), ("p2", "r3", nodes(17, 24)))
    ]
    requests = [PlacementRequest(1), PlacementRequest(9)]
    assert whole_racks_after(place, requests, racks) == [2, 0]
    assert whole_racks_after(first_fit, requests, racks) == [2, 1]


# Properties over generated fleets

MODELS = ("H100", "B200")


@st.composite
def fleets(draw, max_pods: int = 3, max_racks: int = 4) -> list[RackCapacity]:
    """Pods of racks of 1-8 nodes; each rack whole, busy or partly used; GPU models optional."""
    with_models = draw(st.booleans())
    racks, number = [], 0
    for p in range(draw(st.integers(1, max_pods))):
        for r in range(draw(st.integers(1, max_racks))):
            size = draw(st.integers(1, 8))
            names = tuple(f"n{number + i:03d}" for i in range(size))
            number += size
            use = draw(st.sampled_from(["whole", "busy", "partly used"]))
            mask = draw(st.lists(st.booleans(), min_size=size, max_size=size)) if use == "partly used" else None
            free = tuple(n for i, n in enumerate(names) if use == "whole" or (mask and mask[i]))
            models = {n: draw(st.sampled_from(MODELS)) for n in names} if with_models else None
            tested = frozenset(draw(st.sets(st.sampled_from(names))))
            racks.append(RackCapacity(f"p{p + 1}", f"r{p + 1}{r + 1:02d}", names, free, models, tested))
    return racks


def requests(racks: list[RackCapacity]) -> st.SearchStrategy[PlacementRequest]:
    pods = sorted({r.pod for r in racks})
    return st.builds(
        PlacementRequest,
        node_count=st.integers(1, 20),
        pod=st.one_of(st.none(), st.sampled_from([*pods, "p9"])),
        rack_scale=st.booleans(),
        gpu_model=st.one_of(st.none(), st.sampled_from([*MODELS, "A100"])),
    )


@st.composite
def fleets_and_requests(draw):
    racks = draw(fleets())
    return racks, draw(requests(racks))


def usable(rack: RackCapacity, request: PlacementRequest) -> list[str]:
    models = rack.gpu_models or {}
    return [n for n in rack.free if request.gpu_model in (None, models.get(n))]


def in_scope(racks: list[RackCapacity], request: PlacementRequest) -> dict[str, list[RackCapacity]]:
    pods: dict[str, list[RackCapacity]] = {}
    for rack in racks:
        if request.pod in (None, rack.pod):
            pods.setdefault(rack.pod, []).append(rack)
    return pods


def whole_for(rack: RackCapacity, request: PlacementRequest) -> bool:
    return len(usable(rack, request)) == len(rack.nodes)


def fewest_racks_possible(racks: list[RackCapacity], request: PlacementRequest) -> int | None:
    """By brute force: the fewest whole racks of one pod adding up to exactly node_count."""
    counts = [
        len(combo)
        for pod_racks in in_scope(racks, request).values()
        for k in range(len(pod_racks) + 1)
        for combo in itertools.combinations([r for r in pod_racks if whole_for(r, request)], k)
        if sum(len(r.nodes) for r in combo) == request.node_count
    ]
    return min(counts, default=None)


def fewest_whole_racks_broken_possible(racks: list[RackCapacity], request: PlacementRequest) -> int | None:
    """Per pod: nodes from partly used racks cost nothing; the rest needs the fewest whole racks,
    which are the largest ones."""
    costs: list[int] = []
    for pod_racks in in_scope(racks, request).values():
        whole = sorted((len(usable(r, request)) for r in pod_racks if len(r.free) == len(r.nodes)), reverse=True)
        rest = request.node_count - sum(len(usable(r, request)) for r in pod_racks if len(r.free) < len(r.nodes))
        reach = list(itertools.accumulate(whole, initial=0))
        costs.extend(k for k, total in enumerate(reach) if total >= rest)
    return min(costs, default=None)


def assert_valid(request: PlacementRequest, racks: list[RackCapacity], chosen: list[str]) -> None:
    rack_of = {n: r for r in racks for n in r.nodes}
    assert len(chosen) == request.node_count
    assert len(set(chosen)) == len(chosen), "a node picked twice"
    assert all(n in rack_of and n in rack_of[n].free for n in chosen), "a busy or unknown node"
    assert len({rack_of[n].pod for n in chosen}) == 1, "split across pods"
    assert request.pod in (None, rack_of[chosen[0]].pod)
    if request.gpu_model:
        assert all((rack_of[n].gpu_models or {}).get(n) == request.gpu_model for n in chosen)
    if request.rack_scale:
        assert all(set(rack_of[n].nodes) <= set(chosen) for n in chosen), "part of a rack in rack_scale"


def feasible(racks: list[RackCapacity], request: PlacementRequest) -> bool:
    if request.rack_scale:
        return fewest_racks_possible(racks, request) is not None
    return any(
        sum(len(usable(r, request)) for r in rs) >= request.node_count for rs in in_scope(racks, request).values()
    )


@pytest.mark.parametrize("strategy", [place, first_fit, random_fit(0)], ids=["best-fit", "first-fit", "random"])
@settings(max_examples=examples(200), deadline=None)
@given(case=fleets_and_requests())
def test_every_strategy_places_validly_and_refuses_only_when_nothing_fits(strategy, case):
    racks, request = case
    try:
        chosen = strategy(request, racks)
    except PlacementRefused as refused:
        assert not feasible(racks, request), refused.reason
        assert refused.reason
    else:
        assert_valid(request, racks, chosen)


@settings(max_examples=examples(200), deadline=None)
@given(case=fleets_and_requests(), seed=st.integers(0, 2**32))
def test_placement_is_deterministic_and_ignores_the_order_of_its_input(case, seed):
    racks, request = case
    shuffled = random.Random(seed).sample(racks, len(racks))
    expected: list[str] | str
    try:
        expected = place(request, racks)
    except PlacementRefused as refused:
        expected = refused.reason
    try:
        assert place(request, shuffled) == expected
    except PlacementRefused as refused:
        assert refused.reason == expected


@settings(max_examples=examples(200), deadline=None)
@given(case=fleets_and_requests())
def test_best_fit_breaks_the_fewest_whole_racks_any_placement_could(case):
    racks, request = case
    try:
        chosen = place(request, racks)
    except PlacementRefused:
        return
    touched = {r.rack for r in racks if set(r.nodes) & set(chosen)}
    whole_touched = sum(1 for r in racks if r.rack in touched and len(r.free) == len(r.nodes))
    if request.rack_scale:
        assert len(touched) == fewest_racks_possible(racks, request)
    else:
        assert whole_touched == fewest_whole_racks_broken_possible(racks, request)


@settings(max_examples=examples(200), deadline=None)
@given(case=fleets_and_requests())
def test_from_the_same_state_best_fit_keeps_at_least_as_many_whole_racks_as_first_fit_and_random(case):
    racks, request = case
    for other in (first_fit, random_fit(0)):
        outcomes: list[int | None] = []
        for strategy in (place, other):
            try:
                outcomes.append(count_whole_free_racks(take(racks, strategy(request, racks))))
            except PlacementRefused:
                outcomes.append(None)
        best, worse = outcomes
        assert (best is None) == (worse is None), "one strategy accepted what the other refused"
        assert best is None or (worse is not None and best >= worse)


def shape(racks: list[RackCapacity], request: PlacementRequest, chosen: list[str]) -> tuple:
    """What placement's topology rules decide: the pod, and for each rack touched whether it was
    whole, how many usable nodes it had and how many it gave."""
    rack_of = {n: r for r in racks for n in r.nodes}
    taken = Counter(rack_of[n].rack for n in chosen)
    by_name = {r.rack: r for r in racks}
    touched = [
        (len(by_name[name].free) == len(by_name[name].nodes), len(usable(by_name[name], request)), n)
        for name, n in taken.items()
    ]
    return rack_of[chosen[0]].pod, sorted(touched)


@settings(max_examples=examples(200), deadline=None)
@given(case=fleets_and_requests())
def test_a_recent_pass_only_breaks_ties_between_equal_racks_and_nodes(case):
    racks, request = case
    untested = [replace(r, recently_tested=frozenset()) for r in racks]
    try:
        chosen = place(request, racks)
    except PlacementRefused as refused:
        with pytest.raises(PlacementRefused) as refused_untested:
            place(request, untested)
        assert refused_untested.value.reason == refused.reason
        return
    assert shape(racks, request, chosen) == shape(racks, request, place(request, untested))
    for rack in racks:
        taken = set(chosen) & set(rack.nodes)
        left_tested = (set(usable(rack, request)) - taken) & rack.recently_tested
        assert not (left_tested and taken - rack.recently_tested), "an untested node taken before a tested one"


@st.composite
def one_pod_of_equal_racks_and_arrivals(draw):
    size = draw(st.integers(1, 8))
    racks = []
    for r in range(draw(st.integers(1, 6))):
        names = tuple(f"r{r}-{s}" for s in range(size))
        racks.append(RackCapacity("p1", f"r{r}", names, names))
    arrivals = draw(
        st.lists(st.builds(PlacementRequest, node_count=st.integers(1, 2 * size * 2), rack_scale=st.booleans()))
    )
    return racks, arrivals


@settings(max_examples=examples(200), deadline=None)
@given(case=one_pod_of_equal_racks_and_arrivals())
def test_over_arrivals_in_one_pod_of_equal_racks_best_fit_keeps_as_many_whole_racks_as_first_fit(case):
    """The sequence claim where it holds: each strategy leaves at most one partly used rack, so
    equal free counts mean equal whole racks, and both accept the same requests."""
    racks, arrivals = case
    fleets = {place: racks, first_fit: racks}
    for request in arrivals:
        for strategy, fleet in fleets.items():
            with contextlib.suppress(PlacementRefused):
                fleets[strategy] = take(fleet, strategy(request, fleet))
        assert count_whole_free_racks(fleets[place]) >= count_whole_free_racks(fleets[first_fit])


class ArrivalsAndDepartures(RuleBasedStateMachine):
    """The default fleet under arrivals and departures, driven by either strategy in turn; at
    every arrival both strategies are asked from the same state, and best-fit must keep at
    least as many whole racks as first-fit."""

    def __init__(self):
        super().__init__()
        self.fleet = default_fleet(gpu_models=b200_in_r02())
        self.reservations: list[list[str]] = []

    @rule(
        count=st.integers(1, 20),
        pod=st.sampled_from([None, None, "p1", "p2"]),
        rack_scale=st.booleans(),
        gpu_model=st.sampled_from([None, None, "B200"]),
        driver=st.sampled_from(["best-fit", "first-fit"]),
    )
    def arrive(self, count, pod, rack_scale, gpu_model, driver):
        request = PlacementRequest(count, pod=pod, rack_scale=rack_scale, gpu_model=gpu_model)
        outcomes: dict[str, list[str] | None] = {}
        for name, strategy in (("best-fit", place), ("first-fit", first_fit)):
            try:
                outcomes[name] = strategy(request, self.fleet)
            except PlacementRefused:
                outcomes[name] = None
        if outcomes["best-fit"] is None:
            assert outcomes["first-fit"] is None
            return
        placed = {name: chosen for name, chosen in outcomes.items() if chosen is not None}
        assert placed.keys() == outcomes.keys(), "first-fit refused what best-fit placed"
        assert_valid(request, self.fleet, placed["best-fit"])
        after = {name: count_whole_free_racks(take(self.fleet, chosen)) for name, chosen in placed.items()}
        assert after["best-fit"] >= after["first-fit"]
        self.fleet = take(self.fleet, placed[driver])
        self.reservations.append(placed[driver])

    @precondition(lambda self: self.reservations)
    @rule(data=st.data())
    def depart(self, data):
        leaving = self.reservations.pop(data.draw(st.integers(0, len(self.reservations) - 1)))
        self.fleet = release(self.fleet, leaving)

    @invariant()
    def held_and_free_nodes_add_up(self):
        held = [n for reservation in self.reservations for n in reservation]
        free = [n for r in self.fleet for n in r.free]
        assert len(set(held)) == len(held) and not set(held) & set(free)
        assert len(held) + len(free) == 50


TestArrivalsAndDepartures = ArrivalsAndDepartures.TestCase
TestArrivalsAndDepartures.settings = settings(max_examples=examples(80), stateful_step_count=30, deadline=None)
