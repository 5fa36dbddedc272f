"""manage.py check_invariants finds what a bug elsewhere could leave behind, and nothing in a sound history."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from console.invariants import check_all
from fleet.models import Node
from reservations.models import Reservation
from tests.support.factories import drive


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
