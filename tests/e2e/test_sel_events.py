"""BMC event logs as a fault source, with no operator: bmcsim's BMC logs an event in a node's SEL,
the real beat and workers read it over Redfish, and remediation's rules decide. A critical event
under a tenant quarantines the node through the blast-radius cap and the reservation heals onto a
replacement; a warning is only recorded; over the cap a critical event is recorded as suppressed."""

import time
from io import StringIO

import pytest
from django.core.management import call_command

from fleet.models import AuditEvent, Node
from remediation import rules, services
from remediation.models import BMCEventLogCursor, Remediation
from reservations.models import Webhook, WebhookDelivery
from tests.support.factories import make_available
from tests.support.processes import wait_for
from tests.support.tenancy import active_under_watch, state_of

PSU = "Power.1.0.1.PowerSupplyFailed"
FAN = "Environmental.1.1.0.FanFailed"
SEL_POLL = {"GPUFLEET_SEL_POLL_SECONDS": "1"}


def log_event(bmcsim, node: Node, **event) -> None:
    answer = bmcsim.post("/bmcsim/v1/faults", json={"node": node.name, "kind": "sel", **event})
    assert answer.status_code == 201, answer.text


def read_once(*nodes: Node) -> None:
    """The nodes' logs read once: what they held then is history, what they log next is acted on."""
    read = BMCEventLogCursor.objects.filter(node__in=nodes, read_at__isnull=False)
    wait_for("the event logs read", lambda: read.count() == len(nodes), timeout=60)


def recorded(node: Node, alert: str) -> Remediation:
    found = Remediation.objects.filter(node=node, alert=alert)
    wait_for(f"{alert} on {node.name} recorded", found.exists, timeout=30)
    return found.get()


@pytest.mark.parametrize("control_plane", [SEL_POLL], indirect=True)
def test_a_critical_sel_event_under_a_tenant_quarantines_the_node_and_the_reservation_heals(bmcsim, control_plane):
    reservation = active_under_watch(control_plane)
    Webhook.objects.create(
        tenant=reservation.tenant,
        url="https://hooks.acme.test/nodes",
        events=["node.quarantined"],
        secret="whsec_Z3B1LXJlcGFpci1lMmUtd2ViaG9vay1rZXk=",
    )
    victim = Node.objects.filter(reservation=reservation).order_by("name").first()
    assert victim is not None
    read_once(victim)

    log_event(bmcsim, victim, message_id=FAN)
    warned = recorded(victim, rules.BMC_WARNING_EVENT)
    assert (warned.action, warned.status, warned.reason) == (
        "none",
        "no_action",
        f"sel: {FAN}: Fan 'Fan 3' has failed.",
    )
    assert Node.objects.get(pk=victim.pk).state == "active" and state_of(reservation) == "active"

    injected = time.monotonic()
    log_event(bmcsim, victim, message_id=PSU, severity="Critical", args=["PSU2"])
    wait_for("quarantine", lambda: Node.objects.get(pk=victim.pk).state == "quarantined", timeout=60)
    to_quarantine = time.monotonic() - injected
    wait_for("the replacement active", lambda: state_of(reservation) == "active", timeout=120)
    to_replacement = time.monotonic() - injected
    print(f"\nSEL {PSU} -> quarantined in {to_quarantine:.1f} s, replacement active in {to_replacement:.1f} s")

    victim.refresh_from_db()
    assert victim.quarantine_reason == f"hardware_fault: sel: {PSU}: Power supply 'PSU2' has failed."
    acted = Remediation.objects.get(node=victim, alert=rules.BMC_CRITICAL_EVENT)
    assert (acted.status, acted.action, acted.step, acted.reservation) == (
        "applied",
        "hardware_failed",
        "quarantine",
        reservation,
    )
    (quarantine,) = AuditEvent.objects.filter(node=victim, event="hardware_fault")
    assert quarantine.actor == services.AUTOMATIC_ACTOR  # counted against the cap
    (told,) = WebhookDelivery.objects.filter(event="node.quarantined")
    assert told.payload["data"]["node"] == victim.name
    serving = Node.objects.filter(reservation=reservation)
    assert serving.count() == 4 and victim not in serving
    assert {n.rack.pod.name for n in serving} == {"p2"}


@pytest.mark.parametrize(
    "control_plane",
    [{**SEL_POLL, "GPUFLEET_REMEDIATION_CAP": "1", "GPUFLEET_IDLE_DIAGNOSTICS_AT_ONCE": "0"}],
    indirect=True,
)
def test_over_the_cap_a_critical_sel_event_is_recorded_as_suppressed(bmcsim, control_plane):
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    first, second = make_available(list(Node.objects.order_by("name")[:2]))
    control_plane.start_worker("w1")
    control_plane.start_beat()
    read_once(first, second)

    log_event(bmcsim, first, message_id=PSU, severity="Critical")
    wait_for("the first quarantine", lambda: Node.objects.get(pk=first.pk).state == "quarantined", timeout=30)
    log_event(bmcsim, second, message_id=PSU, severity="Critical")
    suppressed = recorded(second, rules.BMC_CRITICAL_EVENT)
    assert suppressed.status == "suppressed"
    assert suppressed.reason.endswith("suppressed: 1 automatic remediation in the last 10 minutes (cap 1)")
    assert [e.step for e in suppressed.timeline.all()] == ["alert_firing", "webhook_received", "suppressed"]
    assert Node.objects.get(pk=second.pk).state == "available"
