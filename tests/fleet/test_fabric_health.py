"""The fabric's switches: enrolled from an inventory (and refused when they serve no domain of its
nodes), and which nodes an unhealthy switch cuts off (fleet/fabric_health.py)."""

from __future__ import annotations

import json

import pytest
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction

from core.topology import default_layout
from fleet import fabric_health
from fleet.fabric_health import CRITICAL, OK, UNKNOWN, WARNING, RackNodes, SwitchReading
from fleet.inventory import InventoryError, parse_inventory, records_from_layout
from fleet.models import FabricSwitch, Pod
from fleet.services import enrol_nodes
from tests.fleet.test_seed_fleet import fabric_inventory, seed

# Two racks under p1-leaf1, one under p1-leaf2, all in pod p1 with its two spines.
RACKS = [
    RackNodes(pod="p1", path=(("leaf", "p1-leaf1"),), ids=(1, 2), names=("node-001", "node-002")),
    RackNodes(pod="p1", path=(("leaf", "p1-leaf1"),), ids=(3,), names=("node-003",)),
    RackNodes(pod="p1", path=(("leaf", "p1-leaf2"),), ids=(4, 5), names=("node-004", "node-005")),
]


def switch(name, *, health=OK, state="Enabled", links_down=()) -> SwitchReading:
    kind, serves = ("spine", ("pod", "p1")) if "spine" in name else ("leaf", ("leaf", name))
    return SwitchReading(name, kind, serves, health, state, frozenset(links_down))


def healthy() -> dict[str, SwitchReading]:
    return {name: switch(name) for name in ("p1-spine1", "p1-spine2", "p1-leaf1", "p1-leaf2")}


def cut_off(**changed: SwitchReading) -> dict[int, str]:
    return fabric_health.cut_off({**healthy(), **changed}.values(), RACKS)


def test_a_healthy_fabric_cuts_nothing_off():
    assert cut_off() == {}


def test_a_leaf_down_cuts_off_every_node_under_it():
    down = {1: "leaf switch p1-leaf1 down", 2: "leaf switch p1-leaf1 down", 3: "leaf switch p1-leaf1 down"}
    assert cut_off(**{"p1-leaf1": switch("p1-leaf1", health=CRITICAL, state="UnavailableOffline")}) == down
    # Offline is down whatever its health says, and Critical whatever its state says.
    assert cut_off(**{"p1-leaf1": switch("p1-leaf1", health=UNKNOWN, state="UnavailableOffline")}) == down
    assert cut_off(**{"p1-leaf1": switch("p1-leaf1", health=CRITICAL)}) == down


def test_a_downlink_down_cuts_off_its_node_alone_and_other_links_down_cut_off_nothing():
    flapping = switch("p1-leaf2", health=WARNING, links_down=["node-005"])
    assert cut_off(**{"p1-leaf2": flapping}) == {5: "port node-005 of leaf switch p1-leaf2 down"}
    # An uplink flapping, or a port named after a node another leaf serves: a warning, nobody cut off.
    assert cut_off(**{"p1-leaf2": switch("p1-leaf2", health=WARNING, links_down=["p1-spine1", "node-001"])}) == {}


def test_nodes_are_cut_off_only_when_every_spine_of_their_pod_is_down():
    one_down = {"p1-spine1": switch("p1-spine1", health=CRITICAL, state="UnavailableOffline")}
    assert cut_off(**one_down) == {}
    both_down = {**one_down, "p1-spine2": switch("p1-spine2", health=CRITICAL, state="UnavailableOffline")}
    assert cut_off(**both_down) == dict.fromkeys(range(1, 6), "every spine of p1 down (p1-spine1, p1-spine2)")


def test_spines_serve_their_spine_group_only():
    sg1 = (("spine_group", "p1-sg1"), ("leaf", "p1-leaf1"))
    racks = [
        RackNodes(pod="p1", path=sg1, ids=(1,), names=("node-001",)),
        RackNodes(pod="p1", path=(("spine_group", "p1-sg2"), ("leaf", "p1-leaf2")), ids=(2,), names=("node-002",)),
    ]
    spines = [
        SwitchReading(f"p1-sg{group}-spine{n}", "spine", ("spine_group", f"p1-sg{group}"), health, "", frozenset())
        for group, health in ((1, CRITICAL), (2, OK))
        for n in (1, 2)
    ]
    assert fabric_health.cut_off(spines, racks) == {1: "every spine of p1-sg1 down (p1-sg1-spine1, p1-sg1-spine2)"}


def test_a_switch_never_read_cuts_nothing_off():
    never_read = {name: switch(name, health=UNKNOWN, state="") for name in healthy()}
    assert fabric_health.cut_off(never_read.values(), RACKS) == {}


# -- enrolment ---------------------------------------------------------------------------------


def with_switches(document: dict, *switches: dict) -> dict:
    return {**document, "switches": list(switches)}


def leaf(name="p1-leaf1", **changes) -> dict:
    return {"name": name, "kind": "leaf", "level": "leaf", "domain": name, **changes}


