"""Leases with fencing, with real concurrent connections to PostgreSQL."""

import functools
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models import DurationField, ExpressionWrapper, F
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from fleet import leases, services
from fleet.leases import LeaseLost
from fleet.models import AuditEvent, Node
from tests.support.concurrency import at_once
from tests.support.factories import drive, enrol_default_fleet

pytestmark = pytest.mark.django_db(transaction=True)


def wiping_fleet(count: int) -> list[Node]:
    return [drive(node, "operator_quarantine", "operator_return") for node in enrol_default_fleet(count)]


def test_claim_sets_owner_expiry_and_a_growing_token():
    node = wiping_fleet(1)[0]
    first = leases.claim(owner="worker-a", seconds=0)[0]  # expires at once
    second = leases.claim(owner="worker-b", seconds=60)[0]
    assert (first.node_id, second.node_id) == (node.pk, node.pk)
    assert second.token == first.token + 1
    assert (first.took_over, second.took_over) == (False, True)
    node.refresh_from_db()
    assert (node.lease_owner, node.fencing_token) == ("worker-b", second.token)
    assert node.lease_expires_at is not None
    assert leases.claim(owner="worker-c") == []  # held


def test_only_nodes_owing_work_are_claimed():
    nodes = enrol_default_fleet(3)
    assert leases.claim(owner="w", limit=10) == []  # enrolled: nothing to do yet
    drive(nodes[1], "inspection_started")
    assert [lease.node_id for lease in leases.claim(owner="w", limit=10)] == [nodes[1].pk]


def test_two_claimers_never_get_the_same_node():
    nodes = wiping_fleet(12)
    claimed: dict[str, list[int]] = {"a": [], "b": []}

    def worker(name):
        while got := leases.claim(owner=f"worker-{name}", limit=2, seconds=60):
            claimed[name].extend(lease.node_id for lease in got)
            time.sleep(0.01)

    at_once(*(functools.partial(worker, name) for name in claimed))
    assert not set(claimed["a"]) & set(claimed["b"])
    assert sorted(claimed["a"] + claimed["b"]) == sorted(n.pk for n in nodes)


def test_claim_skips_rows_another_transaction_holds_without_waiting():
    nodes = wiping_fleet(2)
    locked, release = threading.Event(), threading.Event()

    def hold_first_row():
        from django.db import transaction

        try:
            with transaction.atomic():
                Node.objects.select_for_update().get(pk=nodes[0].pk)
                locked.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_first_row)
    holder.start()
    locked.wait(10)
    started = time.monotonic()
    got = leases.claim(owner="w", limit=2)
    waited = time.monotonic() - started
    release.set()
    holder.join()
    assert [lease.node_id for lease in got] == [nodes[1].pk]
    assert waited < 5


def test_heartbeat_extends_a_live_lease_and_fails_once_a_successor_claimed():
    wiping_fleet(1)
    lease = leases.claim(owner="worker-a", seconds=60)[0]
    before = Node.objects.get(pk=lease.node_id).lease_expires_at
    leases.heartbeat(lease, seconds=600)
    extended = Node.objects.get(pk=lease.node_id).lease_expires_at
    assert before is not None and extended is not None and extended > before

    leases.heartbeat(lease, seconds=0)  # let it lapse
    successor = leases.claim(owner="worker-b")[0]
    with pytest.raises(LeaseLost):
        leases.heartbeat(lease)
    assert Node.objects.get(pk=lease.node_id).lease_owner == "worker-b"
    assert successor.token > lease.token


def test_stalled_workers_late_result_is_discarded_and_audited():
    node = wiping_fleet(1)[0]
    stalled = leases.claim(owner="worker-a", seconds=0)[0]
    successor = leases.claim(owner="worker-b", seconds=60)[0]

    assert services.complete(stalled, event="wipe_failed", actor="worker-a", reason="late") is None
    assert Node.objects.get(pk=node.pk).state == "wiping"
    discard = AuditEvent.objects.filter(node=node, event="result_discarded").get()
    assert discard.detail == {"attempted": "wipe_failed", "token": stalled.token, "current_token": successor.token}
    assert "worker-a" in discard.reason and "worker-b" in discard.reason

    done = services.complete(successor, event="wipe_succeeded", actor="worker-b")
    assert done is not None
    assert (done.state, done.lease_owner, done.lease_expires_at) == ("inspecting", "", None)


