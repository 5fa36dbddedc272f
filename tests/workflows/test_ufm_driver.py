"""The InfiniBand driver against a real bmcsim's UFMs, one per pod: bmcsim's 16 nodes are p1
(node-001..008) and p2 (node-009..016), each node with 8 HCA port GUIDs. Its calls are counted by
the address check that every outbound call passes once (the URL's host is an address)."""

from __future__ import annotations

import ipaddress

import pytest

from core import outbound
from core.topology import default_layout, network_ports
from tests.support.bmcsim import OPERATOR, start_bmcsim
from tests.support.ports import free_port
from workflows.fabric_managers.base import FabricRefused, FabricUnavailable, Segment
from workflows.fabric_managers.ufm import UfmDriver

NODES = 16
GUIDS = {name: ports.hca_guids for name, ports in network_ports(default_layout(NODES)).items()}
PKEYS = "/pods/{fabric}/ufmRest/resources/pkeys"
LOOPBACK = outbound.public_only([ipaddress.ip_network("127.0.0.0/8")])


class CountingCheck:
    """The allow-list of the tests (loopback), counting the calls it lets through."""

    def __init__(self, check: outbound.AddressCheck = LOOPBACK):
        self.check = check
        self.calls = 0

    def __call__(self, address: outbound.IPAddress) -> str | None:
        self.calls += 1
        return self.check(address)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    sim = start_bmcsim(tmp_path_factory.mktemp("bmcsim") / "data", nodes=NODES)
    yield sim
    sim.stop()


@pytest.fixture
def ufm(sim):
    """bmcsim's UFMs; afterwards no fault and no partition but the default one."""
    yield sim
    assert sim.delete("/bmcsim/v1/faults").status_code == 200
    for fabric in ("p1", "p2"):
        for pkey in sim.get(PKEYS.format(fabric=fabric)).json():
            if pkey != "0x7fff":
                assert sim.delete(f"{PKEYS.format(fabric=fabric)}/{pkey}").status_code == 200


def driver(sim, check: outbound.AddressCheck = LOOPBACK, password: str = OPERATOR[1]) -> UfmDriver:
    return UfmDriver(
        url=sim.url + "/pods/{fabric}",
        username=OPERATOR[0],
        password=password,
        check=check,
        deadline_s=10,
        max_body_bytes=1 << 20,
    )


def on(segment: str | None, *nodes: str) -> dict[str, Segment | None]:
    return {guid: None if segment is None else Segment(segment) for node in nodes for guid in GUIDS[node]}


def read(ib: UfmDriver, fabric: str, *nodes: str) -> dict[str, str]:
    """Each node's membership, when all its GUIDs agree (else the GUIDs' own)."""
    got = ib.read(fabric, [guid for node in nodes for guid in GUIDS[node]])
    per_node = {node: {got[guid] for guid in GUIDS[node]} for node in nodes}
    return {node: found.pop() if len(found) == 1 else ",".join(sorted(found)) for node, found in per_node.items()}


def test_ports_applied_on_two_fabrics_read_back_on_their_pkeys(ufm):
    ib = driver(ufm)
    assert read(ib, "p1", "node-001", "node-002") == {"node-001": "", "node-002": ""}
    ib.apply("p1", {**on("0x1001", "node-001", "node-002"), **on("0x1002", "node-003")})
    ib.apply("p2", on("0x1001", "node-009"))  # a P_Key is the fabric's own: p2's 0x1001 is another network
    assert read(ib, "p1", "node-001", "node-002", "node-003", "node-004") == {
        "node-001": "0x1001",
        "node-002": "0x1001",
        "node-003": "0x1002",
        "node-004": "",
    }
    assert read(ib, "p2", "node-009", "node-010") == {"node-009": "0x1001", "node-010": ""}
    partition = ufm.get(PKEYS.format(fabric="p1") + "/0x1001?guids_data=true").json()
    assert partition["ip_over_ib"] is True
    assert {(m["membership"], m["index0"]) for m in partition["guids"]} == {("full", False)}
    assert len(partition["guids"]) == 16
    ib.apply("p1", on("0x1001", "node-001"))  # already there: nothing to change
    assert read(ib, "p1", "node-001") == {"node-001": "0x1001"}


