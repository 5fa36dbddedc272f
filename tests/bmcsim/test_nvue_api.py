"""bmcsim's NVUE, one per leaf switch, over HTTP as Cumulus Linux's NVUE REST API answers:
revisions created, patched and applied, the applied config read back; every port starts an
access port of the provisioning VLAN. The session's fleet is one leaf, p1-leaf1, with swp1-4.
The state class's own rules (invalid configs, concurrent revisions, time) are tested on it directly."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from bmcsim.fabric_managers.nvue import MAX_REVISIONS, NvueError, NvueSwitch
from core.topology import PROVISIONING_VLAN
from tests.support.bmcsim import FLEET_NODES, start_bmcsim

NVUE = "/switches/p1-leaf1/nvue_v1"
PORTS = tuple(f"swp{n}" for n in range(1, FLEET_NODES + 1))
APPLY = {"state": "apply", "auto-prompt": {"ays": "ays_yes"}}


def access(vlan: int) -> dict:
    return {"bridge": {"domain": {"br_default": {"access": vlan}}}}


def vlans(carried: dict) -> dict:
    return {"bridge": {"domain": {"br_default": {"vlan": carried}}}}


def revision(sim, nvue: str = NVUE) -> str:
    """A new revision's id, escaped for a URL as a client must (it holds slashes)."""
    created = sim.post(f"{nvue}/revision")
    assert created.status_code == 201, created.text
    (rev,) = created.json()
    assert created.json()[rev]["state"] == "pending"
    return quote(rev, safe="")


def change(sim, patch: dict, nvue: str = NVUE) -> dict:
    """Stage `patch` in a new revision, apply it and return the revision as it settled."""
    rev = revision(sim, nvue)
    staged = sim.patch(f"{nvue}/?rev={rev}", json=patch)
    assert staged.status_code == 200, staged.text
    applying = sim.patch(f"{nvue}/revision/{rev}", json=APPLY)
    assert applying.status_code == 200, applying.text
    assert applying.json()["state"] == "apply"
    return sim.get(f"{nvue}/revision/{rev}").json()


def applied_access(sim, nvue: str = NVUE) -> dict[str, int]:
    interfaces = sim.get(f"{nvue}/interface?rev=applied").json()
    return {port: value["bridge"]["domain"]["br_default"]["access"] for port, value in interfaces.items()}


def fault(sim, **body) -> dict:
    response = sim.post("/bmcsim/v1/faults", json=body)
    assert response.status_code == 201, response.text
    return response.json()


@pytest.fixture
def nvue(bmcsim):
    """The session's bmcsim; afterwards every port is back on the provisioning VLAN, the only one carried."""
    yield bmcsim
    assert bmcsim.delete("/bmcsim/v1/faults").status_code == 200
    carried = bmcsim.get(f"{NVUE}/bridge/domain/br_default").json()["vlan"]
    patch = {
        **vlans({vlan: None for vlan in carried if vlan != str(PROVISIONING_VLAN)}),
        "interface": {port: access(PROVISIONING_VLAN) for port in PORTS},
    }
    assert change(bmcsim, patch)["state"] == "applied"


def test_every_port_starts_an_access_port_of_the_provisioning_vlan(nvue):
    assert applied_access(nvue) == dict.fromkeys(PORTS, PROVISIONING_VLAN)
    assert nvue.get(f"{NVUE}/bridge/domain/br_default").json() == {"vlan": {str(PROVISIONING_VLAN): {}}}
    assert nvue.get(f"{NVUE}/interface/swp1").json() == {"type": "swp", **access(PROVISIONING_VLAN)}
    root = nvue.get(f"{NVUE}/?rev=applied").json()
    assert set(root) == {"bridge", "interface"}


def test_a_revision_applied_moves_ports_and_maps_the_vlan_to_its_vni(nvue):
    settled = change(
        nvue, {**vlans({"1001": {"vni": {"5001": {}}}}), "interface": {"swp1": access(1001), "swp2": access(1001)}}
    )
    assert settled == {"state": "applied", "transition": {"issue": {}, "progress": "Config update complete"}}
    assert applied_access(nvue) == {"swp1": 1001, "swp2": 1001, "swp3": 10, "swp4": 10}
    assert nvue.get(f"{NVUE}/bridge/domain/br_default").json()["vlan"]["1001"] == {"vni": {"5001": {}}}


def test_a_pending_revision_shows_its_changes_and_the_applied_config_does_not(nvue):
    rev = revision(nvue)
    staged = nvue.patch(f"{NVUE}/interface/swp3?rev={rev}", json=access(PROVISIONING_VLAN + 1))
    assert staged.status_code == 200 and staged.json()["bridge"]["domain"]["br_default"]["access"] == 11
    # A targeted patch of the bridge domain, as the NVUE guide shows it.
    assert nvue.patch(f"{NVUE}/bridge/domain/br_default?rev={rev}", json={"vlan": {"11": {}}}).status_code == 200
    assert nvue.get(f"{NVUE}/interface/swp3?rev={rev}").json() == {"type": "swp", **access(11)}
    assert applied_access(nvue)["swp3"] == PROVISIONING_VLAN
    listed = nvue.get(f"{NVUE}/revision").json()
    assert [state["state"] for state in listed.values()][-1] == "pending"


