"""The fabric's levels and each node's place in them (fleet/fabric.py), as inventories give them."""

from __future__ import annotations

import pytest

from core.validation import Invalid
from fleet import fabric

LEVELS = ("pod", "spine_group", "leaf", "nvlink_domain")


def test_levels_run_from_the_pod_to_the_nvlink_domain():
    assert fabric.parse_levels(list(LEVELS)) == LEVELS
    assert fabric.parse_levels(["pod", "nvlink_domain"]) == ("pod", "nvlink_domain")


@pytest.mark.parametrize(
    ("levels", "problem"),
    [
        (["leaf", "nvlink_domain"], "must start with 'pod'"),
        (["pod", "leaf"], "end with 'nvlink_domain'"),
        (["pod", "leaf", "leaf", "nvlink_domain"], "each level once"),
        (["pod", "Leaf", "nvlink_domain"], "lowercase"),
        (["pod"], "a list of 2 to 8 level names"),
        ("pod,leaf", "a list of 2 to 8 level names"),
    ],
)
def test_levels_off_their_shape_are_refused(levels, problem):
    with pytest.raises(Invalid, match=problem):
        fabric.parse_levels(levels)


def test_a_position_gives_the_domains_between_pod_and_rack_top_down():
    position = {"nvlink_domain": "r01", "leaf": "p1-leaf1", "pod": "p1", "spine_group": "p1-sg1"}
    assert fabric.parse_position(position, "node-001.fabric", levels=LEVELS, pod="p1", rack="r01") == (
        ("spine_group", "p1-sg1"),
        ("leaf", "p1-leaf1"),
    )


@pytest.mark.parametrize(
    ("position", "problem"),
    [
        ({"pod": "p1", "leaf": "p1-leaf1", "nvlink_domain": "r01"}, "a domain at each level"),
        ({"pod": "p2", "spine_group": "s", "leaf": "l", "nvlink_domain": "r01"}, "its pod p1 and rack r01"),
        ({"pod": "p1", "spine_group": "s", "leaf": "l", "nvlink_domain": "r02"}, "its pod p1 and rack r01"),
        ({"pod": "p1", "spine_group": "s/1", "leaf": "l", "nvlink_domain": "r01"}, "a domain name"),
    ],
)
def test_a_position_that_does_not_fit_the_node_is_refused(position, problem):
    with pytest.raises(Invalid, match=problem):
        fabric.parse_position(position, "node-001.fabric", levels=LEVELS, pod="p1", rack="r01")


def test_the_nodes_must_draw_one_tree():
    leaf1 = (("leaf", "p1-leaf1"),)
    fabric.check_tree([("p1", "r01", leaf1), ("p1", "r01", leaf1), ("p1", "r02", leaf1)])
    with pytest.raises(Invalid, match="a rack must sit in one place"):
        fabric.check_tree([("p1", "r01", leaf1), ("p1", "r01", (("leaf", "p1-leaf2"),))])
    with pytest.raises(Invalid, match="a domain must have one level, pod and parent"):
        fabric.check_tree([("p1", "r01", leaf1), ("p2", "r05", leaf1)])
    with pytest.raises(Invalid, match="the same levels"):
        fabric.check_tree([("p1", "r01", leaf1), ("p1", "r02", (("spine_group", "s1"),))])