def test_ports_move_between_pkeys_and_off_every_one_whose_partition_then_goes(ufm):
    ib = driver(ufm)
    ib.apply("p1", on("0x1001", "node-001", "node-002"))
    ib.apply("p1", on("0x1003", "node-001"))
    assert read(ib, "p1", "node-001", "node-002") == {"node-001": "0x1003", "node-002": "0x1001"}
    ib.apply("p1", on("0x1001", "node-001"))
    assert read(ib, "p1", "node-001", "node-002") == {"node-001": "0x1001", "node-002": "0x1001"}
    assert list(ufm.get(PKEYS.format(fabric="p1")).json()) == ["0x1001", "0x7fff"]  # 0x1003 held no one
    ib.apply("p1", on(None, "node-001", "node-002"))
    assert read(ib, "p1", "node-001", "node-002") == {"node-001": "", "node-002": ""}
    assert list(ufm.get(PKEYS.format(fabric="p1")).json()) == ["0x7fff"]


def test_a_port_added_by_hand_to_another_tenants_pkey_is_taken_off_it(ufm):
    ib = driver(ufm)
    ib.apply("p1", {**on("0x1001", "node-001"), **on("0x1002", "node-002")})
    r = ufm.post(
        "/bmcsim/v1/faults",
        json={"kind": "fabric_drift", "fabric": "infiniband", "node": "node-001", "segment": "0x1002"},
    )
    assert r.status_code == 201, r.text
    assert read(ib, "p1", "node-001") == {"node-001": "0x1001,0x1002"}
    ib.apply("p1", on("0x1001", "node-001"))
    assert read(ib, "p1", "node-001", "node-002") == {"node-001": "0x1001", "node-002": "0x1002"}


def test_the_calls_are_one_per_partition_touched_however_many_ports(ufm):
    counted = {}
    for nodes in (("node-001",), tuple(f"node-00{n}" for n in range(2, 9))):
        check = CountingCheck()
        ib = driver(ufm, check)
        ib.apply("p1", on("0x1001", *nodes))  # the read, one add
        ib.apply("p1", on("0x1002", *nodes))  # the read, one remove (its partition's last), one add
        read(ib, "p1", *nodes)  # one
        counted[len(nodes)] = check.calls
    assert counted == {1: 2 + 3 + 1, 7: 2 + 3 + 1}


def test_a_manager_down_or_unreachable_is_unavailable(ufm):
    ufm.post("/bmcsim/v1/faults", json={"kind": "fabric_api_down", "fabric": "infiniband"})
    ib = driver(ufm)
    with pytest.raises(FabricUnavailable, match="503"):
        ib.read("p1", GUIDS["node-001"])
    with pytest.raises(FabricUnavailable, match="503"):
        ib.apply("p1", on("0x1001", "node-001"))
    ufm.delete("/bmcsim/v1/faults")

    nowhere = UfmDriver(
        url=f"http://127.0.0.1:{free_port()}/pods/{{fabric}}",
        username="u",
        password="p",
        check=LOOPBACK,
        deadline_s=5,
        max_body_bytes=1 << 20,
    )
    with pytest.raises(FabricUnavailable, match="UFM of p1"):
        nowhere.read("p1", GUIDS["node-001"])
    public = CountingCheck(outbound.public_only())  # loopback not admitted: no call at all
    with pytest.raises(FabricUnavailable, match="loopback"):
        driver(ufm, public).read("p1", GUIDS["node-001"])


def test_a_change_the_manager_refuses_is_refused_in_its_words_and_reads_still_work(ufm):
    ib = driver(ufm)
    ib.apply("p1", on("0x1001", "node-001"))
    ufm.post("/bmcsim/v1/faults", json={"kind": "fabric_apply_fails", "fabric": "infiniband"})
    with pytest.raises(FabricRefused, match="Failed to update partitions"):
        ib.apply("p1", on(None, "node-001"))
    assert read(ib, "p1", "node-001") == {"node-001": "0x1001"}
    with pytest.raises(FabricRefused, match="401"):
        driver(ufm, password="wrong").read("p1", GUIDS["node-001"])
    with pytest.raises(FabricRefused, match="not a P_Key"):
        ib.apply("p1", on("0x7fff", "node-002"))


def test_a_port_made_full_member_of_the_default_partition_by_hand_is_refused_after_the_rest(tmp_path):
    sim = start_bmcsim(tmp_path / "data", nodes=2)  # its own: what UFM's API cannot undo stays
    try:
        ib = driver(sim)
        r = sim.post(
            "/bmcsim/v1/faults",
            json={"kind": "fabric_drift", "fabric": "infiniband", "node": "node-001", "segment": "0x7fff"},
        )
        assert r.status_code == 201, r.text
        assert read(ib, "p1", "node-001") == {"node-001": "0x7fff"}
        with pytest.raises(FabricRefused, match="default partition 0x7fff"):
            ib.apply("p1", {**on(None, "node-001"), **on("0x1001", "node-002")})
        assert read(ib, "p1", "node-001", "node-002") == {"node-001": "0x7fff", "node-002": "0x1001"}
    finally:
        sim.stop()
