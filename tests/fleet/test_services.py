"""fleet.services.transition: compare-and-set, audit, and the fields each state implies."""

import threading

import pytest
from django.db import connection

from fleet.lifecycle import IllegalTransition, TransitionRefused
from fleet.models import AddressPool, AuditEvent, ConfigDrive, Node, NodeAddress, NodeCredential
from fleet.services import NotServing, assign_address, tenancy_drive_token, transition
from tests.support.factories import drive, enrol_default_fleet


def test_illegal_event_raises_and_writes_nothing(node):
    rows = AuditEvent.objects.count()
    with pytest.raises(IllegalTransition, match="'released' is not allowed in state 'enrolled'"):
        transition(node_id=node.pk, event="released", actor="test")
    assert Node.objects.get(pk=node.pk).state == "enrolled"
    assert AuditEvent.objects.count() == rows


def test_provisioning_needs_the_reservation_and_takes_its_tenant(available_node, alices_reservation):
    with pytest.raises(ValueError, match="needs the reservation"):
        transition(node_id=available_node.pk, event="provision_requested", actor="test")
    node = drive(available_node, "provision_requested", reservation=alices_reservation)
    assert (node.state, node.tenant, node.reservation) == (
        "provisioning",
        alices_reservation.tenant,
        alices_reservation,
    )


def test_a_wiped_node_comes_back_without_its_tenant(active_node):
    node = drive(active_node, "released")
    assert node.tenant_id and node.state == "wiping"
    node = drive(node, "wipe_succeeded")
    assert (node.state, node.tenant, node.reservation) == ("inspecting", None, None)


def test_an_address_written_late_goes_at_the_next_transition_that_does_not_serve_and_no_drive_is_made(active_node):
    """A provisioning worker whose lease ended with the tenancy may still write them: the address
    goes at the next transition, and the tenancy's drive (with its credentials) is refused outright:
    the next tenant must not be given the last one's config drive."""
    AddressPool.objects.create(pod=active_node.rack.pod, network="10.100.1.0/29", gateway="10.100.1.1", ssh_port=22)
    wiping = drive(active_node, "released")
    assign_address(node_id=wiping.pk)
    with pytest.raises(NotServing):
        tenancy_drive_token(node_id=wiping.pk, files=lambda: {"user-data": "the last tenant's user data"})

    drive(wiping, "wipe_succeeded")

    assert not NodeAddress.objects.filter(node=wiping).exists()
    assert not ConfigDrive.objects.filter(node=wiping).exists()
    assert not NodeCredential.objects.filter(node=wiping).exists()


def test_leaving_quarantine_clears_the_reason_and_goes_through_wiping(node):
    node = drive(node, "operator_quarantine", reason="fan noise")
    assert node.quarantine_reason == "operator_quarantine: fan noise"
    node = drive(node, "operator_return")
    assert (node.state, node.quarantine_reason) == ("wiping", "")


def test_a_new_state_starts_without_a_step(node):
    Node.objects.filter(pk=node.pk).update(step="power_on", step_since=node.state_since)
    node = drive(node, "inspection_started")
    assert (node.step, node.step_since) == ("", None)
    assert node.state_since > AuditEvent.objects.filter(node=node, event="enrolled").get().at


@pytest.mark.django_db(transaction=True)
def test_racing_transitions_apply_exactly_one_and_audit_exactly_one():
    nodes = enrol_default_fleet(10)
    for node in nodes:
        drive(node, "inspection_started")
    outcomes = []

    def race(node_id, event, barrier):
        barrier.wait()
        try:
            transition(node_id=node_id, event=event, actor=f"racer:{event}", reason="race")
            outcomes.append((node_id, event))
        except TransitionRefused:
            pass
        finally:
            connection.close()

    for node in nodes:
        barrier = threading.Barrier(2)
        racers = [
            threading.Thread(target=race, args=(node.pk, event, barrier))
            for event in ("attestation_passed", "attestation_failed")
        ]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join()

    assert sorted(node_id for node_id, _ in outcomes) == sorted(n.pk for n in nodes)
    for node_id, event in outcomes:
        audited = AuditEvent.objects.filter(node_id=node_id, from_state="inspecting").values_list("event", flat=True)
        assert list(audited) == [event]
        assert Node.objects.get(pk=node_id).state == {"attestation_passed": "available"}.get(event, "quarantined")
