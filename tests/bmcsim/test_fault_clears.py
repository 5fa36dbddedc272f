"""GPU faults that say what clears them (`clears`), and `diag_fail`, over bmcsim's real HTTP: the
admin API injects, the node's agent shows the XID and the GPU's health as the control plane's
recheck reads it (gpu_agent_gpu_healthy), and the agent's GPU reset or Redfish's
ComputerSystem.Reset is the action that clears the fault, or does not."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.processes import wait_for

NODE = "node-003"
GPU = 4
XID = 48
# Weakest first: each action also clears what a weaker one does.
ACTIONS = ("gpu_reset", "reboot", "power_cycle")
CLEARS = (*ACTIONS, "never")


def inject(bmcsim, **body) -> dict:
    r = bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, **body})
    assert r.status_code == 201, r.text
    return r.json()


def metrics(bmcsim) -> list:
    r = bmcsim.get(f"/agent/{NODE}/metrics")
    assert r.status_code == 200, r.text
    return [s for family in text_string_to_metric_families(r.text) for s in family.samples]


def healthy(bmcsim, gpu: int = GPU) -> bool:
    """As workflows/agent.py's gpu_healthy reads it."""
    (value,) = [s.value for s in metrics(bmcsim) if s.name == "gpu_agent_gpu_healthy" and s.labels["gpu"] == str(gpu)]
    return value == 1


def xid_count(bmcsim, gpu: int = GPU, xid: int = XID) -> float:
    labels = {"gpu": str(gpu), "xid": str(xid)}
    found = metrics(bmcsim)
    (value,) = [s.value for s in found if s.name == "gpu_agent_xid_errors_total" and labels.items() <= s.labels.items()]
    return value


def node_faults(bmcsim) -> list[dict]:
    return [f for f in bmcsim.get("/bmcsim/v1/faults").json()["faults"] if f["node"] == NODE]


def gpu_reset(bmcsim, gpu: int = GPU) -> str:
    """The agent's reset flow: 202, then its progress at GET gpu-reset until it ends."""
    r = bmcsim.post(f"/agent/{NODE}/gpu-reset", json={"gpu": gpu})
    assert r.status_code == 202 and r.json()["gpu"] == gpu, r.text
    wait_for("the GPU reset to end", lambda: bmcsim.get(f"/agent/{NODE}/gpu-reset").json()["state"] != "running", 10)
    return bmcsim.get(f"/agent/{NODE}/gpu-reset").json()["state"]


def act(bmcsim, action: str) -> None:
    if action == "gpu_reset":
        assert gpu_reset(bmcsim) == "succeeded"
    elif action == "reboot":
        bmcsim.reset(NODE, "ForceRestart")
    else:
        bmcsim.reset(NODE, "ForceOff")
        bmcsim.reset(NODE, "On")
    wait_for("the agent to answer", lambda: bmcsim.get(f"/agent/{NODE}/metrics").status_code == 200, 10)


@pytest.mark.parametrize("clears", CLEARS)
def test_an_xid_lasts_until_what_its_clears_names_and_no_weaker_action(bmcsim, clears):
    assert healthy(bmcsim)
    fault = inject(bmcsim, kind="xid", gpu=GPU, xid=XID, clears=clears)
    assert fault == {"node": NODE, "kind": "xid", "gpu": GPU, "xid": XID, "clears": clears}
    assert not healthy(bmcsim) and healthy(bmcsim, GPU - 1)
    count = xid_count(bmcsim)
    assert count >= 1

    for action in ACTIONS:
        act(bmcsim, action)
        cleared = clears != "never" and ACTIONS.index(action) >= ACTIONS.index(clears)
        assert healthy(bmcsim) is cleared, (clears, action)
        assert (node_faults(bmcsim) == []) is cleared, (clears, action)
        health = bmcsim.get(f"/redfish/v1/Systems/{NODE}/Processors/GPU{GPU}").json()["Status"]["Health"]
        assert health == ("OK" if cleared else "Critical")
        assert xid_count(bmcsim) == count  # the counter keeps its count, and no new XID comes

    if clears == "never":
        assert bmcsim.delete("/bmcsim/v1/faults", params={"node": NODE}).json() == {"cleared": 1}
        assert healthy(bmcsim) and xid_count(bmcsim) == count


