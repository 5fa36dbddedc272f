"""The NVLink driver against a real bmcsim's NMX-M: partitions applied and read back on two
NVLink domains, GPUs moved between partitions and back to none, the two ways a manager fails,
and the calls a batch costs, counted at the allow-list (one address check per call).

bmcsim's 10 nodes: r01 holds node-001..008 (64 GPUs), r02 node-009 and node-010."""

from __future__ import annotations

import ipaddress

import pytest

from core import outbound
from core.topology import default_layout
from tests.support.bmcsim import OPERATOR, start_bmcsim
from workflows.fabric_managers import FabricRefused, FabricUnavailable, Segment
from workflows.fabric_managers.nmx import NmxDriver

NODES = 10
GPUS = {spec.name: [gpu.uuid for gpu in spec.gpus] for spec in default_layout(NODES)}
R01_GPUS = [uuid for n in range(1, 9) for uuid in GPUS[f"node-{n:03d}"]]
TENANT_1, TENANT_2 = Segment("gpufleet-r1"), Segment("gpufleet-r2")


class CountingCheck:
    """The allow-list the driver is given (loopback only), counting the calls it passes."""

    def __init__(self):
        self.calls = 0
        self.admit = outbound.public_only([ipaddress.ip_network("127.0.0.1/32")])

    def __call__(self, address):
        self.calls += 1
        return self.admit(address)


@pytest.fixture(scope="module")
def nmx_sim(tmp_path_factory):
    sim = start_bmcsim(tmp_path_factory.mktemp("bmcsim") / "data", nodes=NODES)
    yield sim
    sim.stop()


@pytest.fixture
def sim(nmx_sim):
    """bmcsim with no fabric fault and no partition left behind."""
    yield nmx_sim
    assert nmx_sim.delete("/bmcsim/v1/faults").status_code == 200
    for domain in ("r01", "r02"):
        for partition in nmx_sim.get(f"/nvlink-domains/{domain}/nmx/v1/partitions").json():
            assert nmx_sim.delete(f"/nvlink-domains/{domain}/nmx/v1/partitions/{partition['ID']}").status_code == 202


def driver_of(sim, check=None, deadline_s: float = 10.0) -> NmxDriver:
    return NmxDriver(
        url=sim.url + "/nvlink-domains/{domain}",
        username=OPERATOR[0],
        password=OPERATOR[1],
        check=check or CountingCheck(),
        deadline_s=deadline_s,
        max_body_bytes=1 << 20,
    )


def fault(sim, kind: str) -> None:
    assert sim.post("/bmcsim/v1/faults", json={"kind": kind, "fabric": "nvlink"}).status_code == 201


def test_gpus_applied_on_two_domains_read_back_in_their_partitions(sim):
    driver = driver_of(sim)
    assert driver.read("r01", GPUS["node-001"]) == dict.fromkeys(GPUS["node-001"], "")
    driver.apply("r01", dict.fromkeys(GPUS["node-001"] + GPUS["node-002"], TENANT_1))
    driver.apply("r02", {**dict.fromkeys(GPUS["node-009"], TENANT_1), **dict.fromkeys(GPUS["node-010"], TENANT_2)})
    assert driver.read("r01", GPUS["node-001"] + GPUS["node-003"]) == {
        **dict.fromkeys(GPUS["node-001"], "gpufleet-r1"),
        **dict.fromkeys(GPUS["node-003"], ""),
    }
    assert driver.read("r02", GPUS["node-009"] + GPUS["node-010"]) == {
        **dict.fromkeys(GPUS["node-009"], "gpufleet-r1"),
        **dict.fromkeys(GPUS["node-010"], "gpufleet-r2"),
    }
    partitions = sim.get("/nvlink-domains/r02/nmx/v1/partitions").json()
    assert sorted(p["Name"] for p in partitions) == ["gpufleet-r1", "gpufleet-r2"]  # each domain its own


