"""The remediation ladder in the database: a tenant is warned and given its drain time before a
rung that takes its node, one ladder runs per node at a time, a repair left behind by a node
that moved on ends, and a shadow rule records its decision and changes nothing else."""

from datetime import timedelta

import pytest
from django.apps import apps
from django.core import management
from django.core.management.base import SystemCheckError
from django.utils import timezone

from fleet.models import AuditEvent, Node
from remediation import rules, selectors, services
from remediation.models import IncidentEvent, Remediation
from reservations.models import Reservation, Webhook, WebhookDelivery
from tests.support.factories import alert, drive, payload
from tests.support.invariants import check_all

pytestmark = pytest.mark.django_db(transaction=True)


def receive(*alerts) -> list[Remediation]:
    parsed = rules.parse_webhook(payload(*alerts))
    accepted = [entry for entry in parsed if isinstance(entry, rules.Alert)]
    assert accepted == parsed, "an alert was refused"
    return services.receive_alerts(accepted)


@pytest.fixture
def tenants_node(available_fleet, alices_reservation) -> Node:
    Reservation.objects.filter(pk=alices_reservation.pk).update(state="active")
    Webhook.objects.create(
        tenant=alices_reservation.tenant, url="https://hooks.example.test/", events=["node.remediation"], secret="s"
    )
    return drive(available_fleet[0], "provision_requested", "provision_succeeded", reservation=alices_reservation)


def test_a_reboot_under_a_tenant_waits_for_the_drain_time_after_telling_the_tenant(tenants_node):
    (remediation,) = receive(alert(tenants_node.name, xid=109, name="GPUResetRequiredXid"))
    told = WebhookDelivery.objects.get(event="node.remediation")
    assert told.payload["data"] | {"acts_at": None} == {
        "reservation": tenants_node.reservation_id,
        "node": tenants_node.name,
        "gpu": 3,
        "step": "gpu_reset",
        "reason": "XID 109 on GPU 3: context switch timeout",
        "acts_at": None,
    }
    assert remediation.recheck_due_at is not None
    assert remediation.recheck_due_at <= timezone.now()  # a GPU reset leaves the other GPUs alone: at once

    before = timezone.now()
    climbed = services.step_finished(remediation_id=remediation.pk, healthy=False, why="the reset failed")
    assert (climbed.status, climbed.step) == ("pending", "reboot")
    drain = rules.LADDERS["gpu_hang"].drain
    assert climbed.recheck_due_at is not None
    assert before + drain <= climbed.recheck_due_at <= timezone.now() + drain
    (_, reboot) = WebhookDelivery.objects.filter(event="node.remediation").order_by("id")
    assert reboot.payload["data"]["step"] == "reboot"
    assert reboot.payload["data"]["acts_at"] == climbed.recheck_due_at.isoformat()
    assert services.take_due_repairs(limit=10) == []  # not before the drain time is up


def test_a_lost_gpu_is_rebooted_at_once_even_under_a_tenant(tenants_node):
    (remediation,) = receive(alert(tenants_node.name, xid=79))
    assert (remediation.status, remediation.step) == ("pending", "reboot")
    assert services.take_due_repairs(limit=10) == [remediation.pk]
    assert list(remediation.timeline.values_list("step", flat=True)) == [
        "alert_firing",
        "webhook_received",
        "tenant_notified",
    ]


def test_an_application_fault_tells_the_tenant_and_does_nothing_else(tenants_node):
    (remediation,) = receive(alert(tenants_node.name, xid=13, name="GPUApplicationXid"))
    assert (remediation.status, remediation.step, remediation.action) == ("no_action", "", "application")
    assert WebhookDelivery.objects.get(event="node.remediation").payload["data"]["step"] is None
    assert Node.objects.get(pk=tenants_node.pk).state == "active"


def test_one_ladder_at_a_time_per_node(available_fleet):
    node = available_fleet[0]
    (first,) = receive(alert(node.name, xid=79))
    (again,) = receive(alert(node.name, name="GPUUnhealthy", n=1))
    assert first.status == "pending"
    assert (again.status, again.step) == ("no_action", "")
    assert f"already being repaired (remediation {first.pk})" in again.reason
    assert services.step_finished(remediation_id=first.pk, healthy=True).status == "repaired"
    (later,) = receive(alert(node.name, name="GPUUnhealthy", n=2))
    assert later.status == "pending"  # the first ladder has ended


