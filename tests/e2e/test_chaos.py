"""The demo's three incidents, run by the chaos service against the whole stack with no operator."""

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
from reservations.models import Reservation
from tests.support import REPO_ROOT
from tests.support.bmcsim import start_bmcsim
from tests.support.stack import ControlPlane, verify_offline


def test_the_incidents_play_out_with_no_operator(transactional_db, tmp_path, private_redis):
    bmcsim = start_bmcsim(tmp_path / "bmcsim", nodes=50)
    plane = ControlPlane(tmp_path, bmcsim.url, private_redis)
    try:
        call_command(  # as make demo does: the firmware incident needs a baseline
            "set_firmware_baseline",
            str(REPO_ROOT / "deploy" / "firmware-baseline.json"),
            "--releases",
            f"{bmcsim.url}/bmcsim/v1/firmware-releases",
            stdout=StringIO(),
        )
        plane.start_stack()
        chaos = subprocess.run(
            [sys.executable, "manage.py", "chaos", "--pause", "2", "--timeout", "240", "--bmcsim-url", bmcsim.url],
            cwd=REPO_ROOT,
            env=plane.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert chaos.returncode == 0, chaos.stdout + chaos.stderr
    finally:
        plane.stop()
        bmcsim.stop()

    acme = Reservation.objects.get(tenant__name="acme")
    serving = Node.objects.filter(reservation=acme, state="active")
    assert acme.state == "active" and serving.count() == 12
    assert {n.rack.pod.name for n in serving} == {"p2"}
    xid_node = Node.objects.get(quarantine_reason__startswith="hardware_fault: XID 79 on GPU 3")

    implanted = Node.objects.get(quarantine_reason__startswith="attestation_failed")
    assert "kernel" in implanted.quarantine_reason and implanted != xid_node
    with override_settings(GPUFLEET_SIGNING_KEY=str(plane.signing_keys)):  # the workers' keys
        result = APIClient().get(f"/v1/nodes/{implanted.name}/attestation").json()
        assert result["verified"] is True
        assert verify_offline(result["token"], tmp_path).returncode == 3  # genuine, and contraindicated
    assert result["claims"]["submods"][implanted.name]["ear.status"] == "contraindicated"

    # Commissioning brought every node to the baseline (Secure Boot on); only the tampered BMC is an incident.
    (reflashed,) = AuditEvent.objects.filter(event="firmware_checked", detail__repaired=["BMC"])
    assert reflashed.node.state == "available" and reflashed.node not in (xid_node, implanted)
    assert reflashed.reason == "matches baseline bmcsim-default after repairing BMC"
    operator = Client()  # the incidents page is a signed-in viewer's (console/pages/viewers.py)
    operator.force_login(get_user_model().objects.create_user("chaos-operator", is_staff=True))
    html = operator.get("/incidents").content.decode()
    assert html.count('data-incident="firmware-') == 1
    incident = html[html.index(f'data-incident="firmware-{reflashed.pk}"') :]
    steps = re.findall(r'<li class="done" data-step="(\w+)">', incident[: incident.index("</article>")])
    assert steps == ["released", "wipe_succeeded", "reflash", "firmware_checked", "available"]

    assert list(dirty_nodes_made_available()) == []
