"""A firmware rollout end to end, with real workers and beat against bmcsim: the operator's baseline
moves the BMC to bmcsim's other published release, and manage.py roll_out_firmware rolls it out
with one node per pod at a time. Every idle node is inspected again and runs the new release; a node
a tenant reserved meanwhile gets it after its release. A reflash that does not take pauses the
rollout, naming the node and the drift, and nothing more is taken."""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from io import StringIO

from django.core.management import call_command
from django.db.models import F

from fleet.models import AuditEvent, FirmwareRollout, Node
from reservations import services as reservations
from reservations.models import Tenant
from tests.e2e.conftest import E2E_NODES
from tests.support import REPO_ROOT
from tests.support.invariants import check_all
from tests.support.processes import wait_for
from tests.support.tenancy import state_of

DEMO_BASELINE = REPO_ROOT / "deploy" / "firmware-baseline.json"


def bmcsim_fleet_running_its_newest_firmware(bmcsim, control_plane) -> list[Node]:
    """bmcsim's fleet enrolled with the demo's baseline (bmcsim's newest releases), workers and beat
    started, every node inspected and available."""
    releases = f"{bmcsim.url}/bmcsim/v1/firmware-releases"
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    call_command("set_firmware_baseline", str(DEMO_BASELINE), "--releases", releases, stdout=StringIO())
    control_plane.configure_attestation()
    control_plane.start_worker("w1")
    control_plane.start_worker("w2")
    control_plane.start_beat()
    wait_for("every node available", lambda: Node.objects.filter(state="available").count() == E2E_NODES, 240)
    return list(Node.objects.order_by("name"))


def expect_the_other_bmc_release(bmcsim, tmp_path) -> dict:
    """What an operator does: the baseline now names the BMC's other published release."""
    other = bmcsim.get("/bmcsim/v1/firmware-releases").json()["components"]["BMC"][0]
    document = json.loads(DEMO_BASELINE.read_text())
    document["baselines"][0]["components"] = {
        "BMC": {"version": other["release"], "sha256": other["digest"], "image": other["image"]}
    }
    (tmp_path / "baseline.json").write_text(json.dumps(document))
    releases = f"{bmcsim.url}/bmcsim/v1/firmware-releases"
    call_command("set_firmware_baseline", str(tmp_path / "baseline.json"), "--releases", releases, stdout=StringIO())
    return other


def roll_out() -> FirmwareRollout:
    call_command("roll_out_firmware", "bmcsim-default", "--batch", "4", "--per-pod-cap", "1", stdout=StringIO())
    return FirmwareRollout.objects.get()


def bmc_version(bmcsim, node: Node) -> str:
    return bmcsim.get(f"/redfish/v1/UpdateService/FirmwareInventory/{node.name}-BMC").json()["Version"]


def statuses(rollout: FirmwareRollout) -> dict[str, str]:
    return dict(rollout.nodes.values_list("node__name", "status"))


def most_inspecting_at_once_per_pod(after_audit_id: int) -> int:
    """From the audit trail: the most nodes of one pod in inspection at once, after that row."""
    inspecting, most = defaultdict(set), 0
    changes = (
        AuditEvent.objects.filter(pk__gt=after_audit_id)
        .exclude(from_state=F("to_state"))
        .order_by("id")
        .values_list("node__rack__pod__name", "node_id", "from_state", "to_state")
    )
    for pod, node, old, new in changes:
        if new == "inspecting":
            inspecting[pod].add(node)
        elif old == "inspecting":
            inspecting[pod].discard(node)
        most = max(most, len(inspecting[pod]))
    return most


def test_every_idle_node_is_updated_one_per_pod_at_a_time_and_a_node_in_use_after_its_release(
    bmcsim, control_plane, tmp_path
):
    nodes = bmcsim_fleet_running_its_newest_firmware(bmcsim, control_plane)
    factory = bmc_version(bmcsim, nodes[0])
    other = expect_the_other_bmc_release(bmcsim, tmp_path)
    assert other["release"] != factory
    before = AuditEvent.objects.latest("id").pk

    rollout = roll_out()
    reservation = reservations.create_reservation(tenant=Tenant.objects.create(name="acme"), node_count=1, actor="test")
    tenants = Node.objects.get(reservation=reservation)
    idle = [n for n in nodes if n.pk != tenants.pk]
    wait_for(
        "every idle node updated",
        lambda: rollout.nodes.filter(node__in=idle, status="updated").count() == len(idle),
        timeout=300,
    )
    assert state_of(reservation) == "active"
    assert statuses(rollout)[tenants.name] == "at_next_handoff"
    assert FirmwareRollout.objects.get(pk=rollout.pk).status == "running"
    assert bmc_version(bmcsim, tenants) == factory  # nothing touched it under its tenant
    assert all(bmc_version(bmcsim, n) == other["release"] for n in idle)

    reservations.release_reservation(reservation_id=reservation.pk, actor="tenant:acme")
    wait_for("the rollout completed", lambda: FirmwareRollout.objects.get(pk=rollout.pk).status == "completed", 180)
    assert set(statuses(rollout).values()) == {"updated"}
    assert bmc_version(bmcsim, tenants) == other["release"]
    assert Node.objects.get(pk=tenants.pk).state == "available"

    updates = AuditEvent.objects.filter(event="firmware_update")
    assert updates.count() == len(idle) and set(updates.values_list("node__name", flat=True)) == {n.name for n in idle}
    assert set(updates.values_list("actor", flat=True)) == {f"rollout:{rollout.pk} by operator:roll_out_firmware"}
    assert most_inspecting_at_once_per_pod(before) == 1
    assert check_all() == []


def test_a_reflash_that_does_not_take_pauses_the_rollout_naming_the_node_and_the_drift(bmcsim, control_plane, tmp_path):
    nodes = bmcsim_fleet_running_its_newest_firmware(bmcsim, control_plane)
    first = nodes[0]  # the first of its pod: in the first batch
    fault = {"node": first.name, "kind": "firmware_tamper", "component": "BMC", "survives_reflash": True}
    assert bmcsim.post("/bmcsim/v1/faults", json=fault).status_code in (200, 201)
    other = expect_the_other_bmc_release(bmcsim, tmp_path)

    rollout = roll_out()
    wait_for("the rollout paused", lambda: FirmwareRollout.objects.get(pk=rollout.pk).status == "paused", 180)

    rollout.refresh_from_db()
    assert rollout.paused_reason.startswith(
        f"{first.name}: firmware_drift: BMC expected {other['release']} (sha256 {other['digest'][:16]}…) found "
    ), rollout.paused_reason
    assert rollout.paused_reason.endswith("(after repairing BMC)"), rollout.paused_reason
    assert Node.objects.get(pk=first.pk).state == "quarantined"
    batch = set(AuditEvent.objects.filter(event="firmware_update").values_list("node__name", flat=True))
    assert len(batch) == 2 and first.name in batch  # one node per pod
    (partner,) = batch - {first.name}
    wait_for("the rest of its batch updated", lambda: statuses(rollout)[partner] == "updated", 120)

    time.sleep(6 * float(control_plane.env["GPUFLEET_RECONCILE_SECONDS"]))  # beat looks again: paused, it sends nothing
    assert AuditEvent.objects.filter(event="firmware_update").count() == 2
    assert Counter(statuses(rollout).values()) == {"pending": E2E_NODES - 2, "failed": 1, "updated": 1}
