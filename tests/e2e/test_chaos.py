"""The demo's two incidents, run by the chaos service against the whole stack with no operator."""

import subprocess
import sys

from django.test import override_settings
from rest_framework.test import APIClient

from console.invariants import dirty_nodes_made_available
from fleet.models import Node
from reservations.models import Reservation
from tests.support import REPO_ROOT
from tests.support.bmcsim import start_bmcsim
from tests.support.stack import ControlPlane, verify_offline


def test_both_incidents_play_out_with_no_operator(transactional_db, tmp_path, private_redis):
    bmcsim = start_bmcsim(tmp_path / "bmcsim", nodes=50)
    plane = ControlPlane(tmp_path, bmcsim.url, private_redis)
    try:
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

    assert list(dirty_nodes_made_available()) == []
