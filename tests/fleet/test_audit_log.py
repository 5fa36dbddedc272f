"""The audit log: one row per transition, append-only, and no state change without its row."""

import pytest
from django.db import IntegrityError, connection, transaction

from fleet.models import AuditEvent, Node
from tests.support.factories import drive, enrol_default_fleet


def test_each_transition_writes_one_row_with_actor_event_states_reason_and_time(node):
    before = AuditEvent.objects.count()
    node = drive(node, "inspection_started", "hardware_fault", reason="XID 79 on GPU 3")
    rows = list(AuditEvent.objects.filter(node=node).order_by("id"))[-2:]
    assert AuditEvent.objects.count() == before + 2
    assert [(r.event, r.from_state, r.to_state) for r in rows] == [
        ("inspection_started", "enrolled", "inspecting"),
        ("hardware_fault", "inspecting", "quarantined"),
    ]
    assert all(r.actor == "test" and r.reason == "XID 79 on GPU 3" and r.at for r in rows)


def test_enrolment_is_audited(node):
    row = AuditEvent.objects.get(node=node)
    assert (row.event, row.from_state, row.to_state) == ("enrolled", "", "enrolled")


def test_audit_rows_cannot_be_updated_or_deleted(node):
    row = AuditEvent.objects.filter(node=node).first()
    assert row is not None
    for write in (
        lambda: AuditEvent.objects.filter(pk=row.pk).update(reason="rewritten"),
        lambda: AuditEvent.objects.filter(pk=row.pk).delete(),
        lambda: row.delete(),
        lambda: connection.cursor().execute("UPDATE fleet_auditevent SET actor = 'me' WHERE id = %s", [row.pk]),
        lambda: connection.cursor().execute("DELETE FROM fleet_auditevent"),
    ):
        with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
            write()
    assert AuditEvent.objects.get(pk=row.pk).reason == row.reason


@pytest.mark.django_db(transaction=True)
def test_a_state_change_without_its_audit_row_is_refused_at_commit():
    node = enrol_default_fleet(1)[0]
    with pytest.raises(IntegrityError, match="without an audit row"), transaction.atomic():
        Node.objects.filter(pk=node.pk).update(state="inspecting")
    with pytest.raises(IntegrityError, match="without an audit row"), transaction.atomic():
        connection.cursor().execute("UPDATE fleet_node SET state = 'maintenance' WHERE id = %s", [node.pk])
    assert Node.objects.get(pk=node.pk).state == "enrolled"


@pytest.mark.django_db(transaction=True)
def test_an_audit_row_from_another_transaction_does_not_cover_a_state_change():
    node = drive(enrol_default_fleet(1)[0], "inspection_started")  # audit row to_state=inspecting exists
    drive(node, "operator_quarantine")
    with pytest.raises(IntegrityError, match="without an audit row"), transaction.atomic():
        Node.objects.filter(pk=node.pk).update(state="inspecting", quarantine_reason="")


@pytest.mark.django_db(transaction=True)
def test_a_node_cannot_be_created_without_its_enrolment_row():
    template = enrol_default_fleet(1)[0]
    with pytest.raises(IntegrityError, match="without an audit row"), transaction.atomic():
        Node.objects.create(
            name="node-999", rack=template.rack, position=8, serial="x", redfish_url="http://h", system_id="s"
        )
    assert not Node.objects.filter(name="node-999").exists()
