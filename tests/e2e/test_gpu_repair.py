"""The remediation ladders, with no operator: agent metrics -> Prometheus -> Alertmanager -> webhook
-> a GPU reset through the agent, or a reboot and then a power cycle through the BMC -> the node
stays with its tenant once the GPU is healthy again, and is quarantined and replaced if no rung
helps; and a repair that no message was ever sent for is still made."""

import time
from io import StringIO

import pytest
from django.core.management import call_command

from fleet.models import AuditEvent, Node
from remediation import rules, services
from remediation.models import Remediation
from reservations.models import Webhook, WebhookDelivery
from tests.support.agent_credentials import boot_service_image
from tests.support.factories import alert, make_available, payload
from tests.support.processes import wait_for
from tests.support.tenancy import active_under_watch, state_of

RESET_XID = 109  # context switch timeout: NVIDIA's immediate action is a GPU reset
LOST_XID = 79  # fallen off the bus: NVIDIA's immediate action is a reboot
assert rules.LADDERS[rules.XIDS[RESET_XID].ladder].steps[0] is rules.Step.GPU_RESET
assert rules.LADDERS[rules.XIDS[LOST_XID].ladder].steps[:2] == (rules.Step.REBOOT, rules.Step.POWER_CYCLE)


def inject(bmcsim, node: Node, *, gpu: int, xid: int, clears: str) -> float:
    fault = {"node": node.name, "kind": "xid", "gpu": gpu, "xid": xid, "clears": clears}
    assert bmcsim.post("/bmcsim/v1/faults", json=fault).status_code == 201
    return time.monotonic()


def ended(node: Node) -> Remediation:
    """The one remediation that acted on the node's fault, once it has ended. The agent reports
    the XID at once and Prometheus' alert follows: the two must never both act."""
    acted = Remediation.objects.filter(node=node).exclude(status="no_action")
    wait_for(f"{node.name}'s remediation to end", lambda: acted.exists() and not acted.filter(status="pending"), 90)
    (remediation,) = acted
    return remediation


def never_acted_twice(node: Node) -> None:
    """One remediation acted, whichever path came first: the agent's push, as a rule well before a
    1 s scrape, or Prometheus' alert on a machine loaded enough to hold the push back; the other is
    a no_action naming it."""
    (acted,) = Remediation.objects.filter(node=node).exclude(status="no_action")
    assert acted.alert in (rules.AGENT_XID_REPORT, "GPUFatalXid")
    for later in Remediation.objects.filter(node=node, status="no_action", alert_status="firing"):
        assert later.reason.endswith(f"already acted on by remediation {acted.pk} ({acted.alert})")


def timeline(remediation: Remediation) -> list[str]:
    return [e.step for e in remediation.timeline.all()]


def rung_seconds(remediation: Remediation) -> str:
    """Each step's time after the alert began, as the audit shows it."""
    events = list(remediation.timeline.all())
    return ", ".join(f"{e.step} +{(e.at - events[0].at).total_seconds():.1f}s" for e in events[1:])