def test_an_expired_lease_writes_nothing_even_without_a_successor():
    node = wiping_fleet(1)[0]
    lease = leases.claim(owner="worker-a", seconds=0)[0]
    assert services.complete(lease, event="wipe_succeeded", actor="worker-a") is None
    assert leases.set_step(lease, step="secure_erase", actor="worker-a") is False
    node.refresh_from_db()
    assert (node.state, node.step) == ("wiping", "")
    assert AuditEvent.objects.filter(node=node, event="result_discarded").count() == 2


def test_a_result_after_the_node_changed_state_is_discarded():
    node = wiping_fleet(1)[0]
    lease = leases.claim(owner="worker-a", seconds=60)[0]
    node = drive(node, "hardware_fault")  # an alert's quarantine wins, and ends the lease
    assert (node.lease_owner, node.lease_expires_at) == ("", None)
    assert services.complete(lease, event="wipe_succeeded", actor="worker-a") is None
    assert Node.objects.get(pk=node.pk).state == "quarantined"
    assert AuditEvent.objects.filter(node=node, event="result_discarded").exists()


def test_a_same_state_result_keeps_the_lease():
    drive(enrol_default_fleet(1)[0], "inspection_started")
    lease = leases.claim(owner="worker-a", seconds=60)[0]
    node = services.complete(lease, event="inspection_passed", actor="worker-a")
    assert node is not None
    assert (node.state, node.lease_owner) == ("inspecting", "worker-a")
    node = services.complete(lease, event="attestation_passed", actor="worker-a")
    assert node is not None
    assert (node.state, node.lease_owner) == ("available", "")


def test_a_worker_that_keeps_its_lease_goes_on_to_the_next_state_under_a_new_token():
    wiping_fleet(1)
    lease = leases.claim(owner="worker-a", seconds=60)[0]
    with transaction.atomic():
        node = services.complete(lease, event="wipe_succeeded", actor="worker-a")
        kept = leases.reclaim(lease)
    assert node is not None
    assert node.state == "inspecting" and kept == leases.Lease(node_id=node.pk, owner="worker-a", token=lease.token + 1)
    assert leases.claim(owner="worker-b") == []  # nobody else may start the inspection meanwhile
    assert services.complete(lease, event="inspection_passed", actor="worker-a") is None  # the old token is void
    assert leases.set_step(kept, step="boot_service_image", actor="worker-a")


def test_keeping_the_lease_is_only_for_more_work_and_only_for_its_holder():
    drive(enrol_default_fleet(1)[0], "inspection_started")
    lease = leases.claim(owner="worker-a", seconds=60)[0]
    with transaction.atomic():
        done = services.complete(lease, event="attestation_passed", actor="worker-a")
        kept = leases.reclaim(lease)
    assert done is not None
    assert (done.state, done.lease_owner, kept) == ("available", "", None)
    node = wiping_fleet(2)[1]
    lease = leases.claim(owner="worker-a", seconds=0)[0]  # expires at once
    assert services.complete(lease, event="wipe_succeeded", actor="worker-a") is None
    assert Node.objects.get(pk=node.pk).state == "wiping"


def test_steps_are_recorded_under_the_lease_and_audited():
    node = wiping_fleet(1)[0]
    lease = leases.claim(owner="worker-a", seconds=60)[0]
    assert leases.set_step(lease, step="secure_erase", actor="worker-a")
    node.refresh_from_db()
    assert node.step == "secure_erase" and node.step_since is not None
    assert AuditEvent.objects.filter(node=node, event="step_changed", reason="secure_erase").exists()


def test_a_step_resumed_under_a_new_lease_keeps_when_it_began():
    node = wiping_fleet(1)[0]
    first = leases.claim(owner="worker-a", seconds=60)[0]
    assert leases.set_step(first, step="wait_for_gpu_wipe", actor="worker-a", detail={"why": "test"})
    began = Node.objects.get(pk=node.pk).step_since
    assert leases.release(first)
    second = leases.claim(owner="worker-b", seconds=60)[0]
    assert leases.set_step(second, step="wait_for_gpu_wipe", actor="worker-b")
    assert Node.objects.get(pk=node.pk).step_since == began  # the wait's timeout counts from then
    audited = AuditEvent.objects.filter(node=node, event="step_changed", reason="wait_for_gpu_wipe").get()
    assert audited.detail == {"from_step": "", "token": first.token, "why": "test"}