def spine(name="p1-spine1", **changes) -> dict:
    return {"name": name, "kind": "spine", "level": "pod", "domain": "p1", **changes}


def switches_served() -> set[tuple]:
    return set(FabricSwitch.objects.values_list("name", "kind", "fabric_domain__name", "pod__name", "health"))


def test_switches_are_enrolled_from_the_inventory_once_and_follow_a_recabling(db, tmp_path):
    path = tmp_path / "inventory.json"
    document = fabric_inventory({"r01": "p1-leaf1", "r02": "p1-leaf1", "r03": "p1-leaf2"})
    path.write_text(json.dumps(with_switches(document, spine(), leaf(), leaf("p1-leaf2"))))
    assert "3 enrolled" in seed("--inventory", str(path))
    assert switches_served() == {
        ("p1-spine1", "spine", None, "p1", UNKNOWN),
        ("p1-leaf1", "leaf", "p1-leaf1", None, UNKNOWN),
        ("p1-leaf2", "leaf", "p1-leaf2", None, UNKNOWN),
    }
    FabricSwitch.objects.filter(name="p1-leaf1").update(health=WARNING)

    # Again, with p1-leaf1's switch now cabled as p1-leaf2's: one row each, its health as last read.
    path.write_text(json.dumps(with_switches(document, spine(), leaf("p1-leaf1", domain="p1-leaf2"))))
    assert seed("--inventory", str(path)).endswith("3 unchanged\n")
    assert switches_served() == {
        ("p1-spine1", "spine", None, "p1", UNKNOWN),
        ("p1-leaf1", "leaf", "p1-leaf2", None, WARNING),
        ("p1-leaf2", "leaf", "p1-leaf2", None, UNKNOWN),
    }


@pytest.mark.parametrize(
    ("switches", "message"),
    [
        ([leaf("p1-leaf9")], r"switches\[0\].domain: must be a leaf domain that the nodes name"),
        ([spine(domain="p2")], r"switches\[0\].domain: must be a pod domain that the nodes name"),
        ([leaf(level="pod", domain="p1")], r"switches\[0\].level: a leaf switch must serve the level above the racks"),
        ([spine(level="leaf", domain="p1-leaf1")], r"switches\[0\].level: a spine switch must serve a level above"),
        ([leaf(kind="router")], r"switches\[0\].kind: must be one of leaf, spine"),
        ([leaf(level="nvlink_domain", domain="r01")], r"switches\[0\].level: must be one of pod, leaf"),
        ([leaf(name="p1/leaf1")], r"switches\[0\].name: must be a switch name"),
        ([leaf(), leaf()], "switches: must name each switch once"),
        ({"p1-leaf1": {}}, "switches: must be a list of switches"),
    ],
)
def test_switches_that_serve_no_domain_of_the_nodes_are_refused(db, tmp_path, switches, message):
    document = fabric_inventory({"r01": "p1-leaf1", "r02": "p1-leaf1", "r03": "p1-leaf2"})
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps({**document, "switches": switches}))
    with pytest.raises(CommandError, match=message):
        seed("--inventory", str(path))
    assert not FabricSwitch.objects.exists()


def test_switches_need_the_fabric_levels():
    """Parsed without a database, as any inventory is."""
    document = with_switches(fabric_inventory({"r01": "l1", "r02": "l1", "r03": "l2"}), leaf("l1"))
    del document["fabric_levels"]
    for node in document["nodes"]:
        del node["fabric"]
    with pytest.raises(InventoryError, match="switches: an inventory with switches must name its fabric_levels"):
        parse_inventory(document)


def test_the_default_layout_has_the_switches_bmcsim_serves(db):
    """A leaf switch per leaf, two spines per pod: 24 nodes are r01 and r02 under p1-leaf1, r03 under p2-leaf1."""
    records = records_from_layout(default_layout(24), "http://127.0.0.1:8100")
    assert [s.name for s in records[0].switches] == ["p1-spine1", "p1-spine2", "p1-leaf1"]
    enrol_nodes(records=records, actor="test")
    assert switches_served() == {
        ("p1-spine1", "spine", None, "p1", UNKNOWN),
        ("p1-spine2", "spine", None, "p1", UNKNOWN),
        ("p1-leaf1", "leaf", "p1-leaf1", None, UNKNOWN),
        ("p2-spine1", "spine", None, "p2", UNKNOWN),
        ("p2-spine2", "spine", None, "p2", UNKNOWN),
        ("p2-leaf1", "leaf", "p2-leaf1", None, UNKNOWN),
    }


def test_a_switch_serves_one_domain_and_has_a_known_health(db):
    enrol_nodes(records=records_from_layout(default_layout(8), "http://127.0.0.1:8100"), actor="test")
    leaf_switch = FabricSwitch.objects.get(name="p1-leaf1")
    for change in ({"pod": Pod.objects.get(name="p1")}, {"fabric_domain": None}, {"health": "Degraded"}):
        with pytest.raises(IntegrityError), transaction.atomic():
            FabricSwitch.objects.filter(pk=leaf_switch.pk).update(**change)
