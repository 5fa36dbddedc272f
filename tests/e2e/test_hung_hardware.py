"""Hung and slow hardware never holds a worker: a wait that outlasts the hold parks the node with
its step, the reconciler sends it again when it is due, and the wait resumes where it stood and
still ends at its timeout, counted from when it began, whatever happens to Redis meanwhile."""

import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from fleet import leases
from fleet.models import AuditEvent, Node
from fleet.services import transition
from reservations import services as reservations
from reservations.models import Tenant
from tests.support.bmcsim import start_bmcsim
from tests.support.fabrics import point_managers_at, sync
from tests.support.factories import make_available, make_available_as_inspected
from tests.support.processes import wait_for
from tests.support.tenancy import state_of
from workflows import node_workflows as workflows

WORKER_SLOTS = 2  # the control plane's two solo workers


def seed(url: str) -> list[Node]:
    call_command("seed_fleet", "--bmcsim-url", url, stdout=StringIO())
    return list(Node.objects.order_by("name"))


def fault(bmcsim, node: Node, kind: str) -> None:
    answer = bmcsim.post("/bmcsim/v1/faults", json={"node": node.name, "kind": kind})
    assert answer.status_code in (200, 201), answer.text


def send_to_wiping(node: Node) -> None:
    transition(node_id=node.pk, event="operator_quarantine", actor="test", reason="test wipe")
    transition(node_id=node.pk, event="operator_return", actor="test")


def waiting_on_gpu_wipe(node: Node) -> bool:
    return Node.objects.filter(pk=node.pk, state="wiping", step="wait_for_gpu_wipe").exists()


def parked_mid_wait(node: Node) -> bool:
    parked = Node.objects.filter(lease_owner=leases.WAITING_ON_HARDWARE)
    return parked.filter(pk=node.pk, state="wiping", step="wait_for_gpu_wipe").exists()


def wiped(node: Node) -> bool:
    return AuditEvent.objects.filter(node=node, event="wipe_succeeded").exists()


# A worker that waited out a hung wipe itself was held for the whole GPUFLEET_WIPE_TIMEOUT: ten minutes here.
@pytest.mark.parametrize("control_plane", [{"GPUFLEET_WIPE_TIMEOUT": "600"}], indirect=True)
def test_a_new_reservation_goes_active_while_every_worker_slot_has_a_hung_node(bmcsim, control_plane):
    make_available_as_inspected(seed(bmcsim.url))  # as after inspection: no worker time needed for it
    control_plane.start_worker("w1")
    control_plane.start_worker("w2")
    control_plane.start_beat()
    tenant = Tenant.objects.create(name="acme")
    first = reservations.create_reservation(tenant=tenant, node_count=WORKER_SLOTS, actor="test")
    wait_for("the first reservation active", lambda: state_of(first) == "active", timeout=60)
    hung = list(Node.objects.filter(reservation=first))
    for node in hung:
        fault(bmcsim, node, "erase_hang")
    reservations.release_reservation(reservation_id=first.pk, actor="test")
    wait_for("every worker slot's node hung in its wipe", lambda: all(waiting_on_gpu_wipe(n) for n in hung), 60)

    second = reservations.create_reservation(tenant=tenant, node_count=1, actor="test")
    wait_for("the new reservation active", lambda: state_of(second) == "active", timeout=90)
    assert all(waiting_on_gpu_wipe(n) for n in hung)  # still waiting, neither failed nor given up on


@pytest.mark.parametrize(
    "control_plane", [{"GPUFLEET_WIPE_TIMEOUT": "8", "GPUFLEET_WORKFLOW_HOLD_SECONDS": "0.5"}], indirect=True
)
def test_a_hung_wipe_parked_mid_wait_still_fails_at_its_timeout_after_a_redis_restart(bmcsim, control_plane):
    nodes = make_available(seed(bmcsim.url))
    node = nodes[0]
    fault(bmcsim, node, "erase_hang")
    send_to_wiping(node)
    control_plane.start_worker("w1")
    control_plane.start_beat()
    wait_for("the wipe parked mid-wait", lambda: parked_mid_wait(node), timeout=60)
    began = Node.objects.get(pk=node.pk).step_since
    assert began is not None
    # Whatever messages and marks were in Redis are lost; the wait needs none of them.
    control_plane.redis.stop()
    control_plane.redis.start()
    wait_for("the quarantine", lambda: Node.objects.get(pk=node.pk).state == "quarantined", timeout=60)
    failed = AuditEvent.objects.get(node=node, event="wipe_failed")
    assert failed.reason.startswith("wait_for_gpu_wipe: timed out after 8s")
    assert (failed.at - began).total_seconds() >= 8
    steps = AuditEvent.objects.filter(node=node, event="step_changed").order_by("id").values_list("reason", flat=True)
    assert list(steps) == [
        "leave_tenant_networks",
        "boot_service_image",
        "join_provisioning_network",
        "wait_for_agent",
        "start_gpu_wipe",
        "wait_for_gpu_wipe",
    ]  # no restart


@pytest.fixture
def slow_bmcsim(tmp_path):
    """Two nodes at a tenth of real speed: a boot takes 0.8 s, a GPU wipe 1 s, a drive erase 2 s."""
    sim = start_bmcsim(tmp_path / "slow-bmcsim", nodes=2, scale="0.1")
    yield sim
    sim.stop()


def test_a_visit_gives_the_node_back_mid_wait_and_the_next_resumes_the_same_wait(
    slow_bmcsim, transactional_db, settings, live_server
):
    settings.CONFIG_DRIVE_BASE_URL = live_server.url  # where the BMC fetches this process's boots' drives
    settings.WORKFLOW_HOLD_SECONDS = 0.3
    settings.WORKFLOW_POLL_SECONDS = 0.05
    point_managers_at(settings, slow_bmcsim.url)
    node = seed(slow_bmcsim.url)[0]
    send_to_wiping(node)

    outcomes: list[str] = []
    while not wiped(node):
        assert len(outcomes) < 200, outcomes
        outcome = workflows.run_workflow(node_id=node.pk, worker="test")
        outcomes.append(outcome)
        if outcome in ("waiting at leave_tenant_networks", "waiting at join_provisioning_network"):
            sync()  # what a worker does when the step asks for a sync, which then wakes the node
        elif outcome.startswith("waiting at"):
            parked = Node.objects.get(pk=node.pk)
            assert parked.lease_owner == leases.WAITING_ON_HARDWARE and outcome.endswith(parked.step)
            assert parked.lease_expires_at is not None
            due_in = (parked.lease_expires_at - timezone.now()).total_seconds()
            assert due_in <= settings.WORKFLOW_RECHECK_MAX_SECONDS
            time.sleep(max(due_in, 0) + 0.01)  # then the reconciler would send it
    assert {"waiting at wait_for_gpu_wipe", "waiting at wait_for_drive_erase"} <= set(outcomes)
    # Each wait was resumed where it stood, never started again: one step row each, and the drives erased.
    steps = list(AuditEvent.objects.filter(node=node, event="step_changed").values_list("reason", flat=True))
    assert steps.count("wait_for_drive_erase") == steps.count("start_gpu_wipe") == 1
    wait_for("the agent of the inspection", lambda: slow_bmcsim.get(f"/agent/{node.name}/inventory").ok, timeout=30)
    drives = slow_bmcsim.get(f"/agent/{node.name}/inventory").json()["drives"]
    assert drives and all(d["last_erased_at"] is not None for d in drives)
