"""bmcsim's UFM, one per InfiniBand fabric (pod), over HTTP as UFM Enterprise's REST API answers:
partitions by P_Key, their GUIDs full or limited members; every GUID starts a limited member of
the default partition 0x7fff only. The session's fleet is one pod, p1, of FLEET_NODES nodes."""

from __future__ import annotations

import time

import pytest

from bmcsim.fabric_managers import SLOW_S
from bmcsim.fabric_managers.ufm import UfmError, UfmManager
from core.topology import default_layout, network_ports
from tests.support.bmcsim import FLEET_NODES, start_bmcsim

UFM = "/pods/p1/ufmRest"
PKEYS = f"{UFM}/resources/pkeys"
PORTS = network_ports(default_layout(FLEET_NODES))
NODE1, NODE2 = PORTS["node-001"].hca_guids, PORTS["node-002"].hca_guids
EVERY_GUID = [guid for ports in PORTS.values() for guid in ports.hca_guids]


@pytest.fixture
def ufm(bmcsim):
    """The session's bmcsim; afterwards every partition but the default one is gone again."""
    yield bmcsim
    assert bmcsim.delete("/bmcsim/v1/faults").status_code == 200
    for pkey in bmcsim.get(PKEYS).json():
        if pkey != "0x7fff":
            assert bmcsim.delete(f"{PKEYS}/{pkey}").status_code == 200


def fault(sim, **body) -> None:
    response = sim.post("/bmcsim/v1/faults", json=body)
    assert response.status_code == 201, response.text


def add(sim, pkey: str, guids, **options):
    return sim.post(PKEYS, json={"pkey": pkey, "guids": list(guids), **options})


def members(sim, pkey: str) -> dict[str, str]:
    return {m["guid"]: m["membership"] for m in sim.get(f"{PKEYS}/{pkey}?guids_data=true").json()["guids"]}


def test_every_guid_starts_a_limited_member_of_the_default_partition_only(ufm):
    listing = ufm.get(PKEYS).json()
    assert listing == {"0x7fff": {"partition": "management", "ip_over_ib": True}}
    with_guids = ufm.get(f"{PKEYS}?guids_data=true").json()
    assert [m["guid"] for m in with_guids["0x7fff"]["guids"]] == EVERY_GUID
    assert {(m["membership"], m["index0"]) for m in with_guids["0x7fff"]["guids"]} == {("limited", False)}


def test_guids_added_to_a_pkey_read_back_as_full_members_and_leave_it(ufm):
    r = add(ufm, "0x0a12", NODE1, membership="full", index0=False, ip_over_ib=True)
    assert r.status_code == 200, r.text
    assert ufm.get(f"{PKEYS}/0x0a12").json() == {"partition": "api_pkey_0x0a12", "ip_over_ib": True}
    assert members(ufm, "0x0a12") == dict.fromkeys(NODE1, "full")
    assert members(ufm, "0xa12") == members(ufm, "0x0A12")  # any spelling of the same P_Key
    assert members(ufm, "0x7fff")[NODE1[0]] == "limited"  # still in the default partition

    add(ufm, "0x0a12", ["0x" + NODE2[0].upper()], membership="limited")  # as UFM's guide allows
    assert members(ufm, "0x0a12")[NODE2[0]] == "limited"

    r = ufm.post(f"{UFM}/actions/remove_guids_from_pkey", json={"pkey": "0x0a12", "guids": list(NODE1)})
    assert r.status_code == 200, r.text
    assert members(ufm, "0x0a12") == {NODE2[0]: "limited"}
    assert ufm.delete(f"{PKEYS}/0x0a12").status_code == 200
    assert ufm.get(f"{PKEYS}/0x0a12?guids_data=true").json() == {}  # UFM's answer for no such P_Key
    assert list(ufm.get(PKEYS).json()) == ["0x7fff"]


@pytest.mark.parametrize(
    "body, words",
    [
        ({"pkey": "0x7fff", "guids": [NODE1[0]]}, "between 0x0 and 0x7fff exclusive"),
        ({"pkey": "0x0", "guids": [NODE1[0]]}, "between 0x0 and 0x7fff exclusive"),
        ({"pkey": "12", "guids": [NODE1[0]]}, "invalid pkey"),
        ({"pkey": "0x12", "guids": []}, "non-empty list"),
        ({"pkey": "0x12", "guids": ["b8cef603"]}, "invalid guid"),
        ({"pkey": "0x12", "guids": [NODE1[0]], "membership": "both"}, "invalid membership"),
        ({"pkey": "0x12", "guids": [NODE1[0]], "index0": "no"}, "must be true or false"),
        (["0x12"], "JSON object"),
    ],
)
def test_a_change_ufm_would_refuse_is_refused_with_its_words(ufm, body, words):
    r = ufm.post(PKEYS, json=body)
    assert r.status_code == 400 and words in r.json()["error"], r.text
    assert list(ufm.get(PKEYS).json()) == ["0x7fff"]


