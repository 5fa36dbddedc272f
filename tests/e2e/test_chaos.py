"""The demo's four incidents, run by the chaos service against the whole stack with no operator."""

import re
import subprocess
import sys
from io import StringIO

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client, override_settings
from rest_framework.test import APIClient

from console.invariants import dirty_nodes_made_available
from fleet.models import AuditEvent, Node
from fleet.network_selectors import reservation_networks
from reservations.models import Reservation
from tests.support import REPO_ROOT
from tests.support.bmcsim import start_bmcsim
from tests.support.stack import ControlPlane, verify_offline


def test_the_incidents_play_out_with_no_operator(transactional_db, tmp_path, private_redis):
    bmcsim = start_bmcsim(tmp_path / "bmcsim", nodes=50)
    # The fabric syncer reads the fabrics back every second: incident 4's drift is put back within one.
    plane = ControlPlane(tmp_path, bmcsim.url, private_redis, GPUFLEET_FABRIC_SYNC_SECONDS="1")
    try:
        call_command(  # as make demo does: the firmware incident needs a baseline
            "set_firmware_baseline",
            str(REPO_ROOT / "deploy" / "firmware-baseline.json"),
            "--releases",
            f"{bmcsim.url}/bmcsim/v1/firmware-releases",
            stdout=StringIO(),
        )
        plane.start_stack()
        # As make demo does: incident 4's tenant logs in to its node, which boots an image at an address.
        call_command("import_images", f"{bmcsim.url}/bmcsim/v1/images", stdout=StringIO())
        for pod in ("p1", "p2"):
            call_command("add_address_pool", pod, f"127.100.{pod[1]}.0/24", "--ssh-port", str(bmcsim.ssh_port))
        chaos = subprocess.run(
            [sys.executable, "manage.py", "chaos", "--pause", "2", "--timeout", "240", "--bmcsim-url", bmcsim.url],
            cwd=REPO_ROOT,
            env=plane.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        print(chaos.stdout)  # what the demo's operator reads, shown with a failure below
        assert chaos.returncode == 0, chaos.stderr
    finally:
        plane.stop()
        bmcsim.stop()

    acme = Reservation.objects.get(tenant__name="acme")
    serving = Node.objects.filter(reservation=acme, state="active")
    assert acme.state == "active" and serving.count() == 12
    assert {n.rack.pod.name for n in serving} == {"p2"}
    xid_node = Node.objects.get(quarantine_reason__startswith="hardware_fault: XID 79 on GPU 3")

    implanted = Node.objects.get(
        quarantine_reason__startswith="attestation_failed", quarantine_reason__contains="kernel"
    )
    gpu_implanted = Node.objects.exclude(pk=implanted.pk).get(quarantine_reason__startswith="attestation_failed")
    assert implanted != xid_node
    with override_settings(GPUFLEET_SIGNING_KEY=str(plane.signing_keys)):  # the workers' keys
        result = APIClient().get(f"/v1/nodes/{implanted.name}/attestation").json()
        assert result["verified"] is True
        assert verify_offline(result["token"], tmp_path).returncode == 3  # genuine, and contraindicated
    assert result["claims"]["submods"][implanted.name]["ear.status"] == "contraindicated"

    # Incident 2 again: the VBIOS change outlived the wipe; the GPU's measurements through its BMC name it.
    assert "gpu5" in gpu_implanted.quarantine_reason and "kernel" not in gpu_implanted.quarantine_reason
    with override_settings(GPUFLEET_SIGNING_KEY=str(plane.signing_keys)):
        claims = APIClient().get(f"/v1/nodes/{gpu_implanted.name}/attestation").json()["claims"]
    out_of_band = [g for g in claims["gpus"] if g["gpu_evidence"]["source"] == "out_of_band"]
    assert {g["index"] for g in out_of_band if g["gpu_evidence"]["status"] == "contraindicated"} == {5}
    [measured] = next(g for g in out_of_band if g["index"] == 5)["gpu_evidence"]["failures"]
    assert (measured["code"], measured["component"]) == ("gpu_measurement", "gpu5.out_of_band.vbios")

    # Commissioning brought every node to the baseline (Secure Boot on); only the tampered BMC is an incident.
    (reflashed,) = AuditEvent.objects.filter(event="firmware_checked", detail__repaired=["BMC"])
    assert reflashed.node not in (
        xid_node,
        implanted,
        gpu_implanted,
    )  # available again (eve's node next, in incident 4)
    assert AuditEvent.objects.filter(node=reflashed.node, event="attestation_passed", id__gt=reflashed.pk).exists()
    assert reflashed.reason == "matches baseline bmcsim-default after repairing BMC"
    operator = Client()  # the incidents page is a signed-in viewer's (console/pages/viewers.py)
    operator.force_login(get_user_model().objects.create_user("chaos-operator", is_staff=True))
    html = operator.get("/incidents").content.decode()
    assert html.count('data-incident="firmware-') == 1
    incident = html[html.index(f'data-incident="firmware-{reflashed.pk}"') :]
    steps = re.findall(r'<li class="done" data-step="(\w+)">', incident[: incident.index("</article>")])
    assert steps == ["released", "wipe_succeeded", "reflash", "firmware_checked", "available"]

    # Incident 4: eve's node reached none of acme's addresses, and its port moved by hand was put back.
    assert re.search(r"none of the 24 answered; \S+'s own \S+ did", chaos.stdout), chaos.stdout
    (drift,) = AuditEvent.objects.filter(event="fabric_drift_repaired")
    assert AuditEvent.objects.filter(node=drift.node, event="released", actor="tenant:eve").exists()
    acme_ethernet = reservation_networks(acme.pk)["ethernet"]
    assert acme_ethernet is not None
    acme_vlan = acme_ethernet["segment"]
    assert drift.detail["fabric"] == "ethernet" and [p["found"] for p in drift.detail["ports"]] == [str(acme_vlan)]
    assert re.search(rf"{drift.node.name}'s port put back \d+\.\d s after it was moved", chaos.stdout)
    incident = html[html.index(f'data-incident="fabric-{drift.pk}"') :]
    incident = incident[: incident.index("</article>")]
    assert f"fabric drift on {drift.node.name}" in incident and "window " in incident
    assert re.findall(r'<li class="done" data-step="(\w+)">', incident) == ["found", "put_back"]

    assert list(dirty_nodes_made_available()) == []
