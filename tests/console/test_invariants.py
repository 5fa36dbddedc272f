"""manage.py check_invariants finds what a bug elsewhere could leave behind, and nothing in a sound history."""

from collections.abc import Mapping
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from fleet.models import NetworkAttachment, Node, TenantNetwork
from fleet.services import network_attachments, tenant_networks, transition
from remediation.models import Remediation
from reservations.models import Reservation, ReservationEvent
from tests.support.factories import drive
from tests.support.invariants import check_all


def run_checks() -> str:
    out = StringIO()
    call_command("check_invariants", stdout=out)
    return out.getvalue()


def forge(node: Node, event: str, old: str, new: str, **columns) -> None:
    """What a bug that bypassed the service would do: a state change with a matching audit row."""
    assignments = ", ".join(["state = %s", *(f"{c} = %s" for c in columns)])
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO fleet_auditevent (actor, event, from_state, to_state, reason, detail, node_id)"
            " VALUES ('bug', %s, %s, %s, '', '{}', %s)",
            [event, old, new, node.pk],
        )
        cursor.execute(f"UPDATE fleet_node SET {assignments} WHERE id = %s", [new, *columns.values(), node.pk])


def test_a_sound_history_passes(active_node, alices_reservation):
    Reservation.objects.filter(pk=alices_reservation.pk).update(state="active")
    drive(active_node, "released", "wipe_succeeded", "inspection_passed", "attestation_passed")
    Reservation.objects.filter(pk=alices_reservation.pk).update(state="released")
    assert check_all() == []
    assert "every invariant holds" in run_checks()


def test_a_node_available_after_a_tenant_without_wipe_and_attestation_is_found(active_node, alices_reservation):
    Reservation.objects.filter(pk=alices_reservation.pk).update(state="released")
    node = drive(active_node, "released")
    forge(node, "wipe_failed", "wiping", "inspecting", tenant_id=None)  # not a success, yet inspecting
    forge(node, "attestation_passed", "inspecting", "available")
    with pytest.raises(CommandError, match="violation"):
        run_checks()
    kinds = {v.check for v in check_all()}
    assert "dirty_node_available" in kinds


def test_an_active_node_without_a_live_reservation_is_found(active_node, alices_reservation):
    Reservation.objects.filter(pk=alices_reservation.pk).update(state="released")
    assert {v.check for v in check_all()} >= {"active_without_reservation"}


def test_a_state_change_whose_row_is_missing_is_found(node):
    with connection.cursor() as cursor:
        # the trigger wants an audit row to the new state in the same transaction: give it one
        # that does not start where the history ended
        cursor.execute(
            "INSERT INTO fleet_auditevent (actor, event, from_state, to_state, reason, detail, node_id)"
            " VALUES ('bug', 'operator_return', 'maintenance', 'wiping', '', '{}', %s)",
            [node.pk],
        )
        cursor.execute("UPDATE fleet_node SET state = 'wiping' WHERE id = %s", [node.pk])
    gaps = [v for v in check_all() if v.check == "audit_gap"]
    assert gaps and "enrolled to maintenance" in gaps[0].message


def test_an_unsettled_reservation_is_found(alices_reservation):
    Reservation.objects.filter(pk=alices_reservation.pk).update(state="provisioning")
    assert [v.check for v in check_all()] == ["unsettled_reservation"]


def counted_incident(node: Node, began, ended, n: int) -> Remediation:
    """What a decision that ignored the cap would leave: an incident counted on the node."""
    return Remediation.objects.create(
        fingerprint=f"{n:016x}",
        starts_at=began.isoformat(),
        alert="GPUFatalXid",
        alert_status="firing",
        node=node,
        action="hardware_failed",
        reason="test",
        status="applied",
        step="quarantine",
        counted_from=began,
        counted_until=ended,
    )


