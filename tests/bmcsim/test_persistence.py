"""State under the data directory survives a restart, and a kill after the debounced write."""

from __future__ import annotations

import time

from tests.support.bmcsim import start_bmcsim


def test_state_and_keys_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    sim = start_bmcsim(data, nodes=2)
    try:
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
        sim.reset("node-002", "ForceRestart")
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
    finally:
        sim.stop()


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
