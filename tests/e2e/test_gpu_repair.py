"""GPU resets that repair, with no operator: agent metrics -> Prometheus -> Alertmanager -> webhook
-> the agent resets the GPU -> the node stays with its tenant if the GPU is healthy again, and is
quarantined and replaced if not; and a repair that no message was ever sent for is still made."""

import time
from io import StringIO

from django.core.management import call_command

from fleet.models import Node
from remediation import rules, services
from remediation.models import Remediation
from tests.support.factories import alert, make_available, payload
from tests.support.processes import wait_for
from tests.support.tenancy import active_under_watch, state_of

RESET_XID = 109  # context switch timeout: NVIDIA's immediate action is a GPU reset
assert rules.XIDS[RESET_XID].action is rules.Action.RESET_GPU


def test_a_transient_xid_is_repaired_by_a_gpu_reset_and_a_stuck_one_is_quarantined_and_replaced(bmcsim, control_plane):
    reservation = active_under_watch(control_plane)
    first, second = Node.objects.filter(reservation=reservation).order_by("name")[:2]

    injected = time.monotonic()
    transient = {"node": first.name, "kind": "xid", "gpu": 2, "xid": RESET_XID, "clears": "gpu_reset"}
    assert bmcsim.post("/bmcsim/v1/faults", json=transient).status_code == 201
    wait_for("the repair", lambda: Remediation.objects.filter(node=first, status="repaired").exists(), timeout=60)
    print(f"\nXID {RESET_XID} -> repaired by a GPU reset in {time.monotonic() - injected:.1f} s")
    repaired = Remediation.objects.get(node=first, alert_status="firing")
    assert (repaired.action, repaired.step, repaired.gpu) == ("reset_gpu", "gpu_reset", 2)
    assert repaired.reason.endswith("healthy after a GPU reset")
    assert [e.step for e in repaired.timeline.all()] == ["alert_firing", "webhook_received", "gpu_reset", "repaired"]
    first.refresh_from_db()
    assert (first.state, first.reservation_id) == ("active", reservation.pk)  # still the tenant's
    assert state_of(reservation) == "active"

    stuck = {"node": second.name, "kind": "xid", "gpu": 5, "xid": RESET_XID, "clears": "reboot"}
    assert bmcsim.post("/bmcsim/v1/faults", json=stuck).status_code == 201
    wait_for("quarantine", lambda: Node.objects.get(pk=second.pk).state == "quarantined", timeout=60)
    wait_for("the replacement active", lambda: state_of(reservation) == "active", timeout=120)
    escalated = Remediation.objects.get(node=second, alert_status="firing")
    assert (escalated.status, escalated.step) == ("applied", "quarantine")
    assert escalated.reason.endswith("still unhealthy after a GPU reset")
    assert [e.step for e in escalated.timeline.all()] == [
        "alert_firing",
        "webhook_received",
        "gpu_reset",
        "quarantined",
    ]
    serving = Node.objects.filter(reservation=reservation)
    assert serving.count() == 4 and second not in serving and first in serving


def test_a_repair_whose_message_was_never_enqueued_is_made_by_the_reconciler(bmcsim, control_plane, settings):
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    node = make_available(list(Node.objects.order_by("name")))[0]
    bmcsim.reset(node.system_id, "On")  # its agent answers, and reports every GPU healthy
    # Received in this process: whatever it sends goes to the tests' own broker, which no worker reads.
    (pending,) = services.receive_alerts(
        rules.parse_webhook(payload(alert(node.name, xid=RESET_XID, name="GPUResetRequiredXid")))
    )
    assert pending.status == "pending"
    control_plane.start_worker("w1")
    control_plane.start_beat()
    wait_for("the repair", lambda: Remediation.objects.get(pk=pending.pk).status != "pending", timeout=60)
    repaired = Remediation.objects.get(pk=pending.pk)
    assert repaired.status == "repaired" and repaired.reason.endswith("healthy after a GPU reset")
    assert Node.objects.get(pk=node.pk).state == "available"
