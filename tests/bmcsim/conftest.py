"""bmcsim started as a real subprocess on a free port, with a temp data dir and SIM_TIME_SCALE=0."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.bmcsim import FLEET_NODES, Bmcsim, start_bmcsim

SIMPLE_UPDATE = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"


@pytest.fixture(scope="session")
def bmcsim(tmp_path_factory) -> Iterator[Bmcsim]:
    """Every node booted once with a config drive of the tests' making, as the control plane boots
    its service image: its agent takes that drive's credentials (bmcsim derives none of its own)."""
    sim = start_bmcsim(tmp_path_factory.mktemp("bmcsim") / "data")
    for number in range(1, FLEET_NODES + 1):
        sim.boot_with_config_drive(f"node-{number:03d}")
    yield sim
    sim.stop()


@pytest.fixture(autouse=True)
def clean_fleet(request):
    """Every test starts from a fleet with no fault and every node on with no boot override."""
    if "bmcsim" not in request.fixturenames:
        yield
        return
    sim = request.getfixturevalue("bmcsim")
    yield
    assert sim.delete("/bmcsim/v1/faults", timeout=30).status_code == 200
    for number in range(1, FLEET_NODES + 1):
        node = f"node-{number:03d}"
        sim.patch(f"/redfish/v1/Systems/{node}", json={"Boot": {"BootSourceOverrideEnabled": "Disabled"}})
        sim.reset(node, "On")


@pytest.fixture
def factory_reset(bmcsim):
    """For a test that flashes firmware, changes BIOS settings or Secure Boot, resets a BMC or fills
    a SEL: afterwards every node is as it left the factory again. Faults go first, so a tampered
    BIOS is not what the reboot here measures."""
    yield
    releases = bmcsim.get("/bmcsim/v1/firmware-releases").json()["components"]
    assert bmcsim.delete("/bmcsim/v1/faults", timeout=30).status_code == 200
    for number in range(1, FLEET_NODES + 1):
        node = f"node-{number:03d}"
        system = f"/redfish/v1/Systems/{node}"
        for published in releases.values():
            image = "http://127.0.0.1:9/" + published[-1]["image"]
            r = bmcsim.post(SIMPLE_UPDATE, json={"ImageURI": image, "Targets": [system]})
            assert r.status_code == 202, r.text
        assert bmcsim.post(f"{system}/Bios/Actions/Bios.ResetBios", json={}).status_code == 204
        assert bmcsim.patch(f"{system}/SecureBoot", json={"SecureBootEnable": False}).status_code == 200
        keys = {"ResetKeysType": "ResetAllKeysToDefault"}
        assert bmcsim.post(f"{system}/SecureBoot/Actions/SecureBoot.ResetKeys", json=keys).status_code == 204
        bmcsim.reset(node, "ForceRestart")
        assert bmcsim.post(f"{system}/LogServices/SEL/Actions/LogService.ClearLog", json={}).status_code == 204
