"""The fabric: core.topology's levels and switches, bmcsim's inventory of them, the Redfish Fabric
with its switches and ports, and the switch faults (switch_down, port_flap)."""

from __future__ import annotations

import json
import time

import pytest
import sushy

from core.topology import (
    FABRIC_LEVELS,
    SPINE_GROUP_LEVELS,
    bmc_password,
    default_layout,
    fabric_levels,
    fabric_switches,
)
from tests.support.bmcsim import FLEET_NODES, OPERATOR, start_bmcsim

SWITCHES = "/redfish/v1/Fabrics/InfiniBand/Switches"


def port(bmcsim, switch: str, name: str) -> dict:
    return bmcsim.get(f"{SWITCHES}/{switch}/Ports/{name}").json()


def link(bmcsim, switch: str, name: str) -> str:
    return port(bmcsim, switch, name)["LinkStatus"]


def status(bmcsim, switch: str) -> dict:
    return bmcsim.get(f"{SWITCHES}/{switch}").json()["Status"]


def test_the_default_fleet_has_a_leaf_per_rack_pair_within_each_pod():
    layout = default_layout()
    assert fabric_levels(layout) == FABRIC_LEVELS == ("pod", "leaf", "nvlink_domain")
    leaf_of_rack = {spec.rack: dict(spec.fabric)["leaf"] for spec in layout}
    assert leaf_of_rack == {
        "r01": "p1-leaf1",
        "r02": "p1-leaf1",
        "r03": "p1-leaf2",
        "r04": "p1-leaf2",
        "r05": "p2-leaf1",
        "r06": "p2-leaf1",
        "r07": "p2-leaf2",
    }
    for spec in layout:
        assert spec.fabric == (("pod", spec.pod), ("leaf", leaf_of_rack[spec.rack]), ("nvlink_domain", spec.rack))
    assert [s.name for s in layout if dict(s.fabric)["leaf"] == "p2-leaf2"] == ["node-049", "node-050"]
    wider = default_layout(racks_per_leaf=4)
    assert {dict(s.fabric)["leaf"] for s in wider} == {"p1-leaf1", "p2-leaf1"}


def test_the_default_fleet_has_a_leaf_switch_per_leaf_and_two_spines_per_pod():
    layout = default_layout()
    switches = fabric_switches(layout)
    assert [(s.name, s.kind, s.level, s.domain) for s in switches] == [
        ("p1-spine1", "spine", "pod", "p1"),
        ("p1-spine2", "spine", "pod", "p1"),
        ("p1-leaf1", "leaf", "leaf", "p1-leaf1"),
        ("p1-leaf2", "leaf", "leaf", "p1-leaf2"),
        ("p2-spine1", "spine", "pod", "p2"),
        ("p2-spine2", "spine", "pod", "p2"),
        ("p2-leaf1", "leaf", "leaf", "p2-leaf1"),
        ("p2-leaf2", "leaf", "leaf", "p2-leaf2"),
    ]
    by_name = {s.name: s for s in switches}
    assert by_name["p2-leaf2"].ports == ("node-049", "node-050", "p2-spine1", "p2-spine2")
    assert by_name["p1-spine2"].ports == ("p1-leaf1", "p1-leaf2")
    # Every node has one downlink, on the leaf switch of its leaf.
    downlinks = {port: s.name for s in switches if s.kind == "leaf" for port in s.ports if port.startswith("node-")}
    assert downlinks == {spec.name: dict(spec.fabric)["leaf"] for spec in layout}
    assert fabric_switches(layout) == switches  # deterministic