def test_without_clears_a_fault_lasts_as_before_and_is_listed_as_before(bmcsim):
    assert inject(bmcsim, kind="xid", gpu=GPU, xid=79) == {"node": NODE, "kind": "xid", "gpu": GPU, "xid": 79}
    for action in ACTIONS:
        act(bmcsim, action)
        assert not healthy(bmcsim), action
    assert node_faults(bmcsim) == [{"node": NODE, "kind": "xid", "gpu": GPU, "xid": 79}]


def test_the_other_reboots_and_power_cycles_clear_as_their_kind_does(bmcsim):
    inject(bmcsim, kind="xid", gpu=GPU, xid=XID, clears="reboot")
    bmcsim.reset(NODE, "GracefulRestart")
    assert healthy(bmcsim)

    inject(bmcsim, kind="xid", gpu=GPU, xid=XID, clears="power_cycle")
    bmcsim.reset(NODE, "GracefulRestart")
    assert not healthy(bmcsim)
    bmcsim.reset(NODE, "PowerCycle")
    assert healthy(bmcsim)

    inject(bmcsim, kind="xid", gpu=GPU, xid=XID, clears="power_cycle")
    bmcsim.reset(NODE, "GracefulShutdown")
    bmcsim.reset(NODE, "On")
    assert healthy(bmcsim)

    # A hung OS ignores a graceful restart, so nothing restarts and nothing clears.
    inject(bmcsim, kind="os_hang")
    inject(bmcsim, kind="xid", gpu=GPU, xid=XID, clears="reboot")
    bmcsim.reset(NODE, "GracefulRestart")
    assert not healthy(bmcsim)
    bmcsim.reset(NODE, "ForceRestart")
    assert healthy(bmcsim)
    assert node_faults(bmcsim) == [{"node": NODE, "kind": "os_hang"}]


def test_a_gpu_reset_clears_only_its_own_gpu_and_only_if_it_succeeds(bmcsim):
    inject(bmcsim, kind="xid", gpu=GPU, xid=XID, clears="gpu_reset")
    assert gpu_reset(bmcsim, GPU - 1) == "succeeded"
    assert not healthy(bmcsim)

    inject(bmcsim, kind="erase_fail")  # the simulator's failing long operation: the reset ends failed
    assert gpu_reset(bmcsim) == "failed"
    assert not healthy(bmcsim)

    bmcsim.delete("/bmcsim/v1/faults", params={"node": NODE})
    inject(bmcsim, kind="xid", gpu=GPU, xid=XID, clears="gpu_reset")
    inject(bmcsim, kind="erase_hang")  # a reset that never ends: the GPU stays off the bus, unhealthy
    assert bmcsim.post(f"/agent/{NODE}/gpu-reset", json={"gpu": GPU}).json()["state"] == "running"
    assert not healthy(bmcsim) and healthy(bmcsim, GPU - 1)
    assert any(f["kind"] == "xid" for f in node_faults(bmcsim))
    bmcsim.reset(NODE, "ForceRestart")  # kills the hung reset, and a reboot clears what a reset would
    assert bmcsim.get(f"/agent/{NODE}/gpu-reset").json()["state"] == "failed"
    assert healthy(bmcsim)


