"""Each simulated node's agent, the real `agent` package on bmcsim's hardware: metrics in
dcgm-exporter's format, GPU wipe, reset and diagnostics, inventory, its token, and when it answers."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.support.bmcsim import Bearer

NODE = "node-002"
DCGM = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_XID_ERRORS",
)


def samples(bmcsim, node: str = NODE) -> list:
    r = bmcsim.get(f"/agent/{node}/metrics")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
    return [s for family in text_string_to_metric_families(r.text) for s in family.samples]


def value(found: list, name: str, **labels) -> float:
    # prometheus_client's parser names the samples of dcgm-exporter's counters (no _total) *_total.
    names = (name, f"{name}_total")
    (match,) = [s.value for s in found if s.name in names and all(s.labels.get(k) == v for k, v in labels.items())]
    return match


def test_metrics_use_dcgm_exporter_names_and_labels_per_gpu(bmcsim):
    found = samples(bmcsim)
    gpus = bmcsim.node(NODE)["gpus"]
    for name in DCGM:
        per_gpu = [s for s in found if s.name == name]
        assert len(per_gpu) == len(gpus), name
        for sample, gpu in zip(per_gpu, gpus, strict=True):
            assert set(sample.labels) == {
                "gpu",
                "UUID",
                "pci_bus_id",
                "device",
                "modelName",
                "Hostname",
                "DCGM_FI_DRIVER_VERSION",
                *(("err_code", "err_msg") if name == "DCGM_FI_DEV_XID_ERRORS" else ()),
            }
            assert (sample.labels["gpu"], sample.labels["UUID"], sample.labels["Hostname"]) == (
                str(gpu["index"]),
                gpu["uuid"],
                NODE,
            )
            assert sample.labels["modelName"] == gpu["model"] and sample.labels["device"] == f"nvidia{gpu['index']}"
    assert all(value(found, "gpu_agent_gpu_healthy", gpu=str(g["index"])) == 1 for g in gpus)
    assert 20 < value(found, "DCGM_FI_DEV_GPU_TEMP", gpu="0") < 60


def test_an_injected_xid_shows_at_once_and_marks_the_gpu_unhealthy(bmcsim):
    r = bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "xid", "gpu": 5, "xid": 79})
    assert r.status_code == 201
    found = samples(bmcsim)
    assert value(found, "gpu_agent_gpu_healthy", gpu="5") == 0
    assert value(found, "gpu_agent_gpu_healthy", gpu="4") == 1
    assert value(found, "DCGM_FI_DEV_XID_ERRORS", gpu="5", err_code="79", err_msg="GPU has fallen off the bus") == 79
    before = value(found, "gpu_agent_xid_errors_total", gpu="5", xid="79")
    assert before >= 1
    bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "xid", "gpu": 5, "xid": 79})
    assert value(samples(bmcsim), "gpu_agent_xid_errors_total", gpu="5", xid="79") == before + 1
    assert bmcsim.get(f"/redfish/v1/Systems/{NODE}/Processors/GPU5").json()["Status"]["Health"] == "Critical"

    bmcsim.delete("/bmcsim/v1/faults", params={"node": NODE})
    found = samples(bmcsim)
    assert value(found, "gpu_agent_gpu_healthy", gpu="5") == 1
    assert value(found, "DCGM_FI_DEV_XID_ERRORS", gpu="5") == 0
    assert value(found, "gpu_agent_xid_errors_total", gpu="5", xid="79") == before + 1  # a counter never goes back


def test_the_agent_answers_only_while_the_node_is_on_and_booted(bmcsim):
    bmcsim.reset(NODE, "ForceOff")
    for path in ("metrics", "inventory", "gpu-wipe"):
        r = bmcsim.get(f"/agent/{NODE}/{path}")
        assert r.status_code == 503 and r.json()["detail"] == f"{NODE} is powered off", path
    assert bmcsim.post(f"/agent/{NODE}/evidence", json={"nonce": "00"}).status_code == 503
    bmcsim.reset(NODE, "On")
    assert bmcsim.get(f"/agent/{NODE}/metrics").status_code == 200
    bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "agent_down"})
    r = bmcsim.get(f"/agent/{NODE}/metrics")
    assert r.status_code == 503 and r.json()["detail"] == f"the agent of {NODE} is down"
    assert bmcsim.get("/agent/node-999/metrics").status_code == 404


def test_gpu_wipe_reports_its_status(bmcsim):
    assert bmcsim.get(f"/agent/{NODE}/gpu-wipe").json()["state"] in ("idle", "succeeded")
    r = bmcsim.post(f"/agent/{NODE}/gpu-wipe")
    assert r.status_code == 202
    status = bmcsim.get(f"/agent/{NODE}/gpu-wipe").json()
    assert status["state"] == "succeeded" and status["finished_at"] >= status["started_at"]
    bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "erase_fail"})
    bmcsim.post(f"/agent/{NODE}/gpu-wipe")
    assert bmcsim.get(f"/agent/{NODE}/gpu-wipe").json()["state"] == "failed"
    bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "erase_hang"})
    bmcsim.post(f"/agent/{NODE}/gpu-wipe")
    assert bmcsim.get(f"/agent/{NODE}/gpu-wipe").json()["state"] == "running"
    assert bmcsim.post(f"/agent/{NODE}/gpu-wipe").status_code == 409
    bmcsim.delete("/bmcsim/v1/faults", params={"node": NODE})
    bmcsim.reset(NODE, "ForceRestart")  # a reboot kills the hung wipe; a new wipe can start
    assert bmcsim.get(f"/agent/{NODE}/gpu-wipe").json()["state"] == "failed"
    assert bmcsim.post(f"/agent/{NODE}/gpu-wipe").status_code == 202


def test_agent_inventory_matches_the_data_center_inventory(bmcsim):
    node = bmcsim.node(NODE)
    inventory = bmcsim.get(f"/agent/{NODE}/inventory").json()
    assert inventory["serial"] == node["serial"]
    assert inventory["macs"] == node["macs"]
    assert [(g["uuid"], g["serial"]) for g in inventory["gpus"]] == [(g["uuid"], g["serial"]) for g in node["gpus"]]


def test_ecc_and_row_remap_faults_show_as_dcgm_exporter_does(bmcsim):
    assert value(samples(bmcsim), "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu="2") == 0
    bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "ecc_dbe", "gpu": 2})
    bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "row_remap_failure", "gpu": 6})
    found = samples(bmcsim)
    assert value(found, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu="2") == 1
    assert value(found, "DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu="6") == 1
    assert value(found, "DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu="2") == 0
    assert value(found, "gpu_agent_gpu_healthy", gpu="2") == value(found, "gpu_agent_gpu_healthy", gpu="6") == 0
    assert bmcsim.get(f"/redfish/v1/Systems/{NODE}/Processors/GPU6").json()["Status"]["Health"] == "Critical"
    r = bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "ecc_dbe", "gpu": 99})
    assert r.status_code == 400 and "'gpu'" in r.json()["detail"]


def test_every_call_needs_the_nodes_token(bmcsim):
    """Prometheus' way in, a certificate on the TLS listener, is in
    tests/hostile_tenant/test_metrics_client_certificate.py."""
    for method, path in (("GET", "metrics"), ("GET", "inventory"), ("POST", "evidence"), ("POST", "gpu-wipe")):
        r = bmcsim.request(method, f"/agent/{NODE}/{path}", auth=None)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer", path
        assert "token" in r.json()["detail"]
        other_nodes = Bearer(bmcsim.agent_token("node-001"))
        assert bmcsim.request(method, f"/agent/{NODE}/{path}", auth=other_nodes).status_code == 401, path
    assert "agent_token" not in bmcsim.node(NODE)  # the inventory hands out none: each boot's drive does


def test_gpu_reset_and_diagnostics_report_their_progress(bmcsim):
    r = bmcsim.post(f"/agent/{NODE}/gpu-reset", json={"gpu": 3})
    assert r.status_code == 202 and r.json()["gpu"] == 3
    assert bmcsim.get(f"/agent/{NODE}/gpu-reset").json() | {"started_at": 0, "finished_at": 0} == {
        "state": "succeeded",
        "gpu": 3,
        "started_at": 0,
        "finished_at": 0,
    }
    assert bmcsim.post(f"/agent/{NODE}/gpu-reset", json={"gpu": 8}).status_code == 400
    assert bmcsim.post(f"/agent/{NODE}/gpu-reset", json={"gpu": "3"}).status_code == 400

    bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "xid", "gpu": 1, "xid": 48})
    assert bmcsim.post(f"/agent/{NODE}/diagnostics", json={"level": 2}).status_code == 202
    run = bmcsim.get(f"/agent/{NODE}/diagnostics").json()
    assert run["state"] == "succeeded" and run["level"] == 2
    assert {r["test"] for r in run["results"]} == {"software", "pcie", "memory"}
    failed = {(r["test"], r["gpu"]) for r in run["results"] if not r["passed"]}
    assert failed == {("pcie", 1), ("memory", 1)}
    for level in (0, 5, "2", None):
        r = bmcsim.post(f"/agent/{NODE}/diagnostics", json={"level": level})
        assert r.status_code == 400 and "'level'" in r.json()["detail"], level