def test_spine_groups_make_a_deeper_fabric_of_a_thousand_nodes():
    layout = default_layout(1000, spine_groups_per_pod=2)
    assert fabric_levels(layout) == SPINE_GROUP_LEVELS
    # 125 racks: p1 takes 63 (32 leaves: 16 + 16 in its two spine groups), p2 62 (31: 16 + 15).
    leaves: dict[str, set[str]] = {}
    racks: dict[str, list[str]] = {}
    for spec in layout:
        position = dict(spec.fabric)
        assert (position["pod"], position["nvlink_domain"]) == (spec.pod, spec.rack)
        assert position["spine_group"].startswith(f"{spec.pod}-sg") and position["leaf"].startswith(f"{spec.pod}-leaf")
        leaves.setdefault(position["spine_group"], set()).add(position["leaf"])
        if spec.rack not in racks.setdefault(position["leaf"], []):
            racks[position["leaf"]].append(spec.rack)
    assert {group: len(members) for group, members in leaves.items()} == {
        "p1-sg1": 16,
        "p1-sg2": 16,
        "p2-sg1": 16,
        "p2-sg2": 15,
    }
    assert racks["p1-leaf01"] == ["r001", "r002"] and racks["p1-leaf32"] == ["r063"]
    assert racks["p2-leaf01"] == ["r064", "r065"] and racks["p2-leaf31"] == ["r124", "r125"]
    assert sorted(leaves["p1-sg1"]) == [f"p1-leaf{n:02d}" for n in range(1, 17)]

    switches = fabric_switches(layout)
    spines = [s for s in switches if s.kind == "spine"]
    assert [(s.name, s.level, s.domain) for s in spines[:2]] == [
        ("p1-sg1-spine1", "spine_group", "p1-sg1"),
        ("p1-sg1-spine2", "spine_group", "p1-sg1"),
    ]
    assert len(spines) == 8 and len(switches) == 8 + 63
    for spine in spines:
        assert set(spine.ports) == leaves[spine.domain]
    p2_leaf31 = next(s for s in switches if s.name == "p2-leaf31")
    assert p2_leaf31.ports[-2:] == ("p2-sg2-spine1", "p2-sg2-spine2") and len(p2_leaf31.ports) == 18


@pytest.mark.parametrize("shape", [{"racks_per_leaf": 0}, {"spine_groups_per_pod": -1}])
def test_a_fabric_shape_must_make_sense(shape):
    with pytest.raises(ValueError, match="racks per leaf"):
        default_layout(50, **shape)


def test_the_inventory_gives_the_fabric_levels_each_nodes_position_and_the_switches(bmcsim):
    inventory = bmcsim.get("/bmcsim/v1/inventory", auth=None).json()
    layout = default_layout(FLEET_NODES)
    assert inventory["fabric_levels"] == ["pod", "leaf", "nvlink_domain"]
    for node, spec in zip(inventory["nodes"], layout, strict=True):
        assert list(node["fabric"].items()) == list(spec.fabric)
        assert node["fabric"] == {"pod": "p1", "leaf": "p1-leaf1", "nvlink_domain": "r01"}
        assert {"name", "pod", "rack", "position", "serial", "credentials", "agent_url", "macs", "gpus"} < set(node)
    assert inventory["switches"] == [
        {"name": "p1-spine1", "kind": "spine", "level": "pod", "domain": "p1"},
        {"name": "p1-spine2", "kind": "spine", "level": "pod", "domain": "p1"},
        {"name": "p1-leaf1", "kind": "leaf", "level": "leaf", "domain": "p1-leaf1"},
    ]


