"""The Ethernet driver against a real bmcsim's NVUE, one per leaf switch: ports put on segments
and read back on two switches, moved between segments and back to the provisioning VLAN, the
manager's failures told apart (down: FabricUnavailable; apply failing: FabricRefused), and the
calls a batch costs counted at the only door they pass through, the driver's address check.

bmcsim's 16 nodes: p1-leaf1 holds node-001..008 on swp1-8, p2-leaf1 node-009..016."""

from __future__ import annotations

import ipaddress

import pytest

from core import outbound
from core.topology import PROVISIONING_VLAN
from tests.support.bmcsim import OPERATOR, start_bmcsim
from workflows.fabric_managers import FabricRefused, FabricUnavailable, Segment
from workflows.fabric_managers.nvue import NvueDriver

NODES = 16
LEAF1, LEAF2 = "p1-leaf1", "p2-leaf1"
SWP = [f"swp{n}" for n in range(1, 9)]
RED = Segment("1001")
BLUE = Segment("1002", vni=51002)


class CountingCheck:
    """Loopback only, as the fleet's allow-list would admit bmcsim; counts the calls it is asked about."""

    def __init__(self):
        self.calls = 0
        self.admit = outbound.public_only([ipaddress.ip_network("127.0.0.0/8")])

    def __call__(self, address: outbound.IPAddress) -> str | None:
        self.calls += 1
        return self.admit(address)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    sim = start_bmcsim(tmp_path_factory.mktemp("bmcsim") / "data", nodes=NODES)
    yield sim
    sim.stop()


@pytest.fixture
def check() -> CountingCheck:
    return CountingCheck()


@pytest.fixture
def driver(sim, check):
    """A driver for bmcsim's NVUEs; afterwards no fault stands and every port is back on the provisioning VLAN."""
    driver = NvueDriver(
        url=sim.url + "/switches/{switch}",
        username=OPERATOR[0],
        password=OPERATOR[1],
        check=check,
        deadline_s=10,
        max_body_bytes=1 << 20,
    )
    yield driver
    assert sim.delete("/bmcsim/v1/faults").status_code == 200
    for leaf in (LEAF1, LEAF2):
        driver.apply(leaf, dict.fromkeys(SWP, None))
    driver.close()


def fault(sim, kind: str) -> None:
    assert sim.post("/bmcsim/v1/faults", json={"kind": kind, "fabric": "ethernet"}).status_code == 201


def test_every_port_reads_as_the_provisioning_vlan_at_first(driver):
    assert driver.read(LEAF1, SWP) == dict.fromkeys(SWP, str(PROVISIONING_VLAN))
    assert driver.read(LEAF1, ["swp99"]) == {"swp99": ""}  # a port the switch does not have


def test_ports_on_two_switches_read_back_on_their_segments(driver, sim):
    driver.apply(LEAF1, {"swp1": RED, "swp2": RED, "swp3": BLUE})
    driver.apply(LEAF2, {"swp1": RED, "swp8": BLUE})
    assert driver.read(LEAF1, SWP[:4]) == {"swp1": "1001", "swp2": "1001", "swp3": "1002", "swp4": "10"}
    assert driver.read(LEAF2, ["swp1", "swp2", "swp8"]) == {"swp1": "1001", "swp2": "10", "swp8": "1002"}
    # On an EVPN fabric the VLAN is mapped to the segment's VNI in the switch's bridge.
    bridge = sim.get(f"/switches/{LEAF2}/nvue_v1/bridge/domain/br_default").json()
    assert bridge["vlan"]["1002"] == {"vni": {"51002": {}}} and bridge["vlan"]["1001"] == {}


