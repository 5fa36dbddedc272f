"""Secure Boot for the images that need it, end to end with real workers against bmcsim: provisioning
enables it before booting such an image and checks that the node booted with it; an image that does
not need it leaves Secure Boot as it was. A node whose firmware cannot run Secure Boot (its platform
key deleted) fails provisioning naming why, and the reservation gets another node."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from fleet.models import AuditEvent, Image, Node, Pod
from reservations import services as reservations
from reservations.models import Tenant
from tests.e2e.conftest import E2E_NODES
from tests.support.ports import free_port
from tests.support.processes import wait_for
from tests.support.tenancy import state_of

WEB_PORT = free_port()
# The BMCs fetch config drives from the web server this test starts.
PLANE = {"GPUFLEET_CONFIG_DRIVE_BASE_URL": f"http://127.0.0.1:{WEB_PORT}"}
NEEDS_SECURE_BOOT = "rocky-9"


def start(bmcsim, control_plane, tmp_path) -> None:
    """bmcsim's fleet enrolled with no firmware baseline, so Secure Boot stays off as it left the
    factory; its images in the catalogue, rocky-9 marked as needing Secure Boot as an operator's
    catalogue says it; then the control plane's processes, until every node is available."""
    catalogue = bmcsim.get("/bmcsim/v1/images").json()
    for image in catalogue["images"]:
        image["needs_secure_boot"] = image["name"] == NEEDS_SECURE_BOOT
    (tmp_path / "images.json").write_text(json.dumps(catalogue))
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    call_command("import_images", str(tmp_path / "images.json"), stdout=StringIO())
    control_plane.configure_attestation()
    control_plane.start_web(port=WEB_PORT)
    control_plane.start_worker("w1")
    control_plane.start_worker("w2")
    control_plane.start_beat()
    wait_for("every node available", lambda: Node.objects.filter(state="available").count() == E2E_NODES, 180)


def secure_boot(bmcsim, node: Node) -> dict:
    return bmcsim.get(f"/redfish/v1/Systems/{node.name}/SecureBoot").json()


def secure_boot_measured(bmcsim, node: Node) -> str:
    """What the node's last boot measured of Secure Boot into PCR 7, as its event log describes it."""
    log = bmcsim.get(f"/bmcsim/v1/nodes/{node.name}/event-log").json()["event_log"]
    return next(event["description"] for event in log if event["pcr"] == 7)


def provisioning_steps(node: Node) -> list[str]:
    return list(
        AuditEvent.objects.filter(node=node, event="step_changed", from_state="provisioning")
        .order_by("id")
        .values_list("reason", flat=True)
    )


@pytest.mark.parametrize("control_plane", [PLANE], indirect=True)
def test_an_image_that_needs_secure_boot_boots_with_it_on_and_another_leaves_it_off(bmcsim, control_plane, tmp_path):
    start(bmcsim, control_plane, tmp_path)
    assert not any(secure_boot(bmcsim, node)["SecureBootEnable"] for node in Node.objects.all())
    acme = Tenant.objects.create(name="acme")
    needing = reservations.create_reservation(
        tenant=acme, node_count=1, image=Image.objects.get(name=NEEDS_SECURE_BOOT), actor="test"
    )
    default = reservations.create_reservation(tenant=acme, node_count=1, actor="test")
    assert default.image is not None and not default.image.needs_secure_boot
    wait_for("both reservations active", lambda: state_of(needing) == state_of(default) == "active", 120)

    node = Node.objects.get(reservation=needing)
    assert secure_boot(bmcsim, node)["SecureBootEnable"] is True
    assert secure_boot(bmcsim, node)["SecureBootCurrentBoot"] == "Enabled"
    assert secure_boot_measured(bmcsim, node) == "EV_EFI_VARIABLE_DRIVER_CONFIG SecureBoot 01 (enabled)"
    steps = provisioning_steps(node)
    assert steps.index("enable_secure_boot_for_image") + 1 == steps.index("boot_tenant_image")
    assert steps.index("wait_for_agent") + 1 == steps.index("check_secure_boot_for_image")

    other = Node.objects.get(reservation=default)
    assert secure_boot(bmcsim, other)["SecureBootEnable"] is False
    assert secure_boot(bmcsim, other)["SecureBootCurrentBoot"] == "Disabled"
    assert secure_boot_measured(bmcsim, other) == "EV_EFI_VARIABLE_DRIVER_CONFIG SecureBoot 00 (disabled)"


@pytest.mark.parametrize("control_plane", [PLANE], indirect=True)
def test_a_node_that_cannot_run_secure_boot_fails_provisioning_and_is_replaced(bmcsim, control_plane, tmp_path):
    start(bmcsim, control_plane, tmp_path)
    first = Node.objects.filter(state="available", rack__pod__name="p2").order_by("name").first()
    assert first is not None
    deleted = bmcsim.post(
        f"/redfish/v1/Systems/{first.name}/SecureBoot/Actions/SecureBoot.ResetKeys",
        json={"ResetKeysType": "DeletePK"},
    )
    assert deleted.status_code == 204 and secure_boot(bmcsim, first)["SecureBootMode"] == "SetupMode"

    reservation = reservations.create_reservation(
        tenant=Tenant.objects.create(name="acme"),
        node_count=1,
        pod=Pod.objects.get(name="p2"),
        image=Image.objects.get(name=NEEDS_SECURE_BOOT),
        actor="test",
    )
    assert list(Node.objects.filter(reservation=reservation)) == [first]  # best fit puts it on that node first
    wait_for("the reservation active on another node", lambda: state_of(reservation) == "active", 120)

    failed = AuditEvent.objects.get(node=first, event="provision_failed")
    assert failed.reason == (
        f"check_secure_boot_for_image: {NEEDS_SECURE_BOOT} needs Secure Boot, but the node booted with it"
        " Disabled (SecureBootEnable true, SecureBootMode SetupMode)"
    )
    replacement = Node.objects.get(reservation=reservation)
    assert replacement != first
    assert secure_boot(bmcsim, replacement)["SecureBootCurrentBoot"] == "Enabled"