# Four nodes of one pod acted on within minutes: over the default pod cap of 3 (every rung counts),
# and, each reported by the tenant's own node, over the tenant's default fault budget of 3.
@pytest.mark.parametrize(
    "control_plane", [{"GPUFLEET_REMEDIATION_POD_CAP": "4", "GPUFLEET_TENANT_FAULT_BUDGET": "4"}], indirect=True
)
def test_each_rung_of_the_ladder_repairs_what_it_can_and_a_dead_gpu_is_quarantined_and_replaced(bmcsim, control_plane):
    reservation = active_under_watch(control_plane)
    Webhook.objects.create(
        tenant=reservation.tenant,
        url="https://hooks.acme.test/gpu",
        events=["node.remediation"],
        secret="whsec_Z3B1LXJlcGFpci1lMmUtd2ViaG9vay1rZXk=",
    )
    transient, rebooted, cycled, dead = Node.objects.filter(reservation=reservation).order_by("name")

    injected = inject(bmcsim, transient, gpu=2, xid=RESET_XID, clears="gpu_reset")
    repaired = ended(transient)
    print(f"\nXID {RESET_XID} -> repaired by a GPU reset in {time.monotonic() - injected:.1f} s")
    assert (repaired.status, repaired.action, repaired.step, repaired.gpu) == ("repaired", "gpu_hang", "gpu_reset", 2)
    assert repaired.reason.endswith("healthy after a GPU reset")
    assert timeline(repaired) == ["alert_firing", "webhook_received", "tenant_notified", "gpu_reset", "repaired"]

    injected = inject(bmcsim, rebooted, gpu=4, xid=LOST_XID, clears="reboot")
    repaired = ended(rebooted)
    print(f"XID {LOST_XID} -> repaired by a reboot in {time.monotonic() - injected:.1f} s ({rung_seconds(repaired)})")
    assert (repaired.status, repaired.action, repaired.step) == ("repaired", "gpu_lost", "reboot")
    (audited,) = AuditEvent.objects.filter(node=rebooted, event="power_action")
    assert (audited.actor, audited.reason) == ("remediation:alertmanager", f"remediation {repaired.pk}: reboot")
    assert timeline(repaired) == ["alert_firing", "webhook_received", "tenant_notified", "reboot", "repaired"]

    injected = inject(bmcsim, cycled, gpu=1, xid=LOST_XID, clears="power_cycle")
    repaired = ended(cycled)
    print(f"XID {LOST_XID} -> repaired by a power cycle in {time.monotonic() - injected:.1f} s")
    assert (repaired.status, repaired.step) == ("repaired", "power_cycle")
    assert repaired.reason.endswith("still unhealthy after a reboot; healthy after a power cycle")
    assert timeline(repaired) == [
        "alert_firing",
        "webhook_received",
        "tenant_notified",
        "reboot",
        "escalated",
        "tenant_notified",
        "power_cycle",
        "repaired",
    ]
    for node in (transient, rebooted, cycled):
        never_acted_twice(node)
        node.refresh_from_db()
        assert (node.state, node.reservation_id) == ("active", reservation.pk)  # still the tenant's
    assert state_of(reservation) == "active"
    told = WebhookDelivery.objects.filter(event="node.remediation").order_by("id")
    assert [(d.payload["data"]["node"], d.payload["data"]["step"]) for d in told] == [
        (transient.name, "gpu_reset"),
        (rebooted.name, "reboot"),
        (cycled.name, "reboot"),
        (cycled.name, "power_cycle"),
    ]

    injected = inject(bmcsim, dead, gpu=5, xid=LOST_XID, clears="never")
    wait_for("quarantine", lambda: Node.objects.get(pk=dead.pk).state == "quarantined", timeout=90)
    print(f"XID {LOST_XID} on a dead GPU -> quarantined in {time.monotonic() - injected:.1f} s")
    wait_for("the replacement active", lambda: state_of(reservation) == "active", timeout=120)
    never_acted_twice(dead)
    escalated = Remediation.objects.exclude(status="no_action").get(node=dead)
    assert (escalated.status, escalated.step) == ("applied", "quarantine")
    assert escalated.reason.endswith("still unhealthy after a reboot; still unhealthy after a power cycle")
    assert timeline(escalated)[-4:] == ["tenant_notified", "power_cycle", "escalated", "quarantined"]
    serving = Node.objects.filter(reservation=reservation)
    assert serving.count() == 4 and dead not in serving and transient in serving


def test_a_repair_whose_message_was_never_enqueued_is_made_by_the_reconciler(bmcsim, control_plane, settings):
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    node = make_available(list(Node.objects.order_by("name")))[0]
    # Booted with a service boot's credentials, as a worker would have: its agent answers the
    # control plane's token, and reports every GPU healthy.
    drive, _ = boot_service_image(node)
    bmcsim.boot_with_drive_at(node.system_id, f"{control_plane.start_web()}/v1/config-drives/{drive}")
    # Received in this process: whatever it sends goes to the tests' own broker, which no worker reads.
    [firing] = rules.parse_webhook(payload(alert(node.name, xid=RESET_XID, name="GPUResetRequiredXid")))
    assert isinstance(firing, rules.Alert)
    (pending,) = services.receive_alerts([firing])
    assert pending.status == "pending"
    control_plane.start_worker("w1")
    control_plane.start_beat()
    wait_for("the repair", lambda: Remediation.objects.get(pk=pending.pk).status != "pending", timeout=60)
    repaired = Remediation.objects.get(pk=pending.pk)
    assert repaired.status == "repaired" and repaired.reason.endswith("healthy after a GPU reset")
    assert Node.objects.get(pk=node.pk).state == "available"
