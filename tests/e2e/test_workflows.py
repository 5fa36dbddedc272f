"""Inspection, provisioning and wipe driven by real Celery workers and beat against bmcsim,
with faults injected through bmcsim's fault API and processes killed, stopped and restarted."""

import signal
import time
from io import StringIO

import pytest
from django.core.management import call_command

from fleet import leases
from fleet.models import AuditEvent, CredentialHolder, Node, NodeCredential
from fleet.services import transition
from tests.support.processes import wait_for
from workflows import node_workflows as workflows


def seed(bmcsim) -> list[Node]:
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    return list(Node.objects.order_by("name"))


def states(nodes) -> dict[str, str]:
    return dict(Node.objects.filter(pk__in=[n.pk for n in nodes]).values_list("name", "state"))


def inspected(node: Node) -> bool:
    """Inventory checked and waiting for attestation."""
    node = Node.objects.get(pk=node.pk)
    return node.state == "inspecting" and node.step == "attest"


def send_to_wiping(nodes) -> None:
    for node in nodes:
        transition(node_id=node.pk, event="operator_quarantine", actor="test", reason="test wipe")
        transition(node_id=node.pk, event="operator_return", actor="test")


def fault(bmcsim, node: str, kind: str, **extra) -> None:
    answer = bmcsim.post("/bmcsim/v1/faults", json={"node": node, "kind": kind, **extra})
    assert answer.status_code in (200, 201), answer.text


def clear_faults(bmcsim, node: str) -> None:
    assert bmcsim.delete(f"/bmcsim/v1/faults?node={node}").status_code in (200, 204)


def hung(node: Node) -> bool:
    """Waiting on a wipe that erase_hang keeps from finishing."""
    return Node.objects.get(pk=node.pk).step == "wait_for_gpu_wipe"


def wiped(node: Node) -> bool:
    return AuditEvent.objects.filter(node=node, event="wipe_succeeded").exists()


def test_twenty_four_nodes_are_inspected_then_wiped_by_two_workers(bmcsim, control_plane):
    nodes = seed(bmcsim)
    control_plane.start_worker("w1")
    control_plane.start_worker("w2")
    control_plane.start_beat()
    wait_for("every node inspected", lambda: all(inspected(n) for n in nodes), timeout=120)
    assert AuditEvent.objects.filter(event="inspection_passed").count() >= len(nodes)

    send_to_wiping(nodes)
    wait_for("every node wiped and inspected again", lambda: all(wiped(n) and inspected(n) for n in nodes), timeout=120)
    actors = set(AuditEvent.objects.filter(event="wipe_succeeded").values_list("actor", flat=True))
    assert len(actors) == 2, actors  # both workers took part
    # The worker that wiped a node kept it and went straight on to inspect it.
    for node in nodes:
        wipe, inspection = list(
            AuditEvent.objects.filter(node=node, event__in=["wipe_succeeded", "inspection_passed"])
            .order_by("-id")
            .values_list("actor", flat=True)[:2]
        )[::-1]
        assert wipe == inspection, (node.name, wipe, inspection)
        # ... in the wipe's boot of the service image: its credential, minted before the wipe
        # ended, is the live one, and no second boot revoked it.
        wiped_at = AuditEvent.objects.filter(node=node, event="wipe_succeeded").latest("id").at
        live_boot = NodeCredential.objects.get(node=node, holder=CredentialHolder.BOOT, revoked_at=None)
        assert live_boot.created_at < wiped_at, node.name

    node = nodes[0]
    drives = bmcsim.get(f"/agent/{node.name}/inventory").json()["drives"]
    assert all(d["last_erased_at"] is not None for d in drives)
    steps = list(
        AuditEvent.objects.filter(node=node, event="step_changed", from_state="wiping")
        .order_by("id")
        .values_list("reason", flat=True)
    )
    assert steps == [
        "leave_tenant_networks",
        "boot_service_image",
        "join_provisioning_network",
        "wait_for_agent",
        "start_gpu_wipe",
        "wait_for_gpu_wipe",
        "start_drive_erase",
        "wait_for_drive_erase",
        "clear_console_log",
    ]


@pytest.mark.parametrize("kind", ["bmc_error", "bmc_timeout"])
def test_bmc_errors_and_timeouts_are_retried_and_succeed_once_cleared(bmcsim, control_plane, kind):
    nodes = seed(bmcsim)[:2]
    broken, healthy = nodes
    fault(bmcsim, broken.name, kind)
    control_plane.start_worker("w1")
    control_plane.start_beat()
    wait_for("the healthy node inspected", lambda: inspected(healthy), timeout=60)
    time.sleep(3)  # several reconciler passes, each failing on the broken BMC
    assert Node.objects.get(pk=broken.pk).state == "inspecting" and not inspected(broken)
    clear_faults(bmcsim, broken.name)
    wait_for("the repaired node inspected", lambda: inspected(broken), timeout=60)


