"""The fabrics' faults through bmcsim's admin API (POST/GET/DELETE /bmcsim/v1/faults), the ports the
inventory names on each fabric, and a drift seen through the manager's own API. A bmcsim of its
own: a drift moves ports for good, which the session's shared fleet must not see."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.bmcsim import Bmcsim, start_bmcsim

FAULTS = "/bmcsim/v1/faults"
FABRICS = ("ethernet", "infiniband", "nvlink")
STANDING = ("fabric_api_down", "fabric_apply_fails", "fabric_slow")


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Iterator[Bmcsim]:
    sim = start_bmcsim(tmp_path_factory.mktemp("fabric-faults") / "data", nodes=8)
    yield sim
    sim.stop()


@pytest.fixture(autouse=True)
def no_faults_after(sim):
    yield
    assert sim.delete(FAULTS).status_code == 200


def inject(sim: Bmcsim, **fault) -> dict:
    r = sim.post(FAULTS, json=fault)
    assert r.status_code == 201, r.text
    return r.json()


def listed(sim: Bmcsim) -> list[dict]:
    r = sim.get(FAULTS)
    assert r.status_code == 200, r.text
    return r.json()["faults"]


def network(sim: Bmcsim, node: str) -> dict:
    return sim.node(node)["network"]


def test_the_inventory_names_each_nodes_ports_and_where_the_managers_answer(sim):
    inventory = sim.get("/bmcsim/v1/inventory").json()
    assert inventory["fabric_managers"] == {
        "ethernet": f"{sim.url}/switches/{{switch}}",
        "infiniband": f"{sim.url}/pods/{{fabric}}",
        "nvlink": f"{sim.url}/nvlink-domains/{{domain}}",
    }
    first, second = inventory["nodes"][:2]
    assert set(first["network"]) == {"ethernet", "infiniband", "nvlink", "provisioning_address", "management_address"}
    assert first["network"]["ethernet"] == {"switch": first["fabric"]["leaf"], "port": "swp1"}
    assert second["network"]["ethernet"]["port"] == "swp2"
    assert first["network"]["infiniband"]["fabric"] == first["pod"]
    assert len(first["network"]["infiniband"]["guids"]) == len(first["gpus"])
    assert all(len(guid) == 16 and int(guid, 16) for guid in first["network"]["infiniband"]["guids"])
    assert first["network"]["nvlink"] == {"domain": first["fabric"]["nvlink_domain"]}
    addresses = [
        n["network"][kind] for n in inventory["nodes"] for kind in ("provisioning_address", "management_address")
    ]
    assert len(set(addresses)) == len(addresses)


def test_standing_fabric_faults_are_listed_with_their_fabric_and_cleared_by_fabric(sim):
    for fabric in FABRICS:
        for kind in STANDING:
            assert inject(sim, kind=kind, fabric=fabric) == {"fabric": fabric, "kind": kind}
    inject(sim, kind="fabric_slow", fabric="nvlink")  # again: still one
    faults = listed(sim)
    assert sorted((f["fabric"], f["kind"]) for f in faults) == sorted((f, k) for f in FABRICS for k in STANDING)

    cleared = sim.delete(FAULTS, params={"fabric": "ethernet"})
    assert cleared.status_code == 200 and cleared.json() == {"cleared": 3}
    assert {f["fabric"] for f in listed(sim)} == {"infiniband", "nvlink"}
    assert sim.delete(FAULTS, params={"fabric": "ethernet"}).json() == {"cleared": 0}
    assert sim.delete(FAULTS).json() == {"cleared": 6}
    assert listed(sim) == []


def test_a_fabric_fault_stands_beside_node_and_switch_faults(sim):
    inject(sim, kind="fabric_api_down", fabric="infiniband")
    inject(sim, kind="agent_down", node="node-001")
    switch = sim.get("/bmcsim/v1/inventory").json()["switches"][0]["name"]
    inject(sim, kind="switch_down", switch=switch)
    assert sim.delete(FAULTS, params={"node": "node-001"}).json() == {"cleared": 1}
    assert sim.delete(FAULTS, params={"switch": switch}).json() == {"cleared": 1}
    assert listed(sim) == [{"fabric": "infiniband", "kind": "fabric_api_down"}]


def test_the_api_is_down_while_its_fault_stands(sim):
    pod = network(sim, "node-001")["infiniband"]["fabric"]
    pkeys = f"/pods/{pod}/ufmRest/resources/pkeys"
    assert sim.get(pkeys).status_code == 200
    inject(sim, kind="fabric_api_down", fabric="infiniband")
    assert sim.get(pkeys).status_code == 503
    assert sim.delete(FAULTS, params={"fabric": "infiniband"}).json() == {"cleared": 1}
    assert sim.get(pkeys).status_code == 200


@pytest.mark.parametrize(
    ("fault", "status", "detail"),
    [
        ({"kind": "fabric_slow"}, 400, "'fabric' must be one of ethernet, infiniband, nvlink"),
        ({"kind": "fabric_slow", "fabric": "fibre-channel"}, 400, "'fabric' must be one of"),
        ({"kind": "fabric_api_down", "fabric": ["ethernet"]}, 400, "'fabric' must be one of"),
        ({"kind": "fabric_drift", "fabric": "ethernet"}, 400, "'node' is required"),
        ({"kind": "fabric_drift", "fabric": "ethernet", "node": "node-999"}, 404, "no node named 'node-999'"),
        ({"kind": "fabric_drift", "fabric": "ethernet", "node": "node-001", "segment": 1001}, 400, "a VLAN"),
        ({"kind": "fabric_drift", "fabric": "ethernet", "node": "node-001", "segment": "4095"}, 400, "a VLAN"),
        ({"kind": "fabric_drift", "fabric": "ethernet", "node": "node-001", "segment": "0x1001"}, 400, "a VLAN"),
        ({"kind": "fabric_drift", "fabric": "infiniband", "node": "node-001", "segment": "1001"}, 400, "a P_Key"),
        ({"kind": "fabric_drift", "fabric": "infiniband", "node": "node-001", "segment": "0x8000"}, 400, "a P_Key"),
        ({"kind": "fabric_drift", "fabric": "infiniband", "node": "node-001", "segment": "0x0"}, 400, "a P_Key"),
        ({"kind": "fabric_drift", "fabric": "nvlink", "node": "node-001", "segment": ""}, 400, "partition's name"),
        ({"kind": "fabric_drift", "fabric": "nvlink", "node": "node-001", "segment": "x" * 256}, 400, "partition"),
    ],
)
def test_bad_fabric_faults_are_refused_with_a_reason(sim, fault, status, detail):
    r = sim.post(FAULTS, json=fault)
    assert r.status_code == status, r.text
    assert detail in r.json()["detail"]
    assert listed(sim) == []


@pytest.mark.parametrize(
    ("query", "status", "detail"),
    [
        ({"fabric": "token-ring"}, 400, "'fabric' must be one of ethernet, infiniband, nvlink"),
        ({"fabric": "ethernet", "node": "node-001"}, 400, "give one of 'node', 'switch' or 'fabric'"),
    ],
)
def test_bad_clears_are_refused_with_a_reason(sim, query, status, detail):
    r = sim.delete(FAULTS, params=query)
    assert r.status_code == status and detail in r.json()["detail"]


def test_an_ethernet_drift_moves_the_port_outside_nvue_s_revisions(sim):
    ethernet = network(sim, "node-002")["ethernet"]
    interface = f"/switches/{ethernet['switch']}/nvue_v1/interface/{ethernet['port']}"
    revisions = sim.get(f"/switches/{ethernet['switch']}/nvue_v1/revision").json()

    moved = inject(sim, kind="fabric_drift", fabric="ethernet", node="node-002", segment="1001")
    assert moved == {
        "kind": "fabric_drift",
        "fabric": "ethernet",
        "node": "node-002",
        "port": ethernet["port"],
        "from": "10",
        "to": "1001",
    }
    applied = sim.get(interface).json()
    assert applied["bridge"]["domain"]["br_default"]["access"] == 1001
    assert sim.get(f"/switches/{ethernet['switch']}/nvue_v1/revision").json() == revisions
    assert listed(sim) == [], "a drift is an act, not a standing fault"

    again = inject(sim, kind="fabric_drift", fabric="ethernet", node="node-002")
    assert again["from"] == "1001" and again["to"] not in ("10", "1001")


def test_an_infiniband_drift_makes_the_guids_full_members_by_hand(sim):
    infiniband = network(sim, "node-003")["infiniband"]
    moved = inject(sim, kind="fabric_drift", fabric="infiniband", node="node-003", segment="0x1001")
    assert (moved["port"], moved["from"], moved["to"]) == (",".join(infiniband["guids"]), "", "0x1001")
    partition = sim.get(f"/pods/{infiniband['fabric']}/ufmRest/resources/pkeys/0x1001?guids_data=true").json()
    members = {member["guid"]: member["membership"] for member in partition["guids"]}
    assert members == dict.fromkeys(infiniband["guids"], "full")


def test_an_nvlink_drift_moves_the_gpus_into_a_partition(sim):
    gpus = [gpu["uuid"] for gpu in sim.node("node-004")["gpus"]]
    moved = inject(sim, kind="fabric_drift", fabric="nvlink", node="node-004", segment="by-hand")
    assert (moved["port"], moved["from"], moved["to"]) == (",".join(gpus), "", "by-hand")
    domain = network(sim, "node-004")["nvlink"]["domain"]
    partitions = sim.get(f"/nvlink-domains/{domain}/nmx/v1/partitions").json()
    (partition,) = [p for p in partitions if p["Name"] == "by-hand"]
    held = {
        gpu["Description"]
        for gpu in sim.get(f"/nvlink-domains/{domain}/nmx/v1/gpus").json()
        if gpu["ID"] in partition["Members"]
    }
    assert held == set(gpus)


def test_a_drift_outlives_a_restart(tmp_path):
    data = tmp_path / "data"
    sim = start_bmcsim(data, nodes=2)
    try:
        inject(sim, kind="fabric_drift", fabric="ethernet", node="node-001", segment="2001")
        inject(sim, kind="fabric_apply_fails", fabric="ethernet")
    finally:
        sim.stop()
    sim = start_bmcsim(data, nodes=2)
    try:
        ethernet = network(sim, "node-001")["ethernet"]
        interface = sim.get(f"/switches/{ethernet['switch']}/nvue_v1/interface/{ethernet['port']}").json()
        assert interface["bridge"]["domain"]["br_default"]["access"] == 2001
        assert listed(sim) == [{"fabric": "ethernet", "kind": "fabric_apply_fails"}]
    finally:
        sim.stop()