def test_a_parked_node_is_claimed_by_nobody_until_its_wait_is_due_and_then_resumed_not_taken_over():
    node = wiping_fleet(1)[0]
    lease = leases.claim(owner="worker-a", seconds=60)[0]
    assert leases.park(lease, seconds=60)
    node.refresh_from_db()
    assert (node.lease_owner, node.fencing_token) == (leases.WAITING_ON_HARDWARE, lease.token)
    assert leases.claim(owner="worker-b") == []
    with pytest.raises(LeaseLost):
        leases.heartbeat(lease)  # the parking worker has no hold on it any more
    assert not leases.park(lease, seconds=0)

    Node.objects.filter(pk=node.pk).update(lease_expires_at=Now())  # the wait is due
    resumed = leases.claim(owner="worker-b")[0]
    assert (resumed.token, resumed.took_over) == (lease.token + 1, False)


def test_release_gives_the_node_back_for_the_next_claim():
    wiping_fleet(1)
    lease = leases.claim(owner="worker-a", seconds=60)[0]
    assert leases.release(lease)
    assert not leases.release(lease)
    assert leases.claim(owner="worker-b")[0].token == lease.token + 1


def test_a_claim_and_a_step_are_one_statement_each():
    """A worker claims its node and records each step of its workflow: one round trip each, the
    step's audit row with it, never a transaction of several."""
    node = wiping_fleet(1)[0]
    with CaptureQueriesContext(connection) as claiming:
        lease = leases.claim(owner="worker-a", node_ids=[node.pk])[0]
    with CaptureQueriesContext(connection) as stepping:
        assert leases.set_step(lease, step="start_gpu_wipe", actor="worker-a", detail={"why": "test"})
    with CaptureQueriesContext(connection) as resuming:
        assert leases.set_step(lease, step="start_gpu_wipe", actor="worker-a")
    assert (len(claiming), len(stepping), len(resuming)) == (1, 1, 1)
    audited = AuditEvent.objects.filter(node=node, event="step_changed").get()
    assert (audited.reason, audited.actor, audited.from_state, audited.to_state) == (
        "start_gpu_wipe",
        "worker-a",
        "wiping",
        "wiping",
    )
    assert audited.detail == {"from_step": "", "token": lease.token, "why": "test"}
    assert leases.set_step(lease, step="wait_for_gpu_wipe", actor="worker-a")
    moved_on = AuditEvent.objects.filter(node=node, event="step_changed").latest("id")
    assert moved_on.detail == {"from_step": "start_gpu_wipe", "token": lease.token}


def test_a_claim_among_nodes_takes_the_longest_waiting_and_skips_those_held():
    nodes = wiping_fleet(3)
    held = leases.claim(owner="worker-a", node_ids=[nodes[0].pk])
    assert [lease.node_id for lease in held] == [nodes[0].pk]
    claimed = leases.claim(owner="worker-b", limit=5, node_ids=[n.pk for n in nodes])
    assert [lease.node_id for lease in claimed] == [nodes[1].pk, nodes[2].pk]
    assert leases.claim(owner="worker-c", node_ids=[]) == []


def test_a_pause_parks_the_node_for_a_quarter_of_its_time_at_the_step_at_most_for_the_longest_recheck():
    node = wiping_fleet(1)[0]
    lease = leases.claim(owner="worker-a", seconds=60)[0]
    assert leases.set_step(lease, step="wait_for_gpu_wipe", actor="worker-a")

    def parked_for(step_began_ago: float) -> float:
        Node.objects.filter(pk=node.pk).update(
            lease_owner="worker-a",
            lease_expires_at=Now() + timedelta(seconds=60),
            step_since=Now() - timedelta(seconds=step_began_ago),
        )
        assert leases.park_backing_off(lease, most=60)
        (hold,) = Node.objects.filter(pk=node.pk).values_list(
            ExpressionWrapper(F("lease_expires_at") - Now(), output_field=DurationField()), flat=True
        )
        return hold.total_seconds()

    assert parked_for(0) == pytest.approx(0, abs=0.5)  # a step just begun: due at once
    assert parked_for(40) == pytest.approx(10, abs=0.5)
    assert parked_for(3600) == pytest.approx(60, abs=0.5)  # never longer than `most`
    node.refresh_from_db()
    assert (node.lease_owner, node.fencing_token) == (leases.WAITING_ON_HARDWARE, lease.token)
    assert leases.claim(owner="worker-b") == []  # nobody until it is due
    Node.objects.filter(pk=node.pk).update(lease_expires_at=Now())
    assert not leases.park_backing_off(lease, most=60)  # the lease had gone
    assert leases.claim(owner="worker-b")[0].took_over is False  # given back, not taken over