@pytest.mark.parametrize("control_plane", [{"GPUFLEET_WIPE_TIMEOUT": "2"}], indirect=True)
def test_a_hung_secure_erase_ends_quarantined_at_its_timeout(bmcsim, control_plane):
    node = seed(bmcsim)[0]
    control_plane.start_worker("w1")
    control_plane.start_beat()
    wait_for("inspection", lambda: inspected(node), timeout=60)
    fault(bmcsim, node.name, "erase_hang")
    send_to_wiping([node])
    wait_for("quarantine", lambda: Node.objects.get(pk=node.pk).state == "quarantined", timeout=60)
    node.refresh_from_db()
    # erase_hang hangs the GPU memory wipe and the drive erase alike: the first wait times out
    assert node.quarantine_reason.startswith("wipe_failed: wait_for_gpu_wipe: timed out after 2s")
    assert not wiped(node)


def worker_stuck_in_a_hung_wipe(bmcsim, control_plane):
    """One worker, waiting on a wipe that erase_hang keeps from finishing: (node, worker, its actor)."""
    node = seed(bmcsim)[0]
    worker = control_plane.start_worker("w1")
    control_plane.start_beat()
    wait_for("inspection", lambda: inspected(node), timeout=60)
    fault(bmcsim, node.name, "erase_hang")
    send_to_wiping([node])
    wait_for("the hung wipe", lambda: hung(node), timeout=60)
    return node, worker, AuditEvent.objects.filter(node=node, event="step_changed").latest("id").actor


def test_a_worker_killed_mid_wipe_is_finished_by_another_after_its_lease_expires(bmcsim, control_plane):
    node, first, killed_actor = worker_stuck_in_a_hung_wipe(bmcsim, control_plane)
    first.signal(signal.SIGKILL)
    clear_faults(bmcsim, node.name)
    control_plane.start_worker("w2")
    wait_for("the wipe finished by w2", lambda: wiped(node), timeout=60)
    assert AuditEvent.objects.get(node=node, event="wipe_succeeded").actor != killed_actor


def test_a_stalled_workers_late_result_is_discarded_and_audited(bmcsim, control_plane):
    node, stalled, stalled_actor = worker_stuck_in_a_hung_wipe(bmcsim, control_plane)
    stalled.signal(signal.SIGSTOP)
    time.sleep(4)  # past the 3 s lease
    clear_faults(bmcsim, node.name)
    control_plane.start_worker("w2")
    wait_for("the successor's wipe", lambda: wiped(node), timeout=60)
    stalled.signal(signal.SIGCONT)
    wait_for(
        "the stalled worker's discard",
        lambda: AuditEvent.objects.filter(node=node, event="result_discarded", actor=stalled_actor).exists(),
        timeout=30,
    )
    assert AuditEvent.objects.filter(node=node, event="wipe_succeeded").count() == 1


def test_a_redis_restart_loses_no_work(bmcsim, control_plane):
    nodes = seed(bmcsim)[:10]
    control_plane.start_worker("w1")
    control_plane.start_worker("w2")
    control_plane.start_beat()
    wait_for("inspection", lambda: all(inspected(n) for n in nodes), timeout=90)
    send_to_wiping(nodes)
    control_plane.redis.stop()
    time.sleep(2)
    control_plane.redis.start()
    wait_for("every node wiped", lambda: all(wiped(n) and inspected(n) for n in nodes), timeout=120)


def test_a_machine_that_lost_power_after_its_agent_answered_is_booted_again(
    bmcsim, control_plane, transactional_db, live_server, settings
):
    """Found by the soak: bmcsim restarted and lost a node's last boot; the inspection paused at
    attest, waiting for an agent that would never answer again, until its one-hour deadline."""
    settings.CONFIG_DRIVE_BASE_URL = live_server.url  # where the BMC fetches this process's boots' drives
    node = seed(bmcsim)[0]
    control_plane.configure_attestation()
    transition(node_id=node.pk, event="inspection_started", actor="test")
    # A first run booted the node and got as far as attestation, then paused; meanwhile it lost power.
    lease = leases.claim(owner="first-run", node_ids=[node.pk])[0]
    assert leases.set_step(lease, step="attest", actor="test") and leases.release(lease)
    answer = bmcsim.post(
        f"/redfish/v1/Systems/{node.system_id}/Actions/ComputerSystem.Reset", json={"ResetType": "ForceOff"}
    )
    assert answer.status_code < 300, answer.text

    assert workflows.run_workflow(node_id=node.pk, worker="test") == "paused at attest"
    assert Node.objects.get(pk=node.pk).step == "boot_service_image"  # audited, and where the next run starts
    assert workflows.run_workflow(node_id=node.pk, worker="test") == "done"
    assert Node.objects.get(pk=node.pk).state == "available"
