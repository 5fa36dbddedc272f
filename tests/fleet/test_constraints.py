"""PostgreSQL refuses every broken row, whatever writes it: full_clean, QuerySet.update(), raw SQL."""

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from fleet.models import GPU, Node
from reservations.models import Reservation
from tests.support.factories import drive


def refused(write):
    with pytest.raises(IntegrityError), transaction.atomic():
        write()


def raw_update(node: Node, **columns):
    assignments = ", ".join(f"{column} = %s" for column in columns)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE fleet_node SET {assignments} WHERE id = %s", [*columns.values(), node.pk])


def assert_refused_three_ways(node: Node, orm_fields: dict, raw_columns: dict):
    for field, value in orm_fields.items():
        setattr(node, field, value)
    with pytest.raises(ValidationError):
        node.full_clean()
    refused(lambda: Node.objects.filter(pk=node.pk).update(**orm_fields))
    refused(lambda: raw_update(node, **raw_columns))


def test_active_needs_tenant_and_reservation(active_node):
    assert_refused_three_ways(active_node, {"reservation": None}, {"reservation_id": None})
    assert_refused_three_ways(
        active_node, {"tenant": None, "reservation": None}, {"tenant_id": None, "reservation_id": None}
    )


def test_provisioning_needs_tenant_and_reservation(available_node, alices_reservation):
    node = drive(available_node, "provision_requested", reservation=alices_reservation)
    assert_refused_three_ways(node, {"tenant": None, "reservation": None}, {"tenant_id": None, "reservation_id": None})


@pytest.mark.parametrize("events", [(), ("inspection_started",), ("inspection_started", "attestation_passed")], ids=str)
def test_enrolled_inspecting_available_have_no_tenant(node, alice, alices_reservation, events):
    node = drive(node, *events)
    assert_refused_three_ways(node, {"tenant": alice}, {"tenant_id": alice.pk})
    assert_refused_three_ways(
        node,
        {"tenant": alice, "reservation": alices_reservation},
        {"tenant_id": alice.pk, "reservation_id": alices_reservation.pk},
    )


@pytest.mark.parametrize("events", [("released",), ("hardware_fault",)], ids=str)
def test_only_a_provisioning_or_active_node_serves_a_reservation(active_node, events):
    node = drive(active_node, *events)
    assert node.tenant_id and not node.reservation_id  # it keeps the tenant whose data it holds
    assert node.tenant is not None
    assert_refused_three_ways(
        node, {"reservation": node.tenant.reservations.get()}, {"reservation_id": node.tenant.reservations.get().pk}
    )


def test_quarantined_has_a_reason(node):
    node = drive(node, "hardware_fault", reason="XID 79 on GPU 3")
    assert node.quarantine_reason == "hardware_fault: XID 79 on GPU 3"
    assert_refused_three_ways(node, {"quarantine_reason": ""}, {"quarantine_reason": ""})


def test_only_quarantined_has_a_reason(node):
    assert_refused_three_ways(node, {"quarantine_reason": "stale"}, {"quarantine_reason": "stale"})


def test_lease_owner_comes_with_expiry_and_token(node):
    later = timezone.now()
    assert_refused_three_ways(node, {"lease_owner": "worker-1"}, {"lease_owner": "worker-1"})
    node.refresh_from_db()
    assert_refused_three_ways(
        node,
        {"lease_owner": "worker-1", "lease_expires_at": later},
        {"lease_owner": "worker-1", "lease_expires_at": later},
    )
    node.refresh_from_db()
    assert_refused_three_ways(
        node, {"lease_expires_at": later, "fencing_token": 3}, {"lease_expires_at": later, "fencing_token": 3}
    )
    node.refresh_from_db()
    assert_refused_three_ways(node, {"fencing_token": -1}, {"fencing_token": -1})


def test_step_comes_with_since(node):
    assert_refused_three_ways(node, {"step": "power_on"}, {"step": "power_on"})


def test_unknown_state_is_refused(node):
    assert_refused_three_ways(node, {"state": "on_fire"}, {"state": "on_fire"})


def test_one_node_per_rack_slot_from_1(fleet):
    first, second = fleet[0], fleet[1]
    refused(lambda: Node.objects.filter(pk=second.pk).update(position=first.position))
    assert_refused_three_ways(first, {"position": 0}, {"position": 0})


def test_gpu_index_unique_per_node_and_health_known(node):
    gpu = GPU.objects.filter(node=node).first()
    assert gpu is not None
    refused(lambda: GPU.objects.create(node=node, index=gpu.index, uuid="GPU-new", model="x"))
    refused(lambda: GPU.objects.filter(pk=gpu.pk).update(health="meh"))
    gpu.health = "meh"
    with pytest.raises(ValidationError):
        gpu.full_clean()


def test_reservation_rows_are_checked(alice):
    now = timezone.now()
    refused(lambda: Reservation.objects.create(tenant=alice, node_count=0))
    refused(lambda: Reservation.objects.create(tenant=alice, node_count=1, starts_at=now, ends_at=now))
    refused(lambda: Reservation.objects.create(tenant=alice, node_count=1, state="failed"))
    refused(lambda: Reservation.objects.create(tenant=alice, node_count=1, state="lost"))
    for bad in (
        Reservation(tenant=alice, node_count=0),
        Reservation(tenant=alice, node_count=1, starts_at=now, ends_at=now),
        Reservation(tenant=alice, node_count=1, state="failed"),
    ):
        with pytest.raises(ValidationError):
            bad.full_clean()


def test_valid_rows_pass_full_clean(active_node, alices_reservation):
    active_node.full_clean()
    alices_reservation.full_clean()