def test_redfish_gives_the_fabric_its_switches_and_their_ports(bmcsim):
    root = sushy.Sushy(bmcsim.url + "/redfish/v1", username=OPERATOR[0], password=OPERATOR[1])
    try:
        assert root.get_fabric_collection().members_identities == ("/redfish/v1/Fabrics/InfiniBand",)
        fabric = root.get_fabric("/redfish/v1/Fabrics/InfiniBand")
        assert (fabric.identity, fabric.fabric_type) == ("InfiniBand", sushy.Protocol.INFINI_BAND)
    finally:
        root._auth.close()
    assert bmcsim.get("/redfish/v1/Fabrics/InfiniBand").json()["Status"]["HealthRollup"] == "OK"
    members = [m["@odata.id"] for m in bmcsim.get(SWITCHES).json()["Members"]]
    assert members == [f"{SWITCHES}/{name}" for name in ("p1-spine1", "p1-spine2", "p1-leaf1")]

    leaf = bmcsim.get(f"{SWITCHES}/p1-leaf1").json()
    assert (leaf["Id"], leaf["SwitchType"], leaf["Status"]) == (
        "p1-leaf1",
        "InfiniBand",
        {"State": "Enabled", "Health": "OK"},
    )
    assert leaf["Oem"]["bmcsim"] == {"Kind": "leaf", "Level": "leaf", "Domain": "p1-leaf1"}
    assert bmcsim.get(f"{SWITCHES}/p1-spine2").json()["Oem"]["bmcsim"] == {
        "Kind": "spine",
        "Level": "pod",
        "Domain": "p1",
    }
    ports = [m["@odata.id"].rsplit("/", 1)[1] for m in bmcsim.get(f"{SWITCHES}/p1-leaf1/Ports").json()["Members"]]
    assert ports == ["node-001", "node-002", "node-003", "node-004", "p1-spine1", "p1-spine2"]
    downlink = port(bmcsim, "p1-leaf1", "node-002")
    assert (downlink["Id"], downlink["PortProtocol"], downlink["PortType"], downlink["LinkStatus"]) == (
        "node-002",
        "InfiniBand",
        "UpstreamPort",
        "LinkUp",
    )
    uplink = port(bmcsim, "p1-leaf1", "p1-spine2")
    assert uplink["PortType"] == "InterswitchPort" and uplink["Links"] == {
        "ConnectedSwitches": [{"@odata.id": f"{SWITCHES}/p1-spine2"}],
        "ConnectedSwitchPorts": [{"@odata.id": f"{SWITCHES}/p1-spine2/Ports/p1-leaf1"}],
    }
    assert port(bmcsim, "p1-spine2", "p1-leaf1")["Links"]["ConnectedSwitchPorts"] == [
        {"@odata.id": f"{SWITCHES}/p1-leaf1/Ports/p1-spine2"}
    ]
    for missing in (f"{SWITCHES}/p9-leaf1", f"{SWITCHES}/p1-leaf1/Ports/node-009", "/redfish/v1/Fabrics/Ethernet"):
        assert bmcsim.get(missing).status_code == 404


def test_a_bmc_credential_does_not_reach_the_fabric(bmcsim):
    bmc = ("admin", bmc_password("node-001"))
    assert bmcsim.get("/redfish/v1/Fabrics", auth=bmc).json()["Members"] == []
    for path in (
        "/redfish/v1/Fabrics/InfiniBand",
        SWITCHES,
        f"{SWITCHES}/p1-leaf1",
        f"{SWITCHES}/p1-leaf1/Ports/node-001",
    ):
        r = bmcsim.get(path, auth=bmc)
        assert r.status_code == 403, path
        assert r.json()["error"]["@Message.ExtendedInfo"][0]["MessageId"].endswith("InsufficientPrivilege")
    assert bmcsim.get(f"{SWITCHES}/p1-leaf1", auth=None).status_code == 401


def test_a_switch_down_takes_every_link_of_its_ports_down_until_cleared(bmcsim):
    r = bmcsim.post("/bmcsim/v1/faults", json={"switch": "p1-spine1", "kind": "switch_down"})
    assert r.status_code == 201 and r.json() == {"switch": "p1-spine1", "kind": "switch_down"}
    assert bmcsim.get("/bmcsim/v1/faults").json()["faults"] == [{"switch": "p1-spine1", "kind": "switch_down"}]
    assert status(bmcsim, "p1-spine1") == {"State": "UnavailableOffline", "Health": "Critical"}
    down = port(bmcsim, "p1-spine1", "p1-leaf1")
    assert down["LinkStatus"] == "LinkDown" and down["Status"] == {"State": "UnavailableOffline", "Health": "Critical"}
    # The leaf's end of that cable is down too; the leaf itself, its other uplink and its nodes' links are not.
    assert port(bmcsim, "p1-leaf1", "p1-spine1")["Status"] == {"State": "Enabled", "Health": "Critical"}
    assert link(bmcsim, "p1-leaf1", "p1-spine1") == "LinkDown"
    assert [link(bmcsim, "p1-leaf1", p) for p in ("p1-spine2", "node-001")] == ["LinkUp", "LinkUp"]
    assert status(bmcsim, "p1-leaf1") == {"State": "Enabled", "Health": "OK"}
    assert bmcsim.get("/redfish/v1/Fabrics/InfiniBand").json()["Status"]["HealthRollup"] == "Critical"

    assert bmcsim.delete("/bmcsim/v1/faults", params={"switch": "p1-leaf1"}).json() == {"cleared": 0}
    assert bmcsim.delete("/bmcsim/v1/faults", params={"switch": "p1-spine1"}).json() == {"cleared": 1}
    assert status(bmcsim, "p1-spine1") == {"State": "Enabled", "Health": "OK"}
    assert [link(bmcsim, "p1-spine1", "p1-leaf1"), link(bmcsim, "p1-leaf1", "p1-spine1")] == ["LinkUp", "LinkUp"]
    assert bmcsim.get("/bmcsim/v1/faults").json() == {"faults": []}