def test_an_access_vlan_the_bridge_does_not_carry_is_an_invalid_revision(nvue):
    settled = change(nvue, {"interface": {"swp1": access(2001)}})
    assert settled["state"] == "invalid"
    (issue,) = settled["transition"]["issue"].values()
    assert issue["severity"] == "error" and "access VLAN 2001" in issue["message"]
    assert applied_access(nvue)["swp1"] == PROVISIONING_VLAN


@pytest.mark.parametrize(
    ("path", "body", "words"),
    [
        ("/", {"system": {"hostname": "x"}}, "additional properties"),
        ("/interface", {"swp99": access(1001)}, "no such port"),
        ("/interface/swp1", {"bridge": {"domain": {"br_default": {"access": 5000}}}}, "not a VLAN"),
        ("/bridge/domain/br_default", {"vlan": {"1001": {"vni": {"0": {}}}}}, "not a VNI"),
        ("/bridge/domain/br_other", {"vlan": {"1001": {}}}, "additional properties"),
    ],
)
def test_a_change_outside_the_schema_is_refused_with_nvues_words(nvue, path, body, words):
    rev = revision(nvue)
    refused = nvue.patch(f"{NVUE}{path}?rev={rev}", json=body)
    assert refused.status_code == 400
    assert refused.json()["status"] == 400 and words in refused.json()["detail"]


def test_changes_need_a_pending_revision_and_unknown_names_are_404(nvue):
    assert nvue.patch(f"{NVUE}/", json={}).status_code == 400  # no ?rev=
    assert nvue.patch(f"{NVUE}/?rev=changeset%2Fnobody%2Fx", json={}).status_code == 404
    assert nvue.get(f"{NVUE}/revision/changeset%2Fnobody%2Fx").status_code == 404
    assert nvue.get(f"{NVUE}/interface/swp99").status_code == 404
    missing = nvue.get("/switches/p9-leaf9/nvue_v1/interface")
    assert missing.status_code == 404 and "p9-leaf9" in missing.json()["detail"]
    rev = revision(nvue)
    assert nvue.patch(f"{NVUE}/revision/{rev}", json={"state": "save"}).status_code == 400
    assert nvue.patch(f"{NVUE}/revision/{rev}", json=APPLY).status_code == 200
    assert nvue.patch(f"{NVUE}/revision/{rev}", json=APPLY).status_code == 400  # applied already
    assert nvue.patch(f"{NVUE}/?rev={rev}", json={}).status_code == 400


def test_every_call_needs_the_operators_credential(nvue):
    assert nvue.get(f"{NVUE}/interface", auth=None).status_code == 401
    assert nvue.post(f"{NVUE}/revision", auth=("root", "wrong")).status_code == 401


def test_api_down_answers_503_to_every_call(nvue):
    fault(nvue, kind="fabric_api_down", fabric="ethernet")
    assert nvue.get(f"{NVUE}/interface").status_code == 503
    assert nvue.post(f"{NVUE}/revision").status_code == 503
    fault(nvue, kind="fabric_api_down", fabric="infiniband")  # another fabric's fault is not NVUE's
    assert nvue.delete("/bmcsim/v1/faults?fabric=ethernet").status_code == 200
    assert nvue.get(f"{NVUE}/interface").status_code == 200


def test_apply_fails_ends_every_revision_in_apply_error_and_reads_still_work(nvue):
    fault(nvue, kind="fabric_apply_fails", fabric="ethernet")
    settled = change(nvue, {**vlans({"1001": {}}), "interface": {"swp1": access(1001)}})
    assert settled["state"] == "apply_error"
    assert [issue["message"] for issue in settled["transition"]["issue"].values()]
    assert applied_access(nvue)["swp1"] == PROVISIONING_VLAN
    assert nvue.delete("/bmcsim/v1/faults?fabric=ethernet").status_code == 200
    assert change(nvue, {**vlans({"1001": {}}), "interface": {"swp1": access(1001)}})["state"] == "applied"


def test_slow_still_answers(nvue):
    fault(nvue, kind="fabric_slow", fabric="ethernet")  # SLOW_S times the time scale: 0 here
    assert change(nvue, {**vlans({"1001": {}}), "interface": {"swp2": access(1001)}})["state"] == "applied"


def test_drift_moves_a_port_by_hand_without_a_revision(nvue):
    revisions = nvue.get(f"{NVUE}/revision").json()
    moved = fault(nvue, kind="fabric_drift", fabric="ethernet", node="node-001", segment="1001")
    assert (moved["port"], moved["from"], moved["to"]) == ("swp1", "10", "1001")
    assert applied_access(nvue)["swp1"] == 1001
    assert "1001" in nvue.get(f"{NVUE}/bridge/domain/br_default").json()["vlan"]
    assert nvue.get(f"{NVUE}/revision").json() == revisions
    # Without a segment: into the VLAN another port carries for a tenant.
    moved = fault(nvue, kind="fabric_drift", fabric="ethernet", node="node-002")
    assert (moved["port"], moved["to"]) == ("swp2", "1001")


