"""bmcsim's NMX-M over HTTP, per NVLink domain under /nvlink-domains/{domain}/nmx/v1: GPUs,
partitions made, changed and deleted by operations to poll, a GPU in one partition at most, the
fabric faults, drift by hand, and the state across a restart.

bmcsim's 10 nodes: r01 holds node-001..008 (64 GPUs), r02 node-009 and node-010."""

from __future__ import annotations

import json
import time

import pytest
import requests

from bmcsim.fabric_managers import SLOW_S
from bmcsim.fabric_managers.nmx import APPLY_S, NmxManager
from core.topology import default_layout
from tests.support.bmcsim import start_bmcsim

NODES = 10
R01 = "/nvlink-domains/r01/nmx/v1"
GPUS = {spec.name: [gpu.uuid for gpu in spec.gpus] for spec in default_layout(NODES)}


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
            r = nmx_sim.delete(f"/nvlink-domains/{domain}/nmx/v1/partitions/{partition['ID']}")
            assert r.status_code == 202, r.text


def gpu_ids(sim, node: str) -> list[str]:
    """NMX-M's IDs of the node's GPUs (whose UUID is their Description)."""
    domain = "r02" if node in ("node-009", "node-010") else "r01"
    ids = {gpu["Description"]: gpu["ID"] for gpu in sim.get(f"/nvlink-domains/{domain}/nmx/v1/gpus").json()}
    return [ids[uuid] for uuid in GPUS[node]]


def finished(sim, answer: requests.Response) -> dict:
    """The operation a 202 answered with, polled at its Location until it has ended."""
    assert answer.status_code == 202, answer.text
    location = answer.headers["Location"]
    assert location.endswith("/nmx/v1/operations/" + answer.json()["operationId"])
    for _ in range(200):
        operation = sim.get(location).json()
        if operation["Status"] not in ("pending", "in-progress"):
            return operation
        time.sleep(0.05)
    raise AssertionError(f"operation {location} never ended")


def create(sim, name: str, members: list[str], api: str = R01) -> dict:
    operation = finished(sim, sim.post(f"{api}/partitions", json={"Name": name, "Members": members}))
    assert operation["Status"] == "completed", operation
    return operation["Result"]["Data"]


def memberships(sim, api: str = R01) -> dict[str, list[str]]:
    return {p["Name"]: p["Members"] for p in sim.get(f"{api}/partitions").json()}


def test_the_gpus_of_each_domain_are_listed_with_their_ids_and_uuids(sim):
    gpus = sim.get(f"{R01}/gpus").json()
    assert [gpu["Description"] for gpu in gpus] == [uuid for n in range(1, 9) for uuid in GPUS[f"node-{n:03d}"]]
    assert len({gpu["ID"] for gpu in gpus}) == 64
    first = gpus[0]
    assert first["DomainUUID"] and first["DeviceUID"] and "PartitionID" not in first
    assert sim.get(f"{R01}/gpus/{first['ID']}").json() == first
    assert len(sim.get("/nvlink-domains/r02/nmx/v1/gpus").json()) == 16
    assert sim.get(f"{R01}/partitions").json() == []


def test_unknown_domains_and_objects_are_404_and_every_call_needs_the_operator(sim):
    for path in (
        "/nvlink-domains/r99/nmx/v1/gpus",
        f"{R01}/gpus/nope",
        f"{R01}/partitions/nope",
        f"{R01}/operations/nope",
    ):
        r = sim.get(path)
        assert r.status_code == 404 and "detail" in r.json(), path
    assert sim.request("PUT", f"{R01}/partitions/nope", json={"Members": []}).status_code == 404
    assert sim.delete(f"{R01}/partitions/nope").status_code == 404
    assert sim.get(f"{R01}/partitions", auth=("root", "wrong")).status_code == 401
    assert sim.get(f"{R01}/partitions", auth=None).status_code == 401


def test_a_partition_is_created_by_an_operation_and_its_gpus_are_its_members(sim):
    members = gpu_ids(sim, "node-001")
    answer = sim.post(f"{R01}/partitions", json={"Name": "gpufleet-r1", "Members": members})
    operation = finished(sim, answer)
    assert operation["Status"] == "completed"
    assert operation["Request"] == {
        "Method": "post",
        "URI": "/nmx/v1/partitions",
        "Body": {"Name": "gpufleet-r1", "Members": members},
        "Cancellable": False,
    }
    partition = sim.get(f"{R01}/partitions/{operation['Result']['Data']['ID']}").json()
    assert (partition["Name"], partition["Members"], partition["Type"]) == ("gpufleet-r1", members, "ID_BASED")
    assert 1 <= partition["PartitionID"] <= 32765
    assert sim.get(f"{R01}/gpus/{members[0]}").json()["PartitionID"] == partition["PartitionID"]
    assert operation["ID"] in [op["ID"] for op in sim.get(f"{R01}/operations").json()]