def test_gpus_move_between_partitions_swap_and_go_back_to_none(sim):
    driver = driver_of(sim)
    node1, node2, node3 = GPUS["node-001"], GPUS["node-002"], GPUS["node-003"]
    driver.apply("r01", {**dict.fromkeys(node1 + node3, TENANT_1), **dict.fromkeys(node2, TENANT_2)})
    driver.apply("r01", dict.fromkeys(node3, TENANT_2))  # one node moves over
    assert set(driver.read("r01", node3).values()) == {"gpufleet-r2"}
    driver.apply("r01", {**dict.fromkeys(node1, TENANT_2), **dict.fromkeys(node2 + node3, TENANT_1)})  # a swap
    assert driver.read("r01", node1 + node2 + node3) == {
        **dict.fromkeys(node1, "gpufleet-r2"),
        **dict.fromkeys(node2 + node3, "gpufleet-r1"),
    }
    driver.apply("r01", dict.fromkeys(node1 + node2 + node3, None))
    assert driver.read("r01", node1 + node2 + node3) == dict.fromkeys(node1 + node2 + node3, "")
    assert sim.get("/nvlink-domains/r01/nmx/v1/partitions").json() == []  # emptied partitions are deleted


def test_a_manager_that_is_down_is_unavailable_and_changes_nothing(sim):
    driver = driver_of(sim)
    fault(sim, "fabric_api_down")
    with pytest.raises(FabricUnavailable, match="503"):
        driver.read("r01", GPUS["node-001"])
    with pytest.raises(FabricUnavailable, match="503"):
        driver.apply("r01", dict.fromkeys(GPUS["node-001"], TENANT_1))
    assert sim.delete("/bmcsim/v1/faults").status_code == 200
    assert set(driver.read("r01", GPUS["node-001"]).values()) == {""}


def test_an_operation_that_fails_is_refused_with_the_managers_words(sim):
    driver = driver_of(sim)
    driver.apply("r01", dict.fromkeys(GPUS["node-001"], TENANT_1))
    fault(sim, "fabric_apply_fails")
    with pytest.raises(FabricRefused, match=r"failed: INTERNAL_ERROR: .*fabric_apply_fails"):
        driver.apply("r01", dict.fromkeys(GPUS["node-001"], None))
    assert set(driver.read("r01", GPUS["node-001"]).values()) == {"gpufleet-r1"}  # reads still work


def test_a_gpu_the_manager_does_not_list_or_held_by_hand_is_refused(sim):
    driver = driver_of(sim)
    with pytest.raises(FabricRefused, match="lists no GPU GPU-00000000"):
        driver.read("r01", ["GPU-00000000-0000-0000-0000-000000000000"])
    with pytest.raises(FabricRefused, match="lists no GPU"):  # a GPU of the other domain
        driver.apply("r01", dict.fromkeys(GPUS["node-009"], TENANT_1))


def test_a_batch_costs_the_same_calls_for_one_gpu_as_for_sixty_four(sim):
    calls = []
    for gpus in (R01_GPUS[:1], R01_GPUS):
        check = CountingCheck()
        driver = driver_of(sim, check)
        driver.apply("r01", dict.fromkeys(gpus, TENANT_1))
        driver.read("r01", gpus)
        driver.apply("r01", dict.fromkeys(gpus, None))
        calls.append(check.calls)
    # apply: 2 reads, POST, 1 poll; read: 2 reads; apply back: 2 reads, DELETE, 1 poll (time scale 0)
    assert calls == [10, 10]


def test_an_operation_is_polled_until_done_within_the_deadline(tmp_path):
    sim = start_bmcsim(tmp_path / "data", nodes=NODES, scale="1")  # an operation takes APPLY_S, 2 s
    try:
        driver_of(sim).apply("r01", dict.fromkeys(GPUS["node-001"], TENANT_1))
        assert set(driver_of(sim).read("r01", GPUS["node-001"]).values()) == {"gpufleet-r1"}
        with pytest.raises(FabricUnavailable, match="still pending"):
            driver_of(sim, deadline_s=1.0).apply("r01", dict.fromkeys(GPUS["node-001"], None))
    finally:
        sim.stop()
