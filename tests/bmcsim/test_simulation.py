"""Simulated durations scale with SIM_TIME_SCALE, and a topology file shapes the fleet."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from core.topology import default_layout
from tests.support.bmcsim import start_bmcsim

SCALE = 0.05  # power on 0.1 s, boot 0.4 s, secure erase 1 s, GPU wipe 0.5 s


def wait_for(predicate, timeout: float = 5.0) -> float:
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout, "condition not reached in time"
        time.sleep(0.02)
    return time.monotonic() - started


@pytest.mark.timing
def test_power_boot_erase_and_wipe_take_scaled_time(tmp_path):
    sim = start_bmcsim(tmp_path / "data", nodes=1, scale=str(SCALE))
    try:
        system = "/redfish/v1/Systems/node-001"
        sim.boot_with_config_drive("node-001")
        wait_for(lambda: sim.get(system).json()["PowerState"] == "On")
        sim.reset("node-001", "GracefulShutdown")
        assert sim.get(system).json()["PowerState"] == "PoweringOff"
        wait_for(lambda: sim.get(system).json()["PowerState"] == "Off")

        sim.reset("node-001", "On")
        first = sim.get(system).json()
        assert first["PowerState"] == "PoweringOn"
        booting = sim.get("/agent/node-001/metrics")  # firmware, then the OS, before the agent
        assert booting.status_code == 503 and booting.json()["detail"] == "node-001 is still booting"
        booted = wait_for(lambda: sim.get("/agent/node-001/metrics").status_code == 200)
        assert 0.2 < booted < 2.0
        assert sim.get(system).json()["BootProgress"]["LastState"] == "OSRunning"

        monitor = sim.post(f"{system}/Storage/1/Drives/0/Actions/Drive.SecureErase").headers["Location"]
        running = sim.get(monitor)
        assert running.status_code == 202 and running.json()["TaskState"] == "Running"
        assert sim.get(f"{system}/Storage/1/Drives/0").json()["Status"]["State"] == "Updating"
        erased = wait_for(lambda: sim.get(monitor).status_code == 200)
        assert 0.5 < erased < 3.0 and sim.get(monitor).json()["TaskState"] == "Completed"

        assert sim.post("/agent/node-001/gpu-wipe").status_code == 202
        assert sim.get("/agent/node-001/gpu-wipe").json()["state"] == "running"
        wait_for(lambda: sim.get("/agent/node-001/gpu-wipe").json()["state"] == "succeeded")
    finally:
        sim.stop()


def test_a_topology_file_shapes_the_fleet(tmp_path):
    topology = tmp_path / "topology.json"
    topology.write_text(json.dumps({"nodes": 12, "pods": 3, "nodes_per_rack": 4, "gpus_per_node": 4}))
    sim = start_bmcsim(tmp_path / "data", args=("--topology", str(topology)))
    try:
        nodes = sim.get("/bmcsim/v1/inventory").json()["nodes"]
        layout = default_layout(12, nodes_per_rack=4, pod_count=3, gpus_per_node=4)
        assert [(n["name"], n["pod"], n["rack"]) for n in nodes] == [(s.name, s.pod, s.rack) for s in layout]
        assert {len(n["gpus"]) for n in nodes} == {4}
        assert len(sim.get("/redfish/v1/Systems").json()["Members"]) == 12
    finally:
        sim.stop()


@pytest.mark.scale
def test_ten_thousand_nodes_fit_in_under_500_mb(tmp_path):
    sim = start_bmcsim(tmp_path / "data", nodes=10_000)
    try:
        sim.boot_with_config_drive("node-00001")
        system = sim.get("/redfish/v1/Systems/node-10000").json()
        assert system["SerialNumber"] == default_layout(10_000)[-1].serial
        assert len(sim.get("/bmcsim/v1/inventory").json()["nodes"]) == 10_000
        assert sim.get("/agent/node-00001/metrics").status_code == 200
        rss_kb = next(
            int(line.split()[1])
            for line in Path(f"/proc/{sim.process.popen.pid}/status").read_text().splitlines()
            if line.startswith("VmRSS:")
        )
        assert rss_kb < 500 * 1024
    finally:
        sim.stop()
