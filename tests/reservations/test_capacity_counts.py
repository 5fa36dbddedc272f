"""The counts GET /v1/capacity is answered from (reservations/capacity_counts.py), kept by deltas:
after any sequence of changes they are what a count afresh of the fleet gives, and an answer given
out never changes afterwards."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reservations.capacity_counts import MOST_DOMAINS_LISTED, WHOLE_TREE_RACKS, CapacityCounts, RackIds
from tests.support.examples import examples


def fleet(shape: list[list[list[list[int]]]]) -> list[RackIds]:
    """Pods of spine groups of leaves of racks: shape[pod][group][leaf] is that leaf's racks'
    sizes. Node ids are numbered in order from 1; racks are named so that name order is not
    the order given."""
    racks, node = [], 1
    for p, groups in enumerate(shape):
        for g, leaves in enumerate(groups):
            for leaf, sizes in enumerate(leaves):
                for r, size in enumerate(sizes):
                    path = (("spine_group", f"p{p}-g{g}"), ("leaf", f"p{p}-g{g}-l{leaf}"))
                    name = f"r{p}-{g}-{leaf}-{9 - r}"
                    racks.append(RackIds(f"p{p}", path, name, tuple(range(node, node + size))))
                    node += size
    return racks


def fresh(racks: list[RackIds], not_free_now: set[int], not_free_open_ended: set[int]) -> list[dict[str, Any]]:
    """What GET /v1/capacity's pods say, counted rack by rack: the whole tree."""
    pods: dict[str, dict[str, Any]] = {}
    trees: dict[str, dict[str, Any]] = {}
    for rack in racks:
        free = sum(node not in not_free_now for node in rack.ids)
        pod = pods.setdefault(
            rack.pod,
            {"name": rack.pod, "nodes": 0, "available": 0, "free_open_ended": 0, "whole_free_racks": 0},
        )
        pod["nodes"] += len(rack.ids)
        pod["available"] += free
        pod["free_open_ended"] += sum(node not in not_free_open_ended for node in rack.ids)
        pod["whole_free_racks"] += free == len(rack.ids)
        children = trees.setdefault(rack.pod, {})
        for level, name in (*rack.path, ("nvlink_domain", rack.rack)):
            domain = children.setdefault(
                name, {"level": level, "name": name, "nodes": 0, "available": 0, "children": {}}
            )
            domain["nodes"] += len(rack.ids)
            domain["available"] += free
            children = domain["children"]

    def listed(children: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**d, "children": listed(d["children"])} for _, d in sorted(children.items())]

    return [{**pods[name], "domains": listed(trees[name])} for name in sorted(pods)]


def cut(domains: list[dict[str, Any]], depth: int) -> list[dict[str, Any]]:
    """The tree `depth` levels down, the domains at the cut with no children."""
    if depth <= 0:
        return []
    return [{**d, "children": cut(d["children"], depth - 1)} for d in domains]


SMALL = fleet([[[[2, 3], [1]], [[4]]], [[[2, 2, 2]]]])  # two pods, 16 nodes, ids 1..16


def test_a_fleet_with_nothing_applied_is_wholly_free():
    counts = CapacityCounts(SMALL)
    assert counts.pods() == fresh(SMALL, set(), set())
    assert counts.levels == 3  # spine group, leaf, rack
    assert [pod["whole_free_racks"] for pod in counts.pods()] == [4, 3]


def test_a_change_counts_only_its_racks_and_their_ancestors():
    counts = CapacityCounts(SMALL)
    assert counts.apply({1, 2, 14}, {1, 2, 14, 15})
    assert counts.pods() == fresh(SMALL, {1, 2, 14}, {1, 2, 14, 15})
    p0, p1 = counts.pods()
    assert (p0["available"], p0["free_open_ended"], p0["whole_free_racks"]) == (8, 8, 3)
    assert (p1["available"], p1["free_open_ended"], p1["whole_free_racks"]) == (5, 4, 2)
    # Freed again: back to the fresh fleet's counts.
    assert counts.apply(set(), set())
    assert counts.pods() == fresh(SMALL, set(), set())


def test_unknown_nodes_are_ignored_and_the_same_sets_change_nothing():
    counts = CapacityCounts(SMALL)
    assert not counts.apply({100, 101}, {102})
    answer = counts.pods()
    assert not counts.apply({100, 101}, {102})
    assert counts.pods() is answer  # shared: the same answer while nothing changed