def test_a_gpu_belongs_to_one_partition_at_most(sim):
    node1 = gpu_ids(sim, "node-001")
    create(sim, "gpufleet-r1", node1)
    taken = sim.post(f"{R01}/partitions", json={"Name": "gpufleet-r2", "Members": node1[:1]})
    assert taken.status_code == 409 and node1[0] in taken.json()["detail"]
    other = create(sim, "gpufleet-r2", gpu_ids(sim, "node-002"))
    joined = sim.request("PUT", f"{R01}/partitions/{other['ID']}", json={"Members": node1[:1]})
    assert joined.status_code == 409
    assert sim.post(f"{R01}/partitions", json={"Name": "gpufleet-r1", "Members": []}).status_code == 409
    assert memberships(sim) == {"gpufleet-r1": node1, "gpufleet-r2": gpu_ids(sim, "node-002")}


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"Members": []},
        {"Name": "", "Members": []},
        {"Name": "x" * 256, "Members": []},
        {"Name": "p", "Members": "GPU-1"},
        {"Name": "p", "Members": ["nope"]},
        {"Name": "p", "Members": [{"ChassisID": 1, "SlotID": 1, "HostID": 1, "DeviceID": 1}]},
    ],
)
def test_a_partition_that_cannot_be_is_refused_with_400(sim, body):
    r = sim.post(f"{R01}/partitions", json=body)
    assert r.status_code == 400 and r.json()["detail"], r.text
    assert sim.get(f"{R01}/partitions").json() == []


def test_a_gpu_of_another_domain_is_refused(sim):
    r = sim.post(f"{R01}/partitions", json={"Name": "p", "Members": gpu_ids(sim, "node-009")})
    assert r.status_code == 400


def test_members_are_replaced_by_put_and_freed_by_delete(sim):
    node1, node2 = gpu_ids(sim, "node-001"), gpu_ids(sim, "node-002")
    partition = create(sim, "gpufleet-r1", node1)
    path = f"{R01}/partitions/{partition['ID']}"
    assert finished(sim, sim.request("PUT", path, json={"Members": node1[:4] + node2}))["Status"] == "completed"
    assert memberships(sim) == {"gpufleet-r1": node1[:4] + node2}
    assert finished(sim, sim.request("PUT", path, json={"Members": []}))["Status"] == "completed"
    assert memberships(sim) == {"gpufleet-r1": []}
    assert finished(sim, sim.delete(path))["Status"] == "completed"
    assert memberships(sim) == {}
    assert "PartitionID" not in sim.get(f"{R01}/gpus/{node1[0]}").json()


def test_api_down_answers_503_to_every_call(sim):
    partition = create(sim, "gpufleet-r1", gpu_ids(sim, "node-001"))
    assert sim.post("/bmcsim/v1/faults", json={"kind": "fabric_api_down", "fabric": "nvlink"}).status_code == 201
    for method, path in (("GET", "/gpus"), ("GET", "/partitions"), ("DELETE", f"/partitions/{partition['ID']}")):
        assert sim.request(method, R01 + path).status_code == 503
    assert sim.get("/switches/p1-leaf1/nvue_v1/revision").status_code != 503  # only NVLink's API is down
    assert sim.delete("/bmcsim/v1/faults?fabric=nvlink").status_code == 200
    assert memberships(sim) == {"gpufleet-r1": gpu_ids(sim, "node-001")}


def test_apply_fails_accepts_changes_whose_operations_fail_and_reads_still_work(sim):
    node1 = gpu_ids(sim, "node-001")
    partition = create(sim, "gpufleet-r1", node1)
    assert sim.post("/bmcsim/v1/faults", json={"kind": "fabric_apply_fails", "fabric": "nvlink"}).status_code == 201
    path = f"{R01}/partitions/{partition['ID']}"
    for answer in (
        sim.post(f"{R01}/partitions", json={"Name": "gpufleet-r2", "Members": gpu_ids(sim, "node-002")}),
        sim.request("PUT", path, json={"Members": []}),
        sim.delete(path),
    ):
        operation = finished(sim, answer)
        assert operation["Status"] == "failed"
        assert operation["Result"]["Error"] and "fabric_apply_fails" in operation["Result"]["Details"]
    assert memberships(sim) == {"gpufleet-r1": node1}
    assert sim.delete("/bmcsim/v1/faults").status_code == 200
    assert finished(sim, sim.request("PUT", path, json={"Members": []}))["Status"] == "completed"