def test_a_repair_whose_node_was_quarantined_meanwhile_ends_with_nothing_done(available_fleet):
    from workflows import repairs

    node = available_fleet[0]
    (pending,) = receive(alert(node.name, xid=79))
    drive(node, "operator_quarantine", reason="pulled for inspection")
    assert repairs.look_at_repair(pending.pk) == "no_action"
    pending.refresh_from_db()
    assert pending.recheck_due_at is None and pending.reason.endswith("is quarantined: left as it is")


def snapshot() -> dict[str, list[dict]]:
    """Every row of every table but the remediation app's own."""
    return {
        model._meta.label: list(model._default_manager.order_by("pk").values())
        for model in apps.get_models()
        if model._meta.app_label != "remediation" and model._meta.managed
    }


def test_a_shadow_rule_records_what_it_would_do_and_changes_nothing_else(tenants_node, available_fleet, settings):
    settings.REMEDIATION_SHADOW_RULES = ["gpu_lost", "hardware_failed", "gpu_hang", "application"]
    before = snapshot()
    remediations = receive(
        alert(tenants_node.name, xid=79),  # would reboot its tenant's node
        alert(available_fleet[1].name, n=1),  # would quarantine
        alert(available_fleet[2].name, xid=109, name="GPUResetRequiredXid", n=2),  # would reset a GPU
        alert(tenants_node.name, xid=13, name="GPUApplicationXid", n=3),  # would tell the tenant
    )
    assert snapshot() == before
    assert [(r.mode, r.status, r.step) for r in remediations] == [
        ("shadow", "no_action", "reboot"),
        ("shadow", "no_action", "quarantine"),
        ("shadow", "no_action", "gpu_reset"),
        ("shadow", "no_action", ""),
    ]
    assert remediations[0].reason.startswith("shadow: would reboot; XID 79 on GPU 3")
    assert IncidentEvent.objects.filter(step="shadow").count() == 3
    assert services.take_due_repairs(limit=10) == []


def test_shadow_mode_is_recorded_apart_from_what_was_enforced(available_fleet, settings):
    settings.REMEDIATION_SHADOW_RULES = ["gpu_lost"]
    (shadow,) = receive(alert(available_fleet[0].name, xid=79))
    (enforced,) = receive(alert(available_fleet[1].name, n=1))
    assert (shadow.mode, enforced.mode) == ("shadow", "enforce")
    assert Node.objects.get(pk=available_fleet[1].pk).state == "quarantined"
    # The shadow decision is no remediation of the node: it does not count towards a repeat offence.
    assert selectors.remediations_acted_on(available_fleet[0], timezone.now() + timedelta(seconds=1)) == 0


def test_a_shadow_rule_that_names_no_ladder_stops_the_control_plane(settings):
    settings.REMEDIATION_SHADOW_RULES = ["gpu_lsot"]
    with pytest.raises(SystemCheckError, match="gpu_lsot"):
        management.call_command("check")


def test_every_rung_counts_against_the_cap_and_a_node_already_counted_climbs_on(available_fleet, settings):
    settings.REMEDIATION_CAP, settings.REMEDIATION_POD_CAP = 2, 10
    first, second, third = available_fleet[:3]
    (reset,) = receive(alert(first.name, xid=109, name="GPUResetRequiredXid"))
    (reboot,) = receive(alert(second.name, xid=79, n=1))
    (refused,) = receive(alert(third.name, xid=79, n=2))
    assert (reset.status, reboot.status) == ("pending", "pending")
    assert (refused.status, refused.step, refused.recheck_due_at) == ("suppressed", "reboot", None)
    assert refused.reason.endswith("suppressed: 2 automatic remediations in the last 10 minutes (cap 2)")
    # The first node's ladder was counted when it began: its next rungs are not refused.
    assert services.step_finished(remediation_id=reset.pk, healthy=False).step == "reboot"
    assert services.step_finished(remediation_id=reset.pk, healthy=False).status == "applied"
    assert Node.objects.get(pk=first.pk).state == "quarantined"
    assert services.take_due_repairs(limit=10) == [reboot.pk]  # the suppressed one is not due