def test_ecc_and_row_remap_faults_take_clears_too(bmcsim):
    inject(bmcsim, kind="ecc_dbe", gpu=GPU, clears="gpu_reset")
    inject(bmcsim, kind="row_remap_failure", gpu=GPU + 1, clears="reboot")
    assert not healthy(bmcsim) and not healthy(bmcsim, GPU + 1)
    act(bmcsim, "gpu_reset")
    assert healthy(bmcsim) and not healthy(bmcsim, GPU + 1)
    assert gpu_reset(bmcsim, GPU + 1) == "succeeded"
    assert not healthy(bmcsim, GPU + 1)
    act(bmcsim, "reboot")
    assert healthy(bmcsim, GPU + 1)
    assert node_faults(bmcsim) == []


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"kind": "xid", "gpu": 0, "xid": 79, "clears": "reset"}, "'clears' must be one of"),
        ({"kind": "xid", "gpu": 0, "xid": 79, "clears": None}, "'clears' must be one of"),
        ({"kind": "ecc_dbe", "gpu": 0, "clears": 1}, "'clears' must be one of"),
        ({"kind": "diag_fail", "gpu": 0, "test": "bogus"}, "'test' must be one of"),
        ({"kind": "diag_fail", "gpu": 0}, "'test' must be one of"),
        ({"kind": "diag_fail", "test": "memory"}, "'gpu' must be"),
    ],
)
def test_clears_and_diag_fail_are_validated(bmcsim, body, detail):
    r = bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, **body})
    assert r.status_code == 400 and detail in r.json()["detail"]
    assert node_faults(bmcsim) == []


def diagnose(bmcsim, level: int) -> dict:
    assert bmcsim.post(f"/agent/{NODE}/diagnostics", json={"level": level}).status_code == 202
    run = bmcsim.get(f"/agent/{NODE}/diagnostics").json()
    assert run["state"] == "succeeded" and run["level"] == level
    return run


def test_diag_fail_fails_its_test_on_its_gpu_and_nothing_else(bmcsim):
    fault = inject(bmcsim, kind="diag_fail", gpu=2, test="targeted_power")
    assert fault == {"node": NODE, "kind": "diag_fail", "gpu": 2, "test": "targeted_power"}
    assert healthy(bmcsim, 2)  # a diagnostic finding, not a health fault
    assert bmcsim.get(f"/redfish/v1/Systems/{NODE}/Processors/GPU2").json()["Status"]["Health"] == "OK"

    run = diagnose(bmcsim, 3)
    gpus = len(bmcsim.node(NODE)["gpus"])
    assert len(run["results"]) == 6 * gpus  # software, pcie, memory, and the three of level 3
    failed = [r for r in run["results"] if not r["passed"]]
    assert failed == [{"test": "targeted_power", "gpu": 2, "passed": False, "detail": "targeted_power failed on GPU 2"}]
    assert all(r["detail"] == "" for r in run["results"] if r["passed"])

    # A level that does not run the test passes it all; the fault stays until the admin API clears it.
    assert all(r["passed"] for r in diagnose(bmcsim, 2)["results"])
    act(bmcsim, "power_cycle")
    assert [(r["test"], r["gpu"]) for r in diagnose(bmcsim, 4)["results"] if not r["passed"]] == [("targeted_power", 2)]
    bmcsim.delete("/bmcsim/v1/faults", params={"node": NODE})
    assert all(r["passed"] for r in diagnose(bmcsim, 3)["results"])


def test_diag_fail_and_a_health_fault_fail_side_by_side(bmcsim):
    inject(bmcsim, kind="diag_fail", gpu=0, test="software")
    inject(bmcsim, kind="xid", gpu=1, xid=79, clears="gpu_reset")
    failed = {(r["test"], r["gpu"]) for r in diagnose(bmcsim, 2)["results"] if not r["passed"]}
    assert failed == {("software", 0), ("pcie", 1), ("memory", 1)}
    assert gpu_reset(bmcsim, 1) == "succeeded"
    failed = {(r["test"], r["gpu"]) for r in diagnose(bmcsim, 2)["results"] if not r["passed"]}
    assert failed == {("software", 0)}
