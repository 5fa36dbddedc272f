"""bmcsim started as a real subprocess on a free port, with a temp data dir and SIM_TIME_SCALE=0."""

from __future__ import annotations

import pytest

from tests.support.bmcsim import FLEET_NODES, Bmcsim, start_bmcsim


@pytest.fixture(scope="session")
def bmcsim(tmp_path_factory) -> Bmcsim:
    sim = start_bmcsim(tmp_path_factory.mktemp("bmcsim") / "data")
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