RETURN_TO_SERVICE = ("operator_return", "wipe_succeeded", "inspection_passed", "attestation_passed")


def test_a_node_returned_to_service_and_struck_again_is_a_new_incident_suppressed_over_a_full_cap(
    available_fleet, settings
):
    settings.REMEDIATION_CAP, settings.REMEDIATION_POD_CAP = 3, 10
    first, second, third = available_fleet[:3]
    (quarantined,) = receive(alert(first.name, n=1))
    assert quarantined.status == "applied"
    drive(first, *RETURN_TO_SERVICE)
    assert [r.status for r in receive(alert(second.name, n=2), alert(third.name, n=3))] == ["applied", "applied"]
    (again,) = receive(alert(first.name, n=4))  # the cap is full: the first incident still counts
    assert (again.status, again.step) == ("suppressed", "quarantine")
    assert again.reason.endswith("suppressed: 3 automatic remediations in the last 10 minutes (cap 3)")
    suppressed = again.timeline.get(step="suppressed")
    assert suppressed.detail == "3 automatic remediations in the last 10 minutes (cap 3)"
    assert Node.objects.get(pk=first.pk).state == "available"
    assert [v for v in check_all() if v.check == "remediation_cap"] == []


def test_a_node_struck_again_after_its_return_counts_again_while_the_cap_has_room(available_fleet, settings):
    settings.REMEDIATION_CAP, settings.REMEDIATION_POD_CAP = 3, 10
    first, second, third = available_fleet[:3]
    receive(alert(first.name, n=1))
    drive(first, *RETURN_TO_SERVICE)
    (again,) = receive(alert(first.name, n=2))
    assert again.status == "applied" and Node.objects.get(pk=first.pk).state == "quarantined"
    assert [r.status for r in receive(alert(second.name, n=3), alert(third.name, n=4))] == ["applied", "suppressed"]
    audit = AuditEvent.objects.filter(node=first, event="hardware_fault").order_by("id")
    assert [row.detail for row in audit] == [
        {"remediation": r.pk} for r in Remediation.objects.filter(node=first).order_by("id")
    ]


def test_a_ladder_counts_once_from_its_first_rung_until_its_verdict(available_fleet, settings):
    settings.REMEDIATION_CAP = 1
    first, second = available_fleet[:2]
    (ladder,) = receive(alert(first.name, xid=79))
    assert (ladder.counted_from is not None, ladder.counted_until) == (True, None)
    (waiting,) = receive(alert(second.name, xid=79, n=1))
    assert waiting.status == "suppressed" and waiting.counted_from is None
    escalated = services.step_finished(remediation_id=ladder.pk, healthy=False)  # a power cycle: no new count
    assert (escalated.status, escalated.step, escalated.counted_until) == ("pending", "power_cycle", None)
    repaired = services.step_finished(remediation_id=ladder.pk, healthy=True)
    assert repaired.counted_from is not None and repaired.counted_until is not None
    assert repaired.status == "repaired" and repaired.counted_from <= repaired.counted_until
    # Ended, it still counts for a window after its verdict: the cap of 1 stays full.
    (later,) = receive(alert(second.name, xid=79, n=2))
    assert later.status == "suppressed"


def test_placement_gives_a_node_under_repair_to_no_one_until_its_ladder_ends(available_fleet, alice):
    from reservations import services as reservations
    from reservations.placement import PlacementRefused

    p2 = [n for n in available_fleet if n.rack.pod.name == "p2"]
    (repairing,) = receive(alert(p2[0].name, xid=79))
    assert Node.objects.get(pk=p2[0].pk).under_repair
    with pytest.raises(PlacementRefused):
        reservations.create_reservation(tenant=alice, node_count=len(p2), pod=p2[0].rack.pod, actor="test")
    assert services.step_finished(remediation_id=repairing.pk, healthy=True).status == "repaired"
    assert not Node.objects.get(pk=p2[0].pk).under_repair
    held = reservations.create_reservation(tenant=alice, node_count=len(p2), pod=p2[0].rack.pod, actor="test")
    assert Node.objects.filter(reservation=held).count() == len(p2)
