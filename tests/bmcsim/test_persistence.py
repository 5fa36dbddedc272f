"""State under the data directory survives a restart, and a kill after the debounced write."""

from __future__ import annotations

import time

import pytest

from tests.support.bmcsim import start_bmcsim


def test_state_and_keys_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    sim = start_bmcsim(data, nodes=2)
    system = "/redfish/v1/Systems/node-002"
    try:
        sim.boot_with_config_drive("node-002")  # its agent's credentials are state too
        sim.reset("node-001", "ForceOff")
        sim.patch(
            "/redfish/v1/Systems/node-002",
            json={"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Continuous"}},
        )
        sim.post(
            "/redfish/v1/Managers/node-002/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia",
            json={"Image": "http://127.0.0.1:9/deploy.iso"},
        )
        sim.post("/bmcsim/v1/faults", json={"node": "node-002", "kind": "xid", "gpu": 2, "xid": 94})
        sim.post("/bmcsim/v1/faults", json={"node": "node-002", "kind": "implant"})
        sim.post(
            "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
            json={"ImageURI": "http://127.0.0.1:9/GF-BIOS-2.3.1.bin", "Targets": ["/redfish/v1/Systems/node-002"]},
        )
        # BIOS settings, one applied by the reboot below and one still pending; Secure Boot on.
        sim.patch(f"{system}/Bios/Settings", json={"Attributes": {"ProcTurboMode": "Disabled"}})
        sim.patch(f"{system}/SecureBoot", json={"SecureBootEnable": True})
        sim.post(
            "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
            json={
                "ImageURI": "http://127.0.0.1:9/GF-VBIOS-96.00.74.00.01.bin",
                "Targets": ["/redfish/v1/UpdateService/FirmwareInventory/node-002-GPU1-VBIOS"],
            },
        )
        sim.post("/bmcsim/v1/faults", json={"node": "node-002", "kind": "firmware_tamper", "component": "NIC0"})
        sim.post(
            "/bmcsim/v1/faults", json={"node": "node-002", "kind": "sel", "message_id": "Environmental.1.1.0.FanFailed"}
        )
        sim.reset("node-002", "ForceRestart")
        sim.patch(f"{system}/Bios/Settings", json={"Attributes": {"LogicalProc": "Disabled"}})
        sim.post("/bmcsim/v1/faults", json={"node": "node-002", "kind": "bios_tamper", "attribute": "IommuSupport"})
        inventory = {
            name: sim.get(f"/redfish/v1/UpdateService/FirmwareInventory/node-002-{name}").json()
            for name in ("BIOS", "GPU1-VBIOS", "NIC0")
        }
        sel = sim.get(f"{system}/LogServices/SEL/Entries").json()["Members"]
        monitor = sim.post("/redfish/v1/Systems/node-002/Storage/1/Drives/1/Actions/Drive.SecureErase").headers[
            "Location"
        ]
        roots = sim.get("/bmcsim/v1/roots").json()
        evidence = sim.post("/agent/node-002/evidence", json={"nonce": "aa"}).json()
    finally:
        sim.stop()

    sim = start_bmcsim(data, nodes=2)
    try:
        assert sim.get("/redfish/v1/Systems/node-001").json()["PowerState"] == "Off"
        boot = sim.get("/redfish/v1/Systems/node-002").json()["Boot"]
        assert (boot["BootSourceOverrideTarget"], boot["BootSourceOverrideEnabled"]) == ("Pxe", "Continuous")
        assert sim.get("/redfish/v1/Systems/node-002").json()["BiosVersion"] == "GF-BIOS 2.3.1"
        assert (
            sim.get("/redfish/v1/Managers/node-002/VirtualMedia/Cd").json()["Image"] == "http://127.0.0.1:9/deploy.iso"
        )
        assert {"node": "node-002", "kind": "implant"} in sim.get("/bmcsim/v1/faults").json()["faults"]
        assert 'gpu_agent_gpu_healthy{gpu="2"} 0.0' in sim.get("/agent/node-002/metrics").text
        assert sim.get(monitor).json()["TaskState"] == "Completed"
        assert sim.get("/bmcsim/v1/roots").json() == roots
        again = sim.post("/agent/node-002/evidence", json={"nonce": "aa"}).json()
        assert again["quote"]["ak_cert"] == evidence["quote"]["ak_cert"]
        assert [g["cert_chain"] for g in again["gpus"]] == [g["cert_chain"] for g in evidence["gpus"]]
        assert again["event_log"] == evidence["event_log"]  # the flashed firmware and implanted kernel stay measured
        assert again["gpus"][1]["measurements"] == evidence["gpus"][1]["measurements"]
        for name, before in inventory.items():
            assert sim.get(f"/redfish/v1/UpdateService/FirmwareInventory/node-002-{name}").json() == before
        assert inventory["NIC0"]["Version"].endswith("-custom")
        bios = sim.get(f"{system}/Bios").json()["Attributes"]
        assert (bios["ProcTurboMode"], bios["IommuSupport"], bios["LogicalProc"]) == ("Disabled", "Disabled", "Enabled")
        assert sim.get(f"{system}/Bios/Settings").json()["Attributes"] == {"LogicalProc": "Disabled"}
        secure_boot = sim.get(f"{system}/SecureBoot").json()
        assert (secure_boot["SecureBootEnable"], secure_boot["SecureBootCurrentBoot"]) == (True, "Enabled")
        assert sim.get(f"{system}/LogServices/SEL/Entries").json()["Members"] == sel and len(sel) == 1
        kinds = [f["kind"] for f in sim.get("/bmcsim/v1/faults").json()["faults"] if f["node"] == "node-002"]
        assert kinds == ["xid", "implant", "firmware_tamper", "bios_tamper"]
        # The SEL's ids go on from where they were.
        sim.post(
            "/bmcsim/v1/faults", json={"node": "node-002", "kind": "sel", "message_id": "Environmental.1.1.0.FanFailed"}
        )
        ids = [e["Id"] for e in sim.get(f"{system}/LogServices/SEL/Entries").json()["Members"]]
        assert ids == [sel[0]["Id"], str(int(sel[0]["Id"]) + 1)]
    finally:
        sim.stop()


@pytest.mark.timing
def test_a_change_is_on_disk_soon_after_it_is_made(tmp_path):
    data = tmp_path / "data"
    sim = start_bmcsim(data, nodes=2)
    sim.reset("node-002", "ForceOff")
    time.sleep(1.0)  # longer than the write debounce
    sim.process.kill()  # no chance to write at exit
    sim = start_bmcsim(data, nodes=2)
    try:
        assert sim.get("/redfish/v1/Systems/node-002").json()["PowerState"] == "Off"
    finally:
        sim.stop()
