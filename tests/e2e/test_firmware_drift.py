"""The firmware baseline end to end, with real workers against bmcsim: a tenant tampers with its
node's BMC firmware; after the release the wipe succeeds, inspection finds the drift, reflashes
the BMC, reads it again, and the node comes back available with a signed result that lists the
repaired component. Firmware that survives its reflash leaves the node quarantined firmware_drift.
A kernel release operators retire fails the next inspection of a node that boots it."""

import json
from io import StringIO

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from attestation.models import ReferenceValue
from fleet.models import AuditEvent, Node
from reservations import services as reservations
from reservations.models import Tenant
from tests.support import REPO_ROOT
from tests.support.invariants import check_all
from tests.support.processes import wait_for
from tests.support.stack import verify_offline
from tests.support.tenancy import state_of


def seed_with_baseline(bmcsim) -> list[Node]:
    """bmcsim's fleet enrolled, and the demo's baseline: bmcsim's newest releases, its factory BIOS
    settings, Secure Boot on (off from bmcsim's factory: the first inspection turns it on)."""
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    call_command(
        "set_firmware_baseline",
        str(REPO_ROOT / "deploy" / "firmware-baseline.json"),
        "--releases",
        f"{bmcsim.url}/bmcsim/v1/firmware-releases",
        stdout=StringIO(),
    )
    return list(Node.objects.order_by("name"))


def start(control_plane) -> None:
    control_plane.configure_attestation()
    control_plane.start_worker("w1")
    control_plane.start_worker("w2")
    control_plane.start_beat()


def tenants_node_with_tampered_bmc(bmcsim, control_plane, **tamper) -> Node:
    """Every node up, one reserved and active, and its tenant replacing the BMC's firmware, then leaving."""
    nodes = seed_with_baseline(bmcsim)
    start(control_plane)
    everyone = [n.pk for n in nodes]
    wait_for(
        "every node available",
        lambda: Node.objects.filter(pk__in=everyone, state="available").count() == len(nodes),
        timeout=240,
    )
    reservation = reservations.create_reservation(
        tenant=Tenant.objects.create(name="mallory"), node_count=1, actor="test"
    )
    node = Node.objects.get(reservation=reservation)
    wait_for("the tenant's node active", lambda: state_of(reservation) == "active", timeout=120)
    fault = {"node": node.name, "kind": "firmware_tamper", "component": "BMC", **tamper}
    assert bmcsim.post("/bmcsim/v1/faults", json=fault).status_code in (200, 201)
    reservations.release_reservation(reservation_id=reservation.pk, actor="tenant:mallory")
    return node


def path_since_release(node: Node) -> list[str]:
    events = list(
        AuditEvent.objects.filter(node=node)
        .exclude(event__in=["step_changed", "networks_confirmed"])  # the steps, and the fabrics read back
        .order_by("id")
        .values_list("event", flat=True)
    )
    return events[events.index("released") :]


def bmc_firmware(bmcsim, node: Node) -> dict:
    return bmcsim.get(f"/redfish/v1/UpdateService/FirmwareInventory/{node.name}-BMC").json()


def newest_bmc_release(bmcsim) -> dict:
    return bmcsim.get("/bmcsim/v1/firmware-releases").json()["components"]["BMC"][-1]


def test_a_tampered_bmc_is_reflashed_after_the_wipe_and_the_signed_result_lists_it_repaired(
    bmcsim, control_plane, tmp_path
):
    node = tenants_node_with_tampered_bmc(bmcsim, control_plane)
    assert bmc_firmware(bmcsim, node)["Version"].endswith("-custom")
    wait_for("the node wiped, repaired and available", lambda: state_of_node(node) == "available", timeout=180)

    assert path_since_release(node) == [
        "released",
        "wipe_succeeded",
        "firmware_checked",
        "inspection_passed",
        "attestation_passed",
    ]
    steps = list(
        AuditEvent.objects.filter(node=node, event="step_changed", reason__contains="firmware")
        .order_by("-id")
        .values_list("reason", flat=True)[:3]
    )
    assert steps[::-1] == ["check_firmware", "finish_firmware_update", "recheck_firmware"]
    released = newest_bmc_release(bmcsim)
    assert bmc_firmware(bmcsim, node)["Version"] == released["release"]

    answer = APIClient().get(f"/v1/nodes/{node.name}/attestation").json()
    firmware = answer["claims"]["firmware"]
    assert firmware["repaired"] == ["BMC"]
    assert firmware["components"]["BMC"] == {"version": released["release"], "digest": released["digest"]}
    assert firmware["secure_boot"] == "Enabled"
    verified = verify_offline(answer["token"], tmp_path)
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["firmware"] == firmware  # what the tenant reads, signed
    assert check_all() == []  # the whole history, as manage.py check_invariants reads it


def test_bmc_firmware_that_survives_its_reflash_quarantines_the_node_firmware_drift(bmcsim, control_plane):
    node = tenants_node_with_tampered_bmc(bmcsim, control_plane, survives_reflash=True)
    wait_for("quarantine", lambda: state_of_node(node) == "quarantined", timeout=180)

    assert path_since_release(node) == ["released", "wipe_succeeded", "firmware_drift"]
    released = newest_bmc_release(bmcsim)
    reason = Node.objects.get(pk=node.pk).quarantine_reason
    assert reason.startswith(
        f"firmware_drift: BMC expected {released['release']} (sha256 {released['digest'][:16]}…) "
        f"found {released['release']}-custom (sha256 "
    ), reason
    assert reason.endswith("(after repairing BMC)"), reason


def state_of_node(node: Node) -> str:
    return Node.objects.values_list("state", flat=True).get(pk=node.pk)


def test_a_retired_kernel_fails_the_next_inspection_and_waits_for_no_other(bmcsim, control_plane):
    """An operator retires the kernel every node boots: the node a tenant hands back fails its
    attestation release_retired and is quarantined; the others stay available until theirs."""
    nodes = seed_with_baseline(bmcsim)
    start(control_plane)
    wait_for(
        "every node available",
        lambda: Node.objects.filter(state="available").count() == len(nodes),
        timeout=240,
    )
    kernel = bmcsim.get("/bmcsim/v1/reference-values").json()["boot"]["components"]["kernel"][-1]["release"]
    operator = Client()
    operator.force_login(get_user_model().objects.create_superuser("operator", password="operator-password-1"))
    answer = operator.post(
        "/admin/attestation/referencevalue/",
        {
            "action": "retire",
            ACTION_CHECKBOX_NAME: list(ReferenceValue.objects.filter(release=kernel).values_list("pk", flat=True)),
        },
    )
    assert answer.status_code == 302
    assert ReferenceValue.objects.filter(release=kernel, retired_at__isnull=True).count() == 0

    reservation = reservations.create_reservation(tenant=Tenant.objects.create(name="bob"), node_count=1, actor="test")
    node = Node.objects.get(reservation=reservation)
    wait_for("the tenant's node active", lambda: state_of(reservation) == "active", timeout=120)
    reservations.release_reservation(reservation_id=reservation.pk, actor="tenant:bob")
    wait_for("quarantine", lambda: state_of_node(node) == "quarantined", timeout=180)

    assert path_since_release(node)[-1] == "attestation_failed"
    reason = Node.objects.get(pk=node.pk).quarantine_reason
    assert f"release_retired kernel: expected a release not retired, found {kernel} (retired)" in reason, reason
    assert Node.objects.filter(state="available").count() == len(nodes) - 1