def test_changes_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    sim = start_bmcsim(data, nodes=FLEET_NODES)
    try:
        assert (
            change(sim, {**vlans({"1001": {"vni": {"5001": {}}}}), "interface": {"swp4": access(1001)}})["state"]
            == "applied"
        )
        pending = revision(sim)
    finally:
        sim.stop()
    sim = start_bmcsim(data, nodes=FLEET_NODES)
    try:
        assert applied_access(sim)["swp4"] == 1001
        assert sim.get(f"{NVUE}/bridge/domain/br_default").json()["vlan"]["1001"] == {"vni": {"5001": {}}}
        assert sim.get(f"{NVUE}/revision/{pending}").json()["state"] == "pending"
        assert quote(revision(sim), safe="") != pending  # ids are not reused
    finally:
        sim.stop()


# -- the state class, directly -------------------------------------------------------------------

SWITCH_PORTS = ("swp1", "swp2", "swp3")


def staged(switch: NvueSwitch, patch: dict, now: float = 0.0) -> str:
    rev = switch.create_revision("cumulus", now)
    switch.stage(rev, patch)
    return rev


def test_a_revision_applies_after_its_delay_and_not_before():
    switch = NvueSwitch("leaf", SWITCH_PORTS)
    rev = staged(switch, {**vlans({"20": {}}), "interface": {"swp1": access(20)}})
    switch.apply(rev, now=100.0, delay=2.0, fails=False)
    assert not switch.settle(101.0)
    assert switch.revision(rev)["state"] == "applying" and switch.access_vlan("swp1") == PROVISIONING_VLAN
    assert switch.settle(102.0)
    assert switch.revision(rev)["state"] == "applied" and switch.access_vlan("swp1") == 20


def test_two_revisions_staged_side_by_side_keep_each_others_changes():
    switch = NvueSwitch("leaf", SWITCH_PORTS)
    first = staged(switch, {**vlans({"20": {}}), "interface": {"swp1": access(20)}})
    second = staged(switch, {**vlans({"30": {"vni": {"30030": {}}}}), "interface": {"swp2": access(30)}})
    switch.apply(first, 0.0, 0.0, False)
    switch.apply(second, 0.0, 0.0, False)
    switch.settle(0.0)
    assert [switch.access_vlan(port) for port in SWITCH_PORTS] == [20, 30, PROVISIONING_VLAN]
    assert (switch.vni(20), switch.vni(30)) == (None, 30030)


def test_a_vni_mapped_from_two_vlans_is_invalid():
    switch = NvueSwitch("leaf", SWITCH_PORTS)
    rev = staged(switch, vlans({"20": {"vni": {"5000": {}}}, "30": {"vni": {"5000": {}}}}))
    switch.apply(rev, 0.0, 0.0, False)
    switch.settle(0.0)
    assert switch.revision(rev)["state"] == "invalid"
    assert "VNI 5000" in next(iter(switch.revision(rev)["transition"]["issue"].values()))["message"]


def test_null_unsets_a_vlan_and_a_port_left_in_no_bridge_has_no_access_vlan():
    switch = NvueSwitch("leaf", SWITCH_PORTS)
    rev = staged(switch, {"interface": {"swp3": {"bridge": None}}})
    switch.apply(rev, 0.0, 0.0, False)
    switch.settle(0.0)
    assert switch.access_vlan("swp3") is None


def test_dump_and_restore_round_trip():
    switch = NvueSwitch("leaf", SWITCH_PORTS)
    applied = staged(switch, {**vlans({"20": {"vni": {"20020": {}}}}), "interface": {"swp1": access(20)}})
    switch.apply(applied, 0.0, 0.0, False)
    switch.settle(0.0)
    pending = staged(switch, {"interface": {"swp2": access(20)}})
    again = NvueSwitch("leaf", SWITCH_PORTS)
    again.restore(json.loads(json.dumps(switch.dump())))  # as the store keeps it
    assert again.dump() == switch.dump()
    assert (again.access_vlan("swp1"), again.vni(20)) == (20, 20020)
    assert again.revision(pending)["state"] == "pending"
    assert again.create_revision("cumulus", 0.0) not in switch.revisions


def test_old_settled_revisions_are_forgotten_first():
    switch = NvueSwitch("leaf", SWITCH_PORTS)
    first = switch.create_revision("cumulus", 0.0)
    settled = []
    for _ in range(MAX_REVISIONS):
        settled.append(staged(switch, {}))
        switch.apply(settled[-1], 0.0, 0.0, False)
        switch.settle(0.0)
    assert len(switch.revisions) == MAX_REVISIONS
    assert first in switch.revisions and settled[0] not in switch.revisions and settled[1] in switch.revisions


def test_drift_without_a_tenant_vlan_around_picks_one_of_its_own():
    switch = NvueSwitch("leaf", SWITCH_PORTS)
    assert switch.drift("swp2", None) == {"port": "swp2", "from": "10", "to": "3999"}
    assert switch.drift("swp3", None)["to"] == "3999"  # now a VLAN another port carries
    with pytest.raises(NvueError):
        switch.drift("swp9", "20")
