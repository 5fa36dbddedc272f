"""Diagnostics with real workers, beat and bmcsim's agents, on a clock that runs (a level-3 run takes
9 s): a test failing at inspection quarantines the node naming the test and GPU, and its return
from quarantine is burnt in at level 3; an idle node's level-3 run is preempted, within a second,
by the reservation that takes the node."""

from io import StringIO

import pytest
import requests
from django.core.management import call_command

from fleet.models import AuditEvent, IdleDiagnosticRun, Node
from fleet.services import transition
from reservations.models import Reservation
from tests.support.bmcsim import start_bmcsim
from tests.support.factories import tenant_token
from tests.support.processes import wait_for
from tests.support.tenancy import state_of

SCALE = 0.01  # level 1 takes 0.1 s, level 3 9 s; a boot 0.1 s
# Every available node gets an idle run at once, looked at every half second.
IDLE = {"GPUFLEET_IDLE_DIAGNOSTICS_AT_ONCE": "4", "GPUFLEET_IDLE_DIAGNOSTICS_POLL_SECONDS": "0.5"}
# Started at the first look, then looked at every 5 s: what stops the run is provisioning's first step.
RARE_LOOKS = {**IDLE, "GPUFLEET_IDLE_DIAGNOSTICS_POLL_SECONDS": "5"}


@pytest.fixture
def bmcsim(tmp_path):
    """Four nodes (one rack), their durations scaled by SCALE: this module's control plane uses it."""
    sim = start_bmcsim(tmp_path / "bmcsim", nodes=4, scale=str(SCALE))
    yield sim
    sim.stop()


def start(bmcsim, control_plane) -> list[Node]:
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    control_plane.configure_attestation()
    control_plane.start_worker("w1")
    control_plane.start_worker("w2")
    control_plane.start_beat()
    return list(Node.objects.order_by("name"))


def state(node: Node) -> str:
    return Node.objects.values_list("state", flat=True).get(pk=node.pk)


@pytest.mark.parametrize("control_plane", [IDLE], indirect=True)
def test_a_failed_test_at_inspection_quarantines_naming_it_and_the_return_is_burnt_in(bmcsim, control_plane):
    fault = {"node": "node-003", "kind": "diag_fail", "gpu": 3, "test": "software"}  # a level-1 test
    assert bmcsim.post("/bmcsim/v1/faults", json=fault).status_code == 201
    nodes = start(bmcsim, control_plane)
    broken = next(n for n in nodes if n.name == "node-003")
    wait_for("the broken node quarantined", lambda: state(broken) == "quarantined", timeout=90)
    broken.refresh_from_db()
    assert broken.quarantine_reason == "diagnostic_failed: software on GPU 3: software failed on GPU 3"
    wait_for("the others available", lambda: Node.objects.filter(state="available").count() == 3, timeout=90)

    assert bmcsim.delete("/bmcsim/v1/faults?node=node-003").status_code in (200, 204)  # the repair
    transition(node_id=broken.pk, event="operator_return", actor="operator:test")
    wait_for("the repaired node burnt in and available", lambda: state(broken) == "available", timeout=120)
    broken.refresh_from_db()
    assert broken.diagnostic_level == 3  # the burn-in, not the short level
    inspection = AuditEvent.objects.filter(node=broken, event="step_changed", reason="wait_for_diagnostics").latest(
        "id"
    )
    assert inspection.detail["level"] == 3


@pytest.mark.parametrize("control_plane", [RARE_LOOKS], indirect=True)
def test_an_idle_nodes_diagnostics_are_preempted_within_a_second_by_a_reservation(bmcsim, control_plane):
    nodes = start(bmcsim, control_plane)
    web = control_plane.start_web()  # the tenant's request commits there, and its work is sent on commit
    token = tenant_token("acme")
    wait_for("every node available", lambda: Node.objects.filter(state="available").count() == len(nodes), 90)
    runs = IdleDiagnosticRun.objects.filter(status="running", started_at__isnull=False)
    wait_for("a level-3 run under way on every node", lambda: runs.count() == len(nodes), timeout=30)

    created = requests.post(
        f"{web}/v1/reservations", json={"node_count": 1}, headers={"Authorization": f"Token {token}"}, timeout=10
    )
    assert created.status_code == 201, created.text
    reservation = Reservation.objects.get(pk=created.json()["id"])
    node = Node.objects.get(reservation=reservation)  # still available, and so placeable, under diagnostics
    run = IdleDiagnosticRun.objects.get(node=node)
    wait_for("the run preempted", lambda: IdleDiagnosticRun.objects.get(pk=run.pk).status != "running", timeout=30)
    run.refresh_from_db()
    # Provisioning's first step cancels it (unless a look at the run came first and found the node provisioning).
    assert run.status == "preempted" and run.detail.endswith("; the agent's run: cancelled")

    wait_for("the reservation active", lambda: state_of(reservation) == "active", timeout=60)
    agent = bmcsim.get(f"/agent/{node.name}/diagnostics").json()
    assert (agent["state"], agent["level"], agent["results"]) == ("cancelled", 3, [])
    assert agent["finished_at"] - agent["started_at"] < 9  # cut short: a level-3 run takes 9 s here
    provisioning_began = AuditEvent.objects.get(node=node, event="provision_requested").at.timestamp()
    cancelled_after = agent["finished_at"] - provisioning_began  # both clocks are this machine's
    assert run.ended_at is not None
    recorded_after = run.ended_at.timestamp() - provisioning_began
    print(f"\nidle diagnostics cancelled {cancelled_after:.3f} s after provisioning began", end="")
    print(f" (the run's end recorded after {recorded_after:.3f} s; {run.detail})")
    assert 0 < cancelled_after < 5  # about a second, generously bounded for a noisy machine
    # The other nodes' runs went on: placement took the one node it needed.
    assert IdleDiagnosticRun.objects.exclude(pk=run.pk).filter(status="preempted").count() == 0
