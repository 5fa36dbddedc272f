"""With BMCSIM_CONTROL_PLANE_URL, every simulated node's agent reports each new XID to the control
plane as the real agent does (agent/xid_reports.py), with the report token of the config drive its
node booted with, and says nothing while its node is off or booted without a drive.

The control plane's end is tests/agent/xid_receiver.py; bmcsim is a real process of its own here,
with a fleet of its own, so that no other test's XIDs reach the receiver.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from tests.agent.xid_receiver import XidReceiver
from tests.support.bmcsim import start_bmcsim

REPORT_TOKENS: dict[str, str] = {}  # what each node's drive gave its agent to report with


@pytest.fixture(scope="module")
def receiver():
    server = XidReceiver()
    yield server
    server.close()


@pytest.fixture(scope="module")
def reporting_fleet(tmp_path_factory, receiver):
    sim = start_bmcsim(tmp_path_factory.mktemp("bmcsim-xid-reports") / "data", control_plane_url=receiver.url)
    REPORT_TOKENS.update({node: sim.boot_with_config_drive(node)["report_token"] for node in ("node-001", "node-002")})
    yield sim
    sim.stop()


@pytest.mark.timing
def test_an_injected_xid_reaches_the_control_plane_within_about_a_second(reporting_fleet, receiver):
    sim = reporting_fleet
    time.sleep(0.5)  # the reporter's first reading, the baseline, is long taken
    assert receiver.received == []
    injected = time.monotonic()
    r = sim.post("/bmcsim/v1/faults", json={"node": "node-001", "kind": "xid", "gpu": 3, "xid": 79})
    assert r.status_code == 201
    (received,) = receiver.wait_for(1, timeout=10, node="node-001")
    print(f"fault -> report: {received.at - injected:.3f} s")
    assert received.authorization == f"Bearer {REPORT_TOKENS['node-001']}"
    assert received.body | {"seen_at": ""} == {"gpu": 3, "xid": 79, "occurrence": 1, "seen_at": ""}
    seen = datetime.strptime(received.body["seen_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs(seen.timestamp() - time.time()) < 10

    sim.post("/bmcsim/v1/faults", json={"node": "node-001", "kind": "xid", "gpu": 3, "xid": 79})
    assert receiver.wait_for(2, node="node-001")[1].body["occurrence"] == 2
    time.sleep(0.5)
    assert len(receiver.received) == 2  # once each, and no other node's


@pytest.mark.timing
def test_a_node_powered_off_reports_nothing_until_it_is_back_on(reporting_fleet, receiver):
    sim, node = reporting_fleet, "node-002"
    sim.reset(node, "ForceOff")
    assert sim.post("/bmcsim/v1/faults", json={"node": node, "kind": "xid", "gpu": 0, "xid": 48}).status_code == 201
    time.sleep(1.5)
    assert receiver.bodies(node) == []

    powered_on = time.monotonic()
    sim.reset(node, "On")
    (received,) = receiver.wait_for(1, timeout=10, node=node)
    print(f"power on -> report: {received.at - powered_on:.3f} s")
    assert received.body | {"seen_at": ""} == {"gpu": 0, "xid": 48, "occurrence": 1, "seen_at": ""}
    assert received.authorization == f"Bearer {REPORT_TOKENS[node]}"


@pytest.mark.timing
def test_a_node_booted_without_a_drive_reports_nothing(reporting_fleet, receiver):
    sim, node = reporting_fleet, "node-003"  # as it left the factory: booted from its disk, no drive
    assert sim.post("/bmcsim/v1/faults", json={"node": node, "kind": "xid", "gpu": 0, "xid": 48}).status_code == 201
    time.sleep(1.5)
    assert receiver.bodies(node) == []