def test_a_missing_partition_an_unknown_fabric_and_a_stranger_are_told_so(ufm):
    assert ufm.delete(f"{PKEYS}/0x0042").status_code == 404
    r = ufm.post(f"{UFM}/actions/remove_guids_from_pkey", json={"pkey": "0x0042", "guids": [NODE1[0]]})
    assert (r.status_code, r.json()) == (404, {"error": "pkey 0x0042 does not exist"})
    assert ufm.delete(f"{PKEYS}/0x7fff").status_code == 400  # the default partition stays
    r = ufm.get("/pods/p9/ufmRest/resources/pkeys")
    assert (r.status_code, r.json()) == (404, {"detail": "no InfiniBand fabric named 'p9'"})
    assert ufm.get(PKEYS, auth=("root", "wrong")).status_code == 401
    assert ufm.get(PKEYS, auth=None).status_code == 401


def test_when_the_api_is_down_every_call_answers_503(ufm):
    fault(ufm, kind="fabric_api_down", fabric="infiniband")
    assert ufm.get(PKEYS).status_code == 503
    assert add(ufm, "0x0a12", NODE1).status_code == 503
    ufm.delete("/bmcsim/v1/faults")
    assert ufm.get(PKEYS).status_code == 200


def test_when_applying_fails_reads_work_and_every_change_is_refused(ufm):
    add(ufm, "0x0a12", NODE1)
    fault(ufm, kind="fabric_apply_fails", fabric="infiniband")
    assert members(ufm, "0x0a12") == dict.fromkeys(NODE1, "full")
    for r in (
        add(ufm, "0x0a13", NODE2),
        ufm.post(f"{UFM}/actions/remove_guids_from_pkey", json={"pkey": "0x0a12", "guids": list(NODE1)}),
        ufm.delete(f"{PKEYS}/0x0a12"),
    ):
        assert r.status_code == 400 and "Failed to update partitions" in r.json()["error"], r.text
    assert list(ufm.get(PKEYS).json()) == ["0x0a12", "0x7fff"]
    assert members(ufm, "0x0a12") == dict.fromkeys(NODE1, "full")


def test_drift_adds_a_nodes_guids_by_hand_as_full_members(ufm):
    r = ufm.post("/bmcsim/v1/faults", json={"kind": "fabric_drift", "fabric": "infiniband", "node": "node-001"})
    assert r.status_code == 201, r.text
    moved = r.json()
    assert (moved["port"], moved["from"]) == (",".join(NODE1), "")
    assert members(ufm, moved["to"]) == dict.fromkeys(NODE1, "full")

    add(ufm, "0x1001", NODE2)  # a tenant's partition, then node-001's GUIDs into it by hand
    r = ufm.post(
        "/bmcsim/v1/faults",
        json={"kind": "fabric_drift", "fabric": "infiniband", "node": "node-001", "segment": "0x1001"},
    )
    assert r.json()["to"] == f"0x1001,{moved['to']}"
    assert members(ufm, "0x1001") == dict.fromkeys((*NODE2, *NODE1), "full")
    assert ufm.get("/bmcsim/v1/faults").json()["faults"] == []  # an act, not a standing fault


def test_drift_joins_the_given_partition_another_tenants_or_one_of_its_own():
    ufm = UfmManager("p1", (*NODE1, *NODE2))
    assert ufm.drift(NODE1, None) == {"port": ",".join(NODE1), "from": "", "to": "0x7ffe"}
    assert ufm.memberships(NODE1[0]) == {0x7FFE: "full", 0x7FFF: "limited"}

    ufm.add_guids({"pkey": "0x1001", "guids": list(NODE2)})  # another tenant's
    assert ufm.drift(NODE1, None) == {"port": ",".join(NODE1), "from": "0x7ffe", "to": "0x1001,0x7ffe"}
    assert ufm.drift(NODE2, "0x7fff")["to"] == "0x1001,0x7fff"  # what UFM's API cannot undo
    assert ufm.full_pkeys(NODE2[0]) == "0x1001,0x7fff"


def test_a_partition_cannot_be_changed_under_its_default_pkey_or_missing():
    ufm = UfmManager("p1", NODE1)
    with pytest.raises(UfmError, match="exclusive"):
        ufm.remove_guids({"pkey": "0x7fff", "guids": [NODE1[0]]})
    with pytest.raises(UfmError) as refused:
        ufm.delete("0x0001")
    assert refused.value.status == 404


def test_partitions_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    sim = start_bmcsim(data, nodes=2)
    try:
        add(sim, "0x0a12", NODE1)
        add(sim, "0x0b00", NODE2[:2], membership="limited", index0=True, ip_over_ib=False)
        before = sim.get(f"{PKEYS}?guids_data=true").json()
    finally:
        sim.stop()
    sim = start_bmcsim(data, nodes=2)
    try:
        assert sim.get(f"{PKEYS}?guids_data=true").json() == before
        assert members(sim, "0x0b00") == dict.fromkeys(NODE2[:2], "limited")
    finally:
        sim.stop()


def test_a_slow_ufm_answers_after_its_delay_in_simulated_time(tmp_path):
    sim = start_bmcsim(tmp_path / "data", nodes=2, scale="0.1")
    try:
        fault(sim, kind="fabric_slow", fabric="infiniband")
        began = time.monotonic()
        assert add(sim, "0x0a12", NODE1).status_code == 200
        assert time.monotonic() - began >= SLOW_S * 0.1
        fault(sim, kind="fabric_slow", fabric="ethernet")  # another fabric's: UFM's reads as fast as ever
        sim.delete("/bmcsim/v1/faults?fabric=infiniband")
        began = time.monotonic()
        assert sim.get(PKEYS).status_code == 200
        assert time.monotonic() - began < SLOW_S * 0.1
    finally:
        sim.stop()
