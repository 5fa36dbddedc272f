"""Manager.Reset: the BMC reboots itself, answers 503 for a moment (scaled by SIM_TIME_SCALE), and the
host it manages runs on untouched."""

from __future__ import annotations

import time

import pytest

from tests.support.bmcsim import start_bmcsim
from tests.support.processes import wait_for

MANAGER = "/redfish/v1/Managers/node-001"
RESET = f"{MANAGER}/Actions/Manager.Reset"
SCALE = 0.05  # state.BMC_RESET_S (30 s) becomes 1.5 s


def test_the_manager_advertises_its_reset(bmcsim):
    action = bmcsim.get(MANAGER).json()["Actions"]["#Manager.Reset"]
    assert action == {"target": RESET, "ResetType@Redfish.AllowableValues": ["GracefulRestart", "ForceRestart"]}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "ActionParameterMissing"),
        ({"ResetType": "On"}, "ActionParameterValueNotInList"),
        ({"ResetType": []}, "ActionParameterValueNotInList"),
    ],
)
def test_a_bad_reset_type_is_a_400(bmcsim, body, message):
    r = bmcsim.post(RESET, json=body)
    assert r.status_code == 400
    assert r.json()["error"]["@Message.ExtendedInfo"][0]["MessageId"] == f"Base.1.18.{message}"


def test_at_time_scale_0_the_bmc_is_back_at_once(bmcsim, factory_reset):
    assert bmcsim.post(RESET, json={"ResetType": "ForceRestart"}).status_code == 204
    assert bmcsim.get(MANAGER).json()["LastResetTime"]
    assert bmcsim.get("/redfish/v1/Systems/node-001").status_code == 200
    other = bmcsim.node("node-002")["credentials"]
    r = bmcsim.post(
        "/redfish/v1/Managers/node-001/Actions/Manager.Reset",
        json={"ResetType": "ForceRestart"},
        auth=(other["username"], other["password"]),
    )
    assert r.status_code == 403


@pytest.mark.timing
def test_a_reset_bmc_answers_503_for_a_while_and_the_host_runs_on(tmp_path):
    sim = start_bmcsim(tmp_path / "data", nodes=2, scale=str(SCALE))
    try:
        sim.boot_with_config_drive("node-001")
        wait_for("its agent", lambda: sim.get("/agent/node-001/inventory").status_code == 200, 10)
        before = sim.get("/bmcsim/v1/nodes/node-001/power").json()
        assert sim.get("/agent/node-001/inventory").status_code == 200
        assert "LastResetTime" not in sim.get(MANAGER).json()
        started = time.monotonic()
        assert sim.post(RESET, json={"ResetType": "GracefulRestart"}).status_code == 204

        for path in (
            MANAGER,
            "/redfish/v1/Systems/node-001",
            "/redfish/v1/UpdateService/FirmwareInventory/node-001-BMC",
        ):
            r = sim.get(path)
            assert r.status_code == 503, path
            assert (
                r.json()["error"]["@Message.ExtendedInfo"][0]["MessageId"] == "Base.1.18.ServiceTemporarilyUnavailable"
            )
            assert 1 <= int(r.headers["Retry-After"]) <= 2
        # Another node's BMC, the service itself and the host's own agent are not affected.
        assert sim.get("/redfish/v1/Systems/node-002").status_code == 200
        assert sim.get("/redfish/v1/UpdateService").status_code == 200
        assert sim.get("/agent/node-001/inventory").status_code == 200
        assert sim.get("/bmcsim/v1/nodes/node-001/power").json() == before

        while sim.get(MANAGER).status_code == 503:
            assert time.monotonic() - started < 10
            time.sleep(0.1)
        assert time.monotonic() - started >= 30 * SCALE - 0.2
        assert sim.get(MANAGER).json()["LastResetTime"]
        assert sim.get("/redfish/v1/Systems/node-001").json()["PowerState"] == "On"
    finally:
        sim.stop()