def test_a_leaf_down_cuts_its_nodes_links(bmcsim):
    bmcsim.post("/bmcsim/v1/faults", json={"switch": "p1-leaf1", "kind": "switch_down"})
    bmcsim.post("/bmcsim/v1/faults", json={"node": "node-001", "kind": "implant"})
    assert {link(bmcsim, "p1-leaf1", f"node-00{n}") for n in range(1, 5)} == {"LinkDown"}
    assert link(bmcsim, "p1-spine2", "p1-leaf1") == "LinkDown"
    # DELETE without a target clears the switches' faults with the nodes'.
    assert bmcsim.delete("/bmcsim/v1/faults").json() == {"cleared": 2}
    assert {link(bmcsim, "p1-leaf1", f"node-00{n}") for n in range(1, 5)} == {"LinkUp"}


def test_a_flapping_port_warns_and_reads_down_at_time_scale_zero(bmcsim):
    r = bmcsim.post("/bmcsim/v1/faults", json={"switch": "p1-leaf1", "kind": "port_flap", "port": "p1-spine2"})
    assert r.status_code == 201
    fault = r.json()
    assert (fault["switch"], fault["port"], fault["period_s"]) == ("p1-leaf1", "p1-spine2", 5.0)
    assert abs(fault["started_at"] - time.time()) < 5
    assert status(bmcsim, "p1-leaf1") == {"State": "Enabled", "Health": "Warning"}
    flapping = port(bmcsim, "p1-leaf1", "p1-spine2")
    assert flapping["LinkStatus"] == "LinkDown" and flapping["Status"]["Health"] == "Warning"
    spine_end = port(bmcsim, "p1-spine2", "p1-leaf1")
    assert spine_end["LinkStatus"] == "LinkDown" and spine_end["Status"]["Health"] == "Warning"
    assert status(bmcsim, "p1-spine2")["Health"] == "OK"  # the flap is the leaf's
    assert port(bmcsim, "p1-leaf1", "node-001")["Status"]["Health"] == "OK"
    assert bmcsim.get("/redfish/v1/Fabrics/InfiniBand").json()["Status"]["HealthRollup"] == "Warning"
    again = {"switch": "p1-leaf1", "kind": "port_flap", "port": "p1-spine2", "period_s": 2}
    assert bmcsim.post("/bmcsim/v1/faults", json=again).status_code == 201
    assert [f["period_s"] for f in bmcsim.get("/bmcsim/v1/faults").json()["faults"]] == [2]
    assert bmcsim.delete("/bmcsim/v1/faults").json() == {"cleared": 1}
    assert link(bmcsim, "p1-leaf1", "p1-spine2") == "LinkUp"
    assert status(bmcsim, "p1-leaf1")["Health"] == "OK"


@pytest.mark.parametrize(
    ("body", "status_code", "detail"),
    [
        ({"kind": "switch_down"}, 400, "'switch' is required"),
        ({"kind": "switch_down", "node": "node-001"}, 400, "'switch' is required"),
        ({"kind": "switch_down", "switch": "p9-leaf1"}, 404, "no switch named 'p9-leaf1'"),
        ({"kind": "port_flap", "switch": "p1-leaf1"}, 400, "'port' must be one of node-001, node-002"),
        ({"kind": "port_flap", "switch": "p1-leaf1", "port": "node-009"}, 400, "'port' must be one of"),
        ({"kind": "port_flap", "switch": "p1-leaf1", "port": "node-001", "period_s": 0}, 400, "'period_s'"),
        ({"kind": "port_flap", "switch": "p1-leaf1", "port": "node-001", "period_s": True}, 400, "'period_s'"),
        ({"kind": "port_flap", "switch": "p1-leaf1", "port": "node-001", "period_s": "5"}, 400, "'period_s'"),
        ({"kind": "port_flap", "switch": "p1-leaf1", "port": "node-001", "period_s": 3601}, 400, "'period_s'"),
    ],
)
def test_switch_fault_requests_are_validated(bmcsim, body, status_code, detail):
    r = bmcsim.post("/bmcsim/v1/faults", json=body)
    assert r.status_code == status_code and detail in r.json()["detail"]
    assert bmcsim.get("/bmcsim/v1/faults").json() == {"faults": []}