def test_a_pod_over_its_cap_in_a_window_is_found_and_the_fleet_within_its_own(available_fleet, settings):
    settings.REMEDIATION_CAP, settings.REMEDIATION_POD_CAP = 5, 2
    now = timezone.now()
    p1 = [n for n in available_fleet if n.rack.pod.name == "p1"]
    for n, node in enumerate(p1[:3]):
        counted_incident(node, now + timedelta(minutes=4 * n), now + timedelta(minutes=4 * n, seconds=1), n)
    (breach,) = [v for v in check_all() if v.check == "remediation_cap"]
    assert breach.message.startswith("3 automatic remediations in pod p1 within 10 minutes up to ")
    assert breach.message.endswith("(cap 2)") and len(breach.rows) == 3
    # Spread over more than a window, the same three are within the cap.
    Remediation.objects.filter(node=p1[2]).update(
        counted_from=now + timedelta(minutes=11), counted_until=now + timedelta(minutes=11)
    )
    assert [v for v in check_all() if v.check == "remediation_cap"] == []


def test_an_automatic_quarantine_the_cap_never_counted_is_found(available_fleet):
    from remediation.services import AUTOMATIC_ACTOR

    node = available_fleet[0]
    uncounted = Remediation.objects.create(
        fingerprint="0" * 16, starts_at="x", alert="GPUFatalXid", alert_status="firing", node=node,
        action="hardware_failed", reason="test", status="no_action",
    )  # fmt: skip
    transition(
        node_id=node.pk, event="hardware_fault", actor=AUTOMATIC_ACTOR, reason="x", detail={"remediation": uncounted.pk}
    )
    (found,) = [v for v in check_all() if v.check == "remediation_cap"]
    assert (
        found.message
        == f"node-001 was quarantined automatically by remediation {uncounted.pk}, which the cap never counted"
    )


# -- tenants' networks ----------------------------------------------------------------------------


def networks_of(reservation: Reservation, node: Node) -> Mapping[str, TenantNetwork]:
    return tenant_networks.ensure_tenant_networks(reservation_id=reservation.pk, node_id=node.pk).networks


def test_a_node_on_another_tenants_segment_than_it_serves_is_found(available_fleet, alices_reservation, bob):
    node, neighbour = available_fleet[:2]
    bobs = Reservation.objects.create(tenant=bob, node_count=1)
    drive(node, "provision_requested", reservation=alices_reservation)
    network_attachments.want_tenant_networks(node_id=node.pk, networks=networks_of(alices_reservation, node))
    assert not [v for v in check_all() if v.check == "node_on_two_tenants"]
    theirs = networks_of(bobs, neighbour)["ethernet"]
    NetworkAttachment.objects.filter(node=node, fabric="ethernet").update(found=theirs.value)  # as a read-back records
    found = [v for v in check_all() if v.check == "node_on_two_tenants"]
    assert len(found) == 1 and node.name in found[0].message
    assert set(found[0].rows) == {f"reservation {alices_reservation.pk}", f"reservation {bobs.pk}"}


def test_a_node_past_leaving_its_tenants_networks_yet_read_back_on_one_is_found(available_fleet, alices_reservation):
    node = available_fleet[0]
    theirs = networks_of(alices_reservation, node)["infiniband"]
    NetworkAttachment.objects.filter(node=node, fabric="infiniband").update(found=theirs.value)
    found = [v for v in check_all() if v.check == "held_node_on_tenant_segment"]
    assert len(found) == 1 and f"read back on {theirs.value}" in found[0].message
    # Still at leave_tenant_networks, the same read-back is the wipe waiting, not a violation.
    drive(node, "provision_requested", reservation=alices_reservation)
    drive(Node.objects.get(pk=node.pk), "released")
    assert not [v for v in check_all() if v.check == "held_node_on_tenant_segment"]


def test_a_tenant_network_kept_after_its_reservation_ended_with_no_node_on_it_is_found(
    available_fleet, alices_reservation, settings
):
    settings.FABRIC_SYNC_SECONDS = 0  # every sync since the end has had its chance to give it back
    networks_of(alices_reservation, available_fleet[0])
    Reservation.objects.filter(pk=alices_reservation.pk).update(state="released")
    ReservationEvent.objects.create(reservation=alices_reservation, actor="test", event="released")
    kept = [v for v in check_all() if v.check == "tenant_segment_without_live_reservation"]
    assert {v.message.split(" network ")[0] for v in kept} == {
        f"reservation {alices_reservation.pk} has ended, yet its {fabric}"
        for fabric in ("ethernet", "infiniband", "nvlink")
    }
    tenant_networks.release_finished_networks()
    assert not [v for v in check_all() if v.check == "tenant_segment_without_live_reservation"]