def test_an_answer_given_out_is_never_changed_by_a_later_change():
    counts = CapacityCounts(SMALL)
    whole, top = counts.pods(), counts.pods(1)
    before, before_top = fresh(SMALL, set(), set()), cut(fresh(SMALL, set(), set())[0]["domains"], 1)
    counts.apply({1, 5}, {1, 5, 6})
    assert whole == before and top[0]["domains"] == before_top
    assert counts.pods() is not whole
    assert counts.pods() == fresh(SMALL, {1, 5}, {1, 5, 6})


def test_depth_lists_the_domains_so_many_levels_down_the_cut_ones_with_no_children():
    counts = CapacityCounts(SMALL)
    counts.apply({3}, {3})
    whole = fresh(SMALL, {3}, {3})
    for depth in range(5):
        assert counts.pods(depth) == [{**pod, "domains": cut(pod["domains"], depth)} for pod in whole]
    assert counts.pods(0)[0]["domains"] == []
    assert [d["name"] for d in counts.pods(1)[0]["domains"]] == ["p0-g0", "p0-g1"]
    assert counts.pods(1)[0]["domains"][0] == {
        "level": "spine_group",
        "name": "p0-g0",
        "nodes": 6,
        "available": 5,
        "children": [],
    }
    assert counts.pods(3) is counts.pods(None) is counts.pods(99)  # no deeper than the racks


def test_a_fleet_of_pods_and_racks_alone_lists_its_racks_at_depth_one():
    racks = [RackIds("p1", (), "r02", (3, 4)), RackIds("p1", (), "r01", (1, 2)), RackIds("p2", (), "r03", (5,))]
    counts = CapacityCounts(racks)
    counts.apply({1}, {1, 5})
    assert counts.levels == 1
    assert counts.pods() == fresh(racks, {1}, {1, 5})
    assert [d["name"] for d in counts.pods(1)[0]["domains"]] == ["r01", "r02"]


def test_the_default_depth_is_the_whole_tree_of_a_small_fleet_else_about_a_thousand_domains():
    assert CapacityCounts(SMALL).default_depth() == 3
    # 4 pods of 10 spine groups of 30 leaves of 2 racks: 2,400 racks, 40 groups, 1,200 leaves.
    big = CapacityCounts(fleet([[[[1, 1]] * 30] * 10] * 4))
    assert big.per_depth == [4, 40, 1_200, 2_400] and big.per_depth[3] > WHOLE_TREE_RACKS
    assert big.default_depth() == 1  # the leaves would list 1,240 > MOST_DOMAINS_LISTED
    assert 40 <= MOST_DOMAINS_LISTED < 1_240
    # As many racks, ten to a leaf: the leaves fit.
    assert CapacityCounts(fleet([[[[1] * 10] * 6] * 10] * 4)).default_depth() == 2
    # Racks straight under the pods, too many to list: the pods alone.
    assert CapacityCounts([RackIds("p1", (), f"r{i}", (i,)) for i in range(2_500)]).default_depth() == 0


shapes = st.lists(  # pods
    st.lists(st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=3), min_size=1, max_size=2), max_size=2),
    min_size=1,
    max_size=2,
)


@settings(max_examples=examples(200), deadline=None)
@given(shape=shapes, data=st.data())
def test_any_sequence_of_changes_counts_as_a_fresh_count(shape, data):
    racks = fleet(shape)
    ids = [node for rack in racks for node in rack.ids]
    nodes = st.sets(st.sampled_from([*ids, 0, 999]))  # and two ids the fleet does not know
    counts = CapacityCounts(racks)
    for _ in range(data.draw(st.integers(1, 6))):
        not_free_now = data.draw(nodes)
        # Usually what is not free now is not free open-ended either; the counts assume nothing.
        not_free_open_ended = data.draw(st.one_of(nodes, nodes.map(not_free_now.union)))
        before = counts.pods()
        changed = counts.apply(not_free_now, not_free_open_ended)
        expected = fresh(racks, not_free_now, not_free_open_ended)
        assert counts.pods() == expected
        depth = data.draw(st.integers(0, 4))
        assert counts.pods(depth) == [{**pod, "domains": cut(pod["domains"], depth)} for pod in expected]
        # Unchanged counts give the very answer again; a change that cancels out within a pod may not.
        assert changed or counts.pods() is before
        assert changed or expected == before
        again = CapacityCounts(racks)
        again.apply(not_free_now, not_free_open_ended)
        assert counts.pods() == again.pods()
