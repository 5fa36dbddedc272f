"""The fabric sweep against a real bmcsim: it reads each enrolled switch's Status and its ports'
links from Redfish Fabrics as bmcsim's operator, records them, and placement's selector of cut-off
nodes follows; a switch manager that cannot be read leaves a failure beside the last reading.

bmcsim's 16 nodes: p1 is r01 (node-001..008) under p1-leaf1, p2 is r02 (node-009..016) under
p2-leaf1, each pod with two spines. SIM_TIME_SCALE is 0, so a flapping port reads down."""

from __future__ import annotations

import pytest
from django.test import override_settings

from fleet.fabric_health import CRITICAL, OK, UNKNOWN, WARNING
from fleet.inventory import parse_inventory
from fleet.models import FabricDomain, FabricSwitch, Node
from fleet.services import enrol_nodes
from reservations.selectors import nodes_cut_off
from tests.support.bmcsim import OPERATOR, start_bmcsim
from tests.support.ports import free_port
from workflows.fabric_health import read_switches

NODES = 16
SWITCHES = 6  # p1-spine1, p1-spine2, p1-leaf1 and p2's


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    sim = start_bmcsim(tmp_path_factory.mktemp("bmcsim") / "data", nodes=NODES)
    yield sim
    sim.stop()


@pytest.fixture
def fabric(db, sim):
    """The fleet enrolled from bmcsim's inventory, its switches read from bmcsim; no fault left behind."""
    enrol_nodes(records=parse_inventory(sim.get("/bmcsim/v1/inventory").json()), actor="test")
    with override_settings(
        FABRIC_REDFISH_URL=sim.url, FABRIC_REDFISH_USERNAME=OPERATOR[0], FABRIC_REDFISH_PASSWORD=OPERATOR[1]
    ):
        yield sim
    assert sim.delete("/bmcsim/v1/faults").status_code == 200


def fault(sim, **body) -> None:
    assert sim.post("/bmcsim/v1/faults", json=body).status_code == 201


def switches() -> dict[str, tuple]:
    return {row.name: (row.health, row.state, row.links_down) for row in FabricSwitch.objects.all()}


def cut_off_names() -> dict[str, str]:
    names = dict(Node.objects.values_list("pk", "name"))
    return {names[node_id]: reason for node_id, reason in nodes_cut_off().items()}


def test_a_healthy_fabric_reads_ok_and_cuts_nothing_off(fabric):
    assert list(switches().values()) == [(UNKNOWN, "", [])] * SWITCHES  # enrolled, never read
    assert read_switches() == {"read": SWITCHES, "failed": 0, "nodes let go": 0}
    assert list(switches().values()) == [(OK, "Enabled", [])] * SWITCHES
    assert not FabricSwitch.objects.filter(read_at=None).exists()
    assert cut_off_names() == {}


def test_a_leaf_down_is_critical_and_its_nodes_are_cut_off_until_it_is_back(fabric):
    fault(fabric, kind="switch_down", switch="p1-leaf1")
    read_switches()
    health, state, links_down = switches()["p1-leaf1"]
    assert (health, state) == (CRITICAL, "UnavailableOffline")
    assert set(links_down) == {f"node-00{n}" for n in range(1, 9)} | {"p1-spine1", "p1-spine2"}
    # Each spine's end of the cable to it is down too: a warning on the spines, not a cut-off.
    assert switches()["p1-spine1"][2] == ["p1-leaf1"]
    assert cut_off_names() == {f"node-00{n}": "leaf switch p1-leaf1 down" for n in range(1, 9)}
    since = FabricSwitch.objects.get(name="p1-leaf1").troubled_since
    assert since is not None and FabricSwitch.objects.get(name="p2-leaf1").troubled_since is None
    read_switches()
    assert FabricSwitch.objects.get(name="p1-leaf1").troubled_since == since  # since the first read down

    fabric.delete("/bmcsim/v1/faults?switch=p1-leaf1")
    read_switches()
    assert switches()["p1-leaf1"] == (OK, "Enabled", [])
    assert cut_off_names() == {}
    assert FabricSwitch.objects.get(name="p1-leaf1").troubled_since is None


def test_a_flapping_downlink_cuts_off_its_node_alone(fabric):
    fault(fabric, kind="port_flap", switch="p2-leaf1", port="node-010")
    read_switches()
    assert switches()["p2-leaf1"] == (WARNING, "Enabled", ["node-010"])
    assert cut_off_names() == {"node-010": "port node-010 of leaf switch p2-leaf1 down"}

    fabric.delete("/bmcsim/v1/faults")
    read_switches()
    assert switches()["p2-leaf1"] == (OK, "Enabled", [])
    assert cut_off_names() == {}


@pytest.mark.parametrize(
    ("endpoint", "failure"),
    [
        ({"FABRIC_REDFISH_URL": f"http://127.0.0.1:{free_port()}"}, "switch manager: GET /redfish/v1/Fabrics"),
        ({"FABRIC_REDFISH_PASSWORD": "not-calvin"}, "switch manager: GET /redfish/v1/Fabrics: 401"),
    ],
)
def test_a_switch_manager_that_cannot_be_read_leaves_a_failure_beside_the_last_reading(fabric, endpoint, failure):
    fault(fabric, kind="switch_down", switch="p1-leaf1")
    read_switches()
    with override_settings(**endpoint):
        assert read_switches() == {"read": 0, "failed": SWITCHES, "nodes let go": 0}
    rows = FabricSwitch.objects.all()
    assert all(row.failure.startswith(failure) for row in rows), [row.failure for row in rows]
    # What was last read stands: the leaf is still down as far as anyone knows.
    assert switches()["p1-leaf1"][:2] == (CRITICAL, "UnavailableOffline")
    assert set(cut_off_names().values()) == {"leaf switch p1-leaf1 down"}

    read_switches()
    assert not FabricSwitch.objects.exclude(failure="").exists()


def test_a_switch_the_manager_does_not_list_is_recorded_as_unread(fabric):
    FabricSwitch.objects.create(name="p1-leaf9", kind="leaf", fabric_domain=FabricDomain.objects.get(name="p1-leaf1"))
    assert read_switches() == {"read": SWITCHES, "failed": 1, "nodes let go": 0}
    unlisted = FabricSwitch.objects.get(name="p1-leaf9")
    assert (unlisted.health, unlisted.read_at, unlisted.failure) == (
        UNKNOWN,
        None,
        "switch manager: lists no switch p1-leaf9",
    )