def test_ports_move_between_segments_and_back_to_no_tenant(driver):
    driver.apply(LEAF1, {"swp1": RED, "swp2": RED})
    driver.apply(LEAF1, {"swp1": BLUE})
    assert driver.read(LEAF1, ["swp1", "swp2"]) == {"swp1": "1002", "swp2": "1001"}
    driver.apply(LEAF1, {"swp1": None, "swp2": BLUE})
    assert driver.read(LEAF1, ["swp1", "swp2"]) == {"swp1": "10", "swp2": "1002"}
    driver.apply(LEAF1, {"swp2": None})
    assert driver.read(LEAF1, ["swp1", "swp2"]) == {"swp1": "10", "swp2": "10"}


def test_a_batch_costs_the_same_calls_whatever_its_number_of_ports(driver, check):
    driver.apply(LEAF1, {"swp1": RED})
    one_port = check.calls
    check.calls = 0
    driver.apply(LEAF1, dict.fromkeys(SWP, BLUE))
    assert check.calls == one_port == 4  # create, patch, apply, one poll (at time scale 0)
    check.calls = 0
    assert driver.read(LEAF1, SWP) == dict.fromkeys(SWP, "1002")
    assert check.calls == 1
    check.calls = 0
    driver.apply(LEAF1, {})
    assert check.calls == 0


def test_a_manager_that_is_down_is_unavailable(driver, sim):
    fault(sim, "fabric_api_down")
    with pytest.raises(FabricUnavailable, match=r"p1-leaf1.*503"):
        driver.apply(LEAF1, {"swp1": RED})
    with pytest.raises(FabricUnavailable):
        driver.read(LEAF1, ["swp1"])


def test_a_manager_that_does_not_answer_is_unavailable(check):
    driver = NvueDriver(
        url="http://127.0.0.1:9/{switch}",  # discard: nothing listens
        username="u",
        password="p",
        check=check,
        deadline_s=2,
        max_body_bytes=1024,
    )
    with pytest.raises(FabricUnavailable, match="p1-leaf1"):
        driver.read(LEAF1, ["swp1"])


def test_an_apply_that_fails_is_refused_with_the_managers_words_and_changes_nothing(driver, sim):
    fault(sim, "fabric_apply_fails")
    with pytest.raises(FabricRefused, match="apply_error: Unable to reload-or-restart"):
        driver.apply(LEAF1, {"swp1": RED})
    assert driver.read(LEAF1, ["swp1"]) == {"swp1": "10"}  # reads still work


def test_wrong_credentials_and_addresses_outside_the_allow_list_are_refused(sim, check):
    wrong = NvueDriver(
        url=sim.url + "/switches/{switch}",
        username=OPERATOR[0],
        password="wrong",
        check=check,
        deadline_s=5,
        max_body_bytes=1024,
    )
    with pytest.raises(FabricRefused, match="401"):
        wrong.read(LEAF1, ["swp1"])
    outside = NvueDriver(
        url=sim.url + "/switches/{switch}",
        username=OPERATOR[0],
        password=OPERATOR[1],
        check=outbound.public_only(),
        deadline_s=5,
        max_body_bytes=1024,
    )
    with pytest.raises(FabricRefused, match="loopback"):
        outside.read(LEAF1, ["swp1"])


def test_an_apply_that_takes_time_is_polled_until_applied_within_the_deadline(tmp_path, check):
    slow = start_bmcsim(tmp_path / "data", nodes=NODES, scale="0.1")  # a revision applies in 0.2 s

    def driver(deadline_s: float) -> NvueDriver:
        return NvueDriver(
            url=slow.url + "/switches/{switch}",
            username=OPERATOR[0],
            password=OPERATOR[1],
            check=check,
            deadline_s=deadline_s,
            max_body_bytes=1 << 20,
        )

    try:
        driver(10).apply(LEAF1, {"swp1": RED})
        assert check.calls > 4  # polled while it was applying
        assert driver(10).read(LEAF1, ["swp1"]) == {"swp1": "1001"}
        with pytest.raises(FabricUnavailable, match="deadline"):
            driver(0.15).apply(LEAF1, {"swp1": BLUE})
    finally:
        slow.stop()