def test_drift_moves_a_nodes_gpus_by_hand_into_a_named_or_another_partition(sim):
    node1, node2 = gpu_ids(sim, "node-001"), gpu_ids(sim, "node-002")
    create(sim, "gpufleet-r1", node1)
    create(sim, "gpufleet-r2", node2)
    drift = {"kind": "fabric_drift", "fabric": "nvlink", "node": "node-001", "segment": "gpufleet-r9"}
    moved = sim.post("/bmcsim/v1/faults", json=drift).json()
    assert (moved["from"], moved["to"], moved["port"]) == ("gpufleet-r1", "gpufleet-r9", ",".join(GPUS["node-001"]))
    assert memberships(sim) == {"gpufleet-r1": [], "gpufleet-r2": node2, "gpufleet-r9": node1}
    moved = sim.post("/bmcsim/v1/faults", json={"kind": "fabric_drift", "fabric": "nvlink", "node": "node-001"}).json()
    assert (moved["from"], moved["to"]) == ("gpufleet-r9", "gpufleet-r1")  # another partition of the domain
    assert memberships(sim)["gpufleet-r1"] == node1
    assert sim.get("/bmcsim/v1/faults").json()["faults"] == []  # an act, not a standing fault


def test_partitions_and_operations_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    sim = start_bmcsim(data, nodes=NODES)
    try:
        members = gpu_ids(sim, "node-009")
        partition = create(sim, "gpufleet-r7", members, api="/nvlink-domains/r02/nmx/v1")
        operations = sim.get("/nvlink-domains/r02/nmx/v1/operations").json()
    finally:
        sim.stop()
    sim = start_bmcsim(data, nodes=NODES)
    try:
        api = "/nvlink-domains/r02/nmx/v1"
        assert sim.get(f"{api}/partitions/{partition['ID']}").json() == partition
        assert sim.get(f"{api}/operations").json() == operations
        assert sim.get(f"{api}/gpus/{members[0]}").json()["PartitionID"] == partition["PartitionID"]
    finally:
        sim.stop()


def test_at_a_time_scale_above_zero_an_operation_is_pending_until_due_and_slow_is_slow(tmp_path):
    scale = 0.5
    sim = start_bmcsim(tmp_path / "data", nodes=NODES, scale=str(scale))
    try:
        answer = sim.post(f"{R01}/partitions", json={"Name": "gpufleet-r1", "Members": gpu_ids(sim, "node-001")})
        assert sim.get(answer.headers["Location"]).json()["Status"] == "pending"
        assert sim.get(f"{R01}/partitions").json() == []
        time.sleep(APPLY_S * scale)
        assert sim.get(answer.headers["Location"]).json()["Status"] == "completed"
        assert memberships(sim) == {"gpufleet-r1": gpu_ids(sim, "node-001")}
        assert sim.post("/bmcsim/v1/faults", json={"kind": "fabric_slow", "fabric": "nvlink"}).status_code == 201
        began = time.monotonic()
        sim.get(f"{R01}/partitions")
        assert time.monotonic() - began >= SLOW_S * scale
    finally:
        sim.stop()


def test_the_state_round_trips_and_places_each_gpu_on_its_hosts_slot():
    """The state class alone: what dump() gives restore() comes back the same, a queued operation
    included, and with each node's GPUs given, a GPU's LocationInfo names its node's slot."""
    hosts = {node: GPUS[node] for node in ("node-009", "node-010")}
    nmx = NmxManager("r02", tuple(uuid for gpus in hosts.values() for uuid in gpus), hosts=hosts)
    members = [nmx.gpu_ids[uuid] for uuid in GPUS["node-010"]]
    nmx.create({"Name": "gpufleet-r1", "Members": members}, now=1000.0, delay=0.0, failure=None)
    nmx.settle(1000.0)
    queued = nmx.delete(next(iter(nmx.partitions)), now=1001.0, delay=5.0, failure=None)
    again = NmxManager("r02", nmx.gpus, hosts=hosts)
    again.restore(json.loads(json.dumps(nmx.dump())))
    assert again.dump() == nmx.dump()
    assert again.operations[queued["ID"]]["Status"] == "pending"
    third = again.gpu(members[2])
    assert third is not None and (third["LocationInfo"]["SlotID"], third["DeviceID"]) == (2, 3)
    assert again.partition_of(GPUS["node-010"][0]) == "gpufleet-r1"
    assert again.settle(1006.0) and again.partition_of(GPUS["node-010"][0]) is None