def test_clearing_names_one_switch_or_one_node(bmcsim):
    assert bmcsim.delete("/bmcsim/v1/faults", params={"switch": "p9-leaf1"}).status_code == 404
    both = bmcsim.delete("/bmcsim/v1/faults", params={"switch": "p1-leaf1", "node": "node-001"})
    assert both.status_code == 400
    assert both.json() == {"detail": "give one of 'node', 'switch' or 'fabric', not several"}


@pytest.fixture(scope="module")
def deep_fabric(tmp_path_factory):
    """40 nodes in racks of 4, a leaf a rack pair, two spine groups a pod; at a time scale where a
    flap period of 10 s lasts 0.1 s."""
    data = tmp_path_factory.mktemp("deep-fabric")
    topology = data / "topology.json"
    shape = {"nodes": 40, "nodes_per_rack": 4, "gpus_per_node": 1, "racks_per_leaf": 2, "spine_groups_per_pod": 2}
    topology.write_text(json.dumps(shape))
    sim = start_bmcsim(data / "data", scale="0.01", args=("--topology", str(topology)))
    yield sim
    sim.stop()


def test_a_topology_file_shapes_the_fabric(deep_fabric):
    inventory = deep_fabric.get("/bmcsim/v1/inventory").json()
    layout = default_layout(40, nodes_per_rack=4, gpus_per_node=1, racks_per_leaf=2, spine_groups_per_pod=2)
    assert inventory["fabric_levels"] == list(SPINE_GROUP_LEVELS)
    assert [list(n["fabric"].items()) for n in inventory["nodes"]] == [list(s.fabric) for s in layout]
    assert inventory["nodes"][-1]["fabric"] == {
        "pod": "p2",
        "spine_group": "p2-sg2",
        "leaf": "p2-leaf3",
        "nvlink_domain": "r10",
    }
    assert [s["name"] for s in inventory["switches"]] == [s.name for s in fabric_switches(layout)]
    assert len(deep_fabric.get(SWITCHES).json()["Members"]) == len(inventory["switches"]) == 4 * 2 + 6


@pytest.mark.timing
def test_a_flapping_port_goes_down_and_up_every_period_of_simulated_time(deep_fabric):
    flap = {"switch": "p2-leaf3", "kind": "port_flap", "port": "node-040", "period_s": 20}
    started_at = deep_fabric.post("/bmcsim/v1/faults", json=flap).json()["started_at"]
    period = 20 * 0.01  # as bmcsim computes it: 0.2 s at this time scale

    def period_number(at: float) -> int:
        return int((at - started_at) // period)

    try:
        checked = []
        while time.time() - started_at < 1.2:
            before = time.time()
            status_now = link(deep_fabric, "p2-leaf3", "node-040")
            after = time.time()
            if period_number(before) == period_number(after):  # read within one period: its state is known
                assert status_now == ("LinkUp" if period_number(before) % 2 else "LinkDown")
                checked.append(status_now)
        assert {"LinkUp", "LinkDown"} <= set(checked)
        assert link(deep_fabric, "p2-leaf3", "node-039") == "LinkUp"
    finally:
        deep_fabric.delete("/bmcsim/v1/faults")
    assert link(deep_fabric, "p2-leaf3", "node-040") == "LinkUp"


def test_switch_faults_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    sim = start_bmcsim(data, nodes=2)
    try:
        sim.post("/bmcsim/v1/faults", json={"switch": "p1-spine1", "kind": "switch_down"})
        flap = sim.post(
            "/bmcsim/v1/faults", json={"switch": "p1-leaf1", "kind": "port_flap", "port": "node-002", "period_s": 30}
        ).json()
    finally:
        sim.stop()
    sim = start_bmcsim(data, nodes=2)
    try:
        assert sim.get("/bmcsim/v1/faults").json()["faults"] == [{"switch": "p1-spine1", "kind": "switch_down"}, flap]
        assert status(sim, "p1-spine1")["Health"] == "Critical"
    finally:
        sim.stop()
