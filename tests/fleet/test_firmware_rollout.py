"""Rolling a firmware baseline out: the pure decisions (which nodes next, how a rollout stands), then
the services on the real PostgreSQL, the reconciler's task, the admin and manage.py roll_out_firmware.

The service tests commit as they go (transactional_db), as production does: a node runs the baseline
when its firmware check is later than the baseline's last change, and within one test transaction
every row would carry the same database time."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import LogEntry
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet import firmware, firmware_rollouts, selectors, services
from fleet.lifecycle import SERVING_STATES, State
from fleet.models import (
    GPU,
    AuditEvent,
    FirmwareBaseline,
    FirmwareBaselineComponent,
    FirmwareRollout,
    FirmwareRolloutNode,
    IdleDiagnosticRun,
    Node,
    Pod,
)
from fleet.rollout_rules import (
    InvalidLimits,
    Limits,
    NodeStatus,
    RolloutNode,
    RolloutStatus,
    Settled,
    complete,
    first_failure,
    next_batch,
    runs_baseline,
    settle,
)
from reservations import services as reservations
from reservations.models import Reservation
from reservations.placement import PlacementRefused
from tests.support.examples import examples
from tests.support.factories import drive, enrol_default_fleet, make_available
from workflows import tasks

OLD, NEW = ("GF-BMC 1.4.2", "a1" * 32), ("GF-BMC 1.5.0", "b2" * 32)
DRIFT = "firmware_drift: BMC expected GF-BMC 1.5.0 (sha256 b2b2b2b2b2b2b2b2…) found GF-BMC 1.5.0-custom"


# -- the pure decisions ------------------------------------------------------------------------


def node(state=State.AVAILABLE, status=NodeStatus.PENDING, runs_baseline=False, **facts) -> RolloutNode:
    return RolloutNode(name="node-001", pod="p1", state=state, status=status, runs_baseline=runs_baseline, **facts)


@pytest.mark.parametrize(
    ("before", "now"),
    [
        (node(status=NodeStatus.UPDATING, state=State.INSPECTING), Settled(NodeStatus.UPDATING, "")),
        (
            node(status=NodeStatus.UPDATING, state=State.QUARANTINED, quarantine_reason=DRIFT),
            Settled(NodeStatus.FAILED, DRIFT),
        ),
        (
            node(status=NodeStatus.UPDATING, state=State.QUARANTINED, quarantine_reason="attestation_failed: kernel"),
            Settled(NodeStatus.FAILED, "attestation_failed: kernel"),
        ),
        (
            node(status=NodeStatus.UPDATING, runs_baseline=True),
            Settled(NodeStatus.UPDATED, "inspected: runs the baseline"),
        ),
        # Placement took it the moment it came back: it passed all the same.
        (
            node(status=NodeStatus.UPDATING, state=State.PROVISIONING, runs_baseline=True),
            Settled(NodeStatus.UPDATED, "inspected: runs the baseline"),
        ),
        (
            node(status=NodeStatus.UPDATING),
            Settled(
                NodeStatus.FAILED, "came out of its inspection available without a firmware check against the baseline"
            ),
        ),
        (
            node(state=State.ACTIVE),
            Settled(NodeStatus.AT_NEXT_HANDOFF, "active: its next inspection brings the baseline"),
        ),
        (
            node(state=State.WIPING),
            Settled(NodeStatus.AT_NEXT_HANDOFF, "wiping: its next inspection brings the baseline"),
        ),
        # Its inspection after release checked the firmware: done once the inspection has passed.
        (
            node(status=NodeStatus.AT_NEXT_HANDOFF, state=State.INSPECTING, runs_baseline=True),
            Settled(NodeStatus.AT_NEXT_HANDOFF, "inspecting: its next inspection brings the baseline"),
        ),
        (node(status=NodeStatus.AT_NEXT_HANDOFF, runs_baseline=True), Settled(NodeStatus.UPDATED, "runs the baseline")),
        (
            node(
                status=NodeStatus.AT_NEXT_HANDOFF,
                state=State.QUARANTINED,
                runs_baseline=True,
                quarantine_reason="attestation_failed: implant",
            ),
            Settled(NodeStatus.PENDING, "quarantined: out of service"),
        ),
        (
            node(
                status=NodeStatus.UPDATED,
                state=State.QUARANTINED,
                runs_baseline=True,
                quarantine_reason="hardware_fault: XID 79",
            ),
            Settled(NodeStatus.UPDATED, "runs the baseline"),
        ),
        # After its release: a failed reflash is the rollout's failure, a tenant's implant is not.
        (
            node(status=NodeStatus.AT_NEXT_HANDOFF, state=State.QUARANTINED, quarantine_reason=DRIFT),
            Settled(NodeStatus.FAILED, DRIFT),
        ),
        (
            node(
                status=NodeStatus.AT_NEXT_HANDOFF,
                state=State.QUARANTINED,
                quarantine_reason="attestation_failed: implant",
            ),
            Settled(NodeStatus.PENDING, "quarantined: out of service"),
        ),
        (
            node(status=NodeStatus.FAILED, state=State.QUARANTINED, quarantine_reason=DRIFT),
            Settled(NodeStatus.FAILED, DRIFT),
        ),
        (node(status=NodeStatus.FAILED), Settled(NodeStatus.PENDING, "")),  # an operator brought it back as it was
        (node(status=NodeStatus.UPDATED), Settled(NodeStatus.PENDING, "")),  # the baseline changed since
        (node(held=True), Settled(NodeStatus.PENDING, "a reservation holds it from now or soon")),
        (node(under_repair=True), Settled(NodeStatus.PENDING, "a remediation ladder is repairing it")),
        (node(state=State.MAINTENANCE), Settled(NodeStatus.PENDING, "maintenance: out of service")),
    ],
)
def test_settle(before, now):
    assert settle(before) == now


def test_a_node_runs_the_baseline_when_its_last_check_shows_every_release_the_baseline_expects():
    baseline = firmware.Baseline(
        name="default",
        gpu_model="",
        components={
            "BMC": firmware.Expected(*NEW, "GF-BMC-1.5.0.bin"),
            "NIC": firmware.Expected("28.41", "c3" * 32, ""),
        },
        bios_attributes={},
        secure_boot_required=True,
    )

    def check(bmc):
        return {
            "components": {
                "BMC": {"version": bmc[0], "digest": bmc[1]},
                "NIC0": {"version": "28.41", "digest": "c3" * 32},
            }
        }

    assert runs_baseline(baseline, check(NEW))
    assert not runs_baseline(baseline, None)  # no check since the baseline changed
    assert not runs_baseline(baseline, check(OLD))  # it read the baseline before the change committed


@pytest.mark.parametrize("limits", [(0, 1), (4, 0), (-1, 1), (True, 1), (2.5, 1)])
def test_limits_below_one_are_refused(limits):
    with pytest.raises(InvalidLimits):
        Limits(*limits)


NAMES = st.integers(1, 60).map(lambda i: f"node-{i:03d}")


def fleets(states=tuple(State), statuses=tuple(NodeStatus)):
    return st.lists(
        st.builds(
            RolloutNode,
            name=NAMES,
            pod=st.sampled_from(["p1", "p2", "p3"]),
            state=st.sampled_from(states),
            status=st.sampled_from(statuses),
            runs_baseline=st.booleans(),
            held=st.booleans(),
            under_repair=st.booleans(),
        ),
        unique_by=lambda n: n.name,
        max_size=40,
    )


LIMITS = st.builds(Limits, batch_size=st.integers(1, 6), per_pod_cap=st.integers(1, 3))


def idle(n: RolloutNode) -> bool:
    return (
        n.status is NodeStatus.PENDING
        and n.state is State.AVAILABLE
        and not (n.runs_baseline or n.held or n.under_repair)
    )


@settings(max_examples=examples(500), deadline=None)
@given(fleets(), LIMITS)
def test_a_batch_takes_idle_nodes_only_as_many_as_the_caps_allow_and_waits_for_the_last(nodes, limits):
    batch = next_batch(nodes, limits)
    per_pod = Counter(n.pod for n in batch)
    assert len(batch) <= limits.batch_size and max(per_pod.values(), default=0) <= limits.per_pod_cap
    assert all(idle(n) for n in batch)  # never a node in use, held, repairing or already updated
    if any(n.status is NodeStatus.UPDATING for n in nodes):
        assert batch == []
    else:  # as many as the caps allow
        left = [n for n in nodes if idle(n) and n not in batch]
        assert not left or len(batch) == limits.batch_size or all(per_pod[n.pod] == limits.per_pod_cap for n in left)


@settings(max_examples=examples(300), deadline=None)
@given(
    fleets(states=(State.AVAILABLE, State.ACTIVE, State.QUARANTINED), statuses=(NodeStatus.PENDING,)), LIMITS, st.data()
)
def test_a_rollout_never_passes_its_caps_nor_takes_a_node_in_use_and_stops_at_the_first_failure(nodes, limits, data):
    """The reconciler's loop over a fleet whose inspections end at once: a failing node's reflash
    is quarantined firmware_drift, every other node comes back running the baseline."""
    nodes = [replace(n, runs_baseline=False, held=False, under_repair=False) for n in nodes]
    fleet = {n.name: n for n in nodes}
    failing = data.draw(st.sets(st.sampled_from(sorted(fleet)))) if fleet else set()
    sent, paused = [], None
    for _ in range(len(fleet) + 2):
        settled = {name: settle(n) for name, n in fleet.items()}
        paused = first_failure({name: n.status for name, n in fleet.items()}, settled)
        fleet = {name: replace(n, status=settled[name].status) for name, n in fleet.items()}
        if paused or complete(fleet.values()):
            break
        batch = next_batch(fleet.values(), limits)
        if not batch:
            break
        assert not any(n.state in SERVING_STATES for n in batch)
        assert max(Counter(n.pod for n in batch).values()) <= limits.per_pod_cap and len(batch) <= limits.batch_size
        sent.append({n.name for n in batch})
        for n in batch:
            fleet[n.name] = replace(n, status=NodeStatus.UPDATING, state=State.INSPECTING)
        assert next_batch(fleet.values(), limits) == []  # while they inspect
        for n in batch:
            fleet[n.name] = (
                replace(fleet[n.name], state=State.QUARANTINED, quarantine_reason=DRIFT)
                if n.name in failing
                else replace(fleet[n.name], state=State.AVAILABLE, runs_baseline=True)
            )
    idle_failing = {n.name for n in nodes if n.state is State.AVAILABLE} & failing
    if idle_failing:
        assert paused is not None and paused.split(":")[0] in idle_failing
        assert paused.split(":")[0] in sent[-1]  # the batch it failed in was the last one sent
    else:
        assert paused is None
        assert all(fleet[n.name].status is NodeStatus.UPDATED for n in nodes if n.state is State.AVAILABLE)
        assert all(fleet[n.name].status is NodeStatus.AT_NEXT_HANDOFF for n in nodes if n.state is State.ACTIVE)
        assert complete(fleet.values()) == (not any(n.state is State.ACTIVE for n in nodes))


# -- the services, on the real database ----------------------------------------------------------
# The 12-node fleet: p1 is rack r01 (node-001..008), p2 is r02 (node-009..012).


@pytest.fixture
def baseline(transactional_db, broker) -> FirmwareBaseline:
    """The default baseline, changed just now: it expects BMC 1.5.0, which no node was checked for."""
    row = FirmwareBaseline.objects.create(name="default")
    FirmwareBaselineComponent.objects.create(
        baseline=row, component="BMC", version=NEW[0], sha256=NEW[1], image="x.bin"
    )
    return row


@pytest.fixture
def idle_fleet(baseline) -> dict[str, Node]:
    return {n.name: n for n in make_available(enrol_default_fleet())}


def inspected(node: Node, baseline: FirmwareBaseline) -> Node:
    """An inspection of the node as the workflow runs it: its BMC reflashed to the baseline's release
    and checked, then its inventory and attestation passed."""
    found = firmware.Found(
        components={"BMC": firmware.Installed("BMC", "BMC", *NEW, target="/redfish/v1/Managers/bmc")},
        bios_attributes={},
        secure_boot=firmware.SecureBoot(enabled=True, current_boot="Enabled"),
    )
    node = Node.objects.get(pk=node.pk)
    services.record_firmware_check(
        node=node, actor="worker:test", baseline=baseline.name, found=found, repaired=["BMC"]
    )
    return drive(node, "inspection_passed", "attestation_passed")


def start(baseline, batch_size=4, per_pod_cap=1) -> FirmwareRollout:
    return firmware_rollouts.start_rollout(
        baseline=baseline, batch_size=batch_size, per_pod_cap=per_pod_cap, actor="operator:alice"
    )


def statuses(rollout: FirmwareRollout) -> dict[str, str]:
    return dict(rollout.nodes.values_list("node__name", "status"))


def state(node: Node) -> str:
    return Node.objects.values_list("state", flat=True).get(pk=node.pk)


def rollout_now(rollout: FirmwareRollout) -> FirmwareRollout:
    return FirmwareRollout.objects.get(pk=rollout.pk)


def test_a_rollout_counts_every_node_of_the_class_where_it_stands(idle_fleet, baseline, alice):
    inspected(drive(idle_fleet["node-011"], "firmware_update"), baseline)
    drive(
        idle_fleet["node-010"],
        "provision_requested",
        reservation=Reservation.objects.create(tenant=alice, node_count=1),
    )
    # node-012 is of another class, whose own baseline it gets.
    GPU.objects.filter(node=idle_fleet["node-012"]).update(model="NVIDIA B200")
    FirmwareBaseline.objects.create(name="b200", gpu_model="NVIDIA B200")

    rollout = start(baseline)

    assert (rollout.status, rollout.started_by, rollout.actor) == (
        "running",
        "operator:alice",
        f"rollout:{rollout.pk} by operator:alice",
    )
    expected = {name: "pending" for name in idle_fleet if name != "node-012"}
    assert statuses(rollout) == expected | {"node-010": "at_next_handoff", "node-011": "updated"}
    assert selectors.rollout_progress(rollout) == "9 pending, 1 updated, 1 at next handoff"


def baseline_name(node: Node) -> str:
    found = selectors.firmware_baseline_for(node_id=node.pk)
    assert found is not None, f"{node.name} has no baseline"
    return found.name


def test_the_class_is_the_nodes_whose_baseline_it_is(idle_fleet, baseline):
    GPU.objects.filter(node=idle_fleet["node-012"]).update(model="NVIDIA B200")
    b200 = FirmwareBaseline.objects.create(name="b200", gpu_model="NVIDIA B200")
    for row in (baseline, b200):
        ours = set(selectors.nodes_of_baseline(row).values_list("name", flat=True))
        theirs = {name for name, n in idle_fleet.items() if baseline_name(n) == row.name}
        assert ours == theirs and ours


def test_one_rollout_of_a_baseline_at_a_time(idle_fleet, baseline):
    first = start(baseline)
    with pytest.raises(firmware_rollouts.RolloutRefused, match=f"rollout {first.pk} of default is running"):
        start(baseline)
    firmware_rollouts.pause(rollout_id=first.pk, actor="operator:bob")
    with pytest.raises(firmware_rollouts.RolloutRefused, match="is paused"):
        start(baseline)
    with pytest.raises(IntegrityError), transaction.atomic():  # the database holds it too
        FirmwareRollout.objects.create(baseline=baseline, batch_size=1, per_pod_cap=1, started_by="x")
    firmware_rollouts.cancel(rollout_id=first.pk)
    assert rollout_now(first).finished_at is not None
    assert start(baseline).status == "running"
    with pytest.raises(InvalidLimits):
        start(baseline, batch_size=0)


def test_batches_keep_to_the_per_pod_cap_and_each_waits_for_the_last(idle_fleet, baseline):
    rollout = start(baseline, batch_size=4, per_pod_cap=1)

    assert firmware_rollouts.advance(rollout_id=rollout.pk).sent == ["node-001", "node-009"]  # one per pod
    assert {state(idle_fleet[n]) for n in ("node-001", "node-009")} == {"inspecting"}
    row = AuditEvent.objects.filter(node=idle_fleet["node-001"], event="firmware_update").get()
    assert (row.from_state, row.to_state, row.actor) == (
        "available",
        "inspecting",
        f"rollout:{rollout.pk} by operator:alice",
    )
    assert row.reason == f"firmware rollout {rollout.pk} of baseline default"
    assert firmware_rollouts.advance(rollout_id=rollout.pk).sent == []  # while they inspect

    inspected(idle_fleet["node-001"], baseline)
    assert firmware_rollouts.advance(rollout_id=rollout.pk).sent == []  # node-009 still inspects
    assert statuses(rollout)["node-001"] == "updated"
    inspected(idle_fleet["node-009"], baseline)
    assert firmware_rollouts.advance(rollout_id=rollout.pk).sent == ["node-002", "node-010"]


def test_placement_hands_out_no_node_under_update(idle_fleet, baseline, alice):
    firmware_rollouts.advance(rollout_id=start(baseline).pk)  # node-001 of p1's 8 nodes inspects
    p1 = Pod.objects.get(name="p1")
    with pytest.raises(PlacementRefused, match="p1 has 7 free nodes"):
        reservations.create_reservation(tenant=alice, node_count=8, pod=p1, actor="tenant:alice")
    placed = reservations.create_reservation(tenant=alice, node_count=7, pod=p1, actor="tenant:alice")
    assert "node-001" not in set(placed.allocations.values_list("node__name", flat=True))


def test_a_batch_is_as_large_as_its_size_and_the_pods_caps_allow(idle_fleet, baseline):
    rollout = start(baseline, batch_size=3, per_pod_cap=2)
    assert firmware_rollouts.advance(rollout_id=rollout.pk).sent == ["node-001", "node-002", "node-009"]


def test_the_first_failure_pauses_the_rollout_with_its_reason_until_an_operator_resumes_it(idle_fleet, baseline):
    rollout = start(baseline)
    firmware_rollouts.advance(rollout_id=rollout.pk)
    drive(idle_fleet["node-001"], "firmware_drift", reason=DRIFT.removeprefix("firmware_drift: "))

    assert firmware_rollouts.advance(rollout_id=rollout.pk).status == "paused"
    rollout.refresh_from_db()
    assert rollout.paused_reason == f"node-001: {DRIFT}"
    assert FirmwareRolloutNode.objects.get(rollout=rollout, node=idle_fleet["node-001"]).reason == DRIFT

    inspected(idle_fleet["node-009"], baseline)  # the rest of its batch finishes, and is counted
    assert firmware_rollouts.advance(rollout_id=rollout.pk) == firmware_rollouts.Advanced(RolloutStatus.PAUSED, [])
    assert statuses(rollout)["node-009"] == "updated"

    firmware_rollouts.resume(rollout_id=rollout.pk)
    assert firmware_rollouts.advance(rollout_id=rollout.pk).sent == ["node-002", "node-010"]
    assert statuses(rollout)["node-001"] == "failed"
    assert rollout_now(rollout).paused_reason == ""
    with pytest.raises(firmware_rollouts.RolloutRefused, match="is running: it cannot be resumed"):
        firmware_rollouts.resume(rollout_id=rollout.pk)


def test_a_failure_while_an_operator_has_paused_it_becomes_the_reason_it_is_paused(idle_fleet, baseline):
    rollout = start(baseline)
    firmware_rollouts.advance(rollout_id=rollout.pk)
    firmware_rollouts.pause(rollout_id=rollout.pk, actor="operator:bob")
    drive(idle_fleet["node-009"], "firmware_drift", reason=DRIFT.removeprefix("firmware_drift: "))
    firmware_rollouts.advance(rollout_id=rollout.pk)
    assert (rollout_now(rollout).status, rollout_now(rollout).paused_reason) == ("paused", f"node-009: {DRIFT}")


def test_nodes_in_use_get_the_baseline_at_their_next_handoff(idle_fleet, baseline, alice):
    reservation = Reservation.objects.create(tenant=alice, node_count=2)
    tenants = [drive(idle_fleet["node-005"], "provision_requested", "provision_succeeded", reservation=reservation)]
    rollout = start(baseline, batch_size=12, per_pod_cap=12)
    tenants.append(drive(idle_fleet["node-006"], "provision_requested", reservation=reservation))  # placed meanwhile

    sent = firmware_rollouts.advance(rollout_id=rollout.pk).sent
    assert len(sent) == 10 and not {"node-005", "node-006"} & set(sent)
    for name in sent:
        inspected(idle_fleet[name], baseline)
    assert firmware_rollouts.advance(rollout_id=rollout.pk).status == "running"
    assert statuses(rollout) == {name: "updated" for name in sent} | {n.name: "at_next_handoff" for n in tenants}

    for tenant_node in tenants:
        inspected(drive(tenant_node, "released", "wipe_succeeded"), baseline)
    assert firmware_rollouts.advance(rollout_id=rollout.pk).status == "completed"
    rollout.refresh_from_db()
    assert rollout.finished_at is not None and set(statuses(rollout).values()) == {"updated"}


def test_nodes_held_for_a_tenant_or_under_repair_are_left_alone(idle_fleet, baseline):
    Node.objects.filter(pk=idle_fleet["node-002"].pk).update(under_repair=True)
    rollout = start(baseline, batch_size=4, per_pod_cap=4)
    sent = firmware_rollouts.advance(rollout_id=rollout.pk, held={idle_fleet["node-001"].pk}).sent
    assert sent == ["node-003", "node-004", "node-005", "node-006"]
    reasons = dict(rollout.nodes.values_list("node__name", "reason"))
    assert reasons["node-001"] == "a reservation holds it from now or soon"
    assert reasons["node-002"] == "a remediation ladder is repairing it"


def test_the_reconciler_leaves_nodes_booked_from_soon_to_their_tenant(idle_fleet, baseline, alice):
    soon = timezone.now() + timedelta(minutes=10)
    booked = reservations.create_reservation(
        tenant=alice, node_count=8, starts_at=soon, ends_at=soon + timedelta(days=1), actor="tenant:alice"
    )
    held = set(booked.allocations.values_list("node__name", flat=True))
    rollout = start(baseline, batch_size=12, per_pod_cap=12)

    tasks.advance_firmware_rollouts()

    inspecting = set(Node.objects.filter(state="inspecting").values_list("name", flat=True))
    assert len(held) == 8 and inspecting == set(idle_fleet) - held
    assert statuses(rollout) == {name: "pending" for name in held} | {name: "updating" for name in inspecting}


def test_a_node_sent_to_inspection_has_its_idle_diagnostics_preempted(idle_fleet, baseline):
    run = IdleDiagnosticRun.objects.create(node=idle_fleet["node-001"], level=3)
    firmware_rollouts.advance(rollout_id=start(baseline).pk)
    run.refresh_from_db()
    assert run.status == "preempted" and run.ended_at is not None
    assert run.detail == "a firmware rollout took the node: its inspection reboots it"


def test_a_node_taken_before_it_is_sent_stays_pending(idle_fleet, baseline, alice):
    rollout = start(baseline)
    row = rollout.nodes.get(node=idle_fleet["node-001"])
    drive(
        idle_fleet["node-001"],
        "provision_requested",
        reservation=Reservation.objects.create(tenant=alice, node_count=1),
    )
    assert not firmware_rollouts._send(rollout.pk, row, "p1")  # placement's provision_requested came first
    row.refresh_from_db()
    assert (row.status, row.started_at) == ("pending", None)
    assert not AuditEvent.objects.filter(event="firmware_update").exists()


def test_a_baseline_changed_during_the_rollout_takes_its_updated_nodes_again(idle_fleet, baseline):
    rollout = start(baseline)
    firmware_rollouts.advance(rollout_id=rollout.pk)
    inspected(idle_fleet["node-001"], baseline)
    inspected(idle_fleet["node-009"], baseline)
    firmware_rollouts.advance(rollout_id=rollout.pk)
    assert statuses(rollout)["node-001"] == "updated"

    FirmwareBaselineComponent.objects.filter(baseline=baseline).update(version="GF-BMC 1.6.0")
    baseline.save()  # as the admin and set_firmware_baseline do
    firmware_rollouts.advance(rollout_id=rollout.pk)
    assert statuses(rollout)["node-001"] == "pending"


def test_pause_resume_and_cancel_refuse_what_does_not_fit(idle_fleet, baseline):
    rollout = start(baseline)
    paused = firmware_rollouts.pause(rollout_id=rollout.pk, actor="operator:bob")
    assert (paused.status, paused.paused_reason) == ("paused", "paused by operator:bob")
    assert firmware_rollouts.advance(rollout_id=rollout.pk).sent == []
    with pytest.raises(firmware_rollouts.RolloutRefused, match="is paused: it cannot be paused"):
        firmware_rollouts.pause(rollout_id=rollout.pk, actor="operator:bob")
    assert firmware_rollouts.cancel(rollout_id=rollout.pk).status == "cancelled"
    for move in (firmware_rollouts.resume, firmware_rollouts.cancel):
        with pytest.raises(firmware_rollouts.RolloutRefused, match="is cancelled"):
            move(rollout_id=rollout.pk)
    assert firmware_rollouts.advance(rollout_id=rollout.pk).sent == []


def test_a_rollout_with_nothing_to_do_completes_at_once(transactional_db):
    rollout = start(FirmwareBaseline.objects.create(name="default"))
    assert rollout.status == "completed" and rollout.finished_at is not None


@pytest.mark.django_db
def test_the_database_keeps_rollouts_well_formed():
    baseline = FirmwareBaseline.objects.create(name="default")
    (enrolled,) = enrol_default_fleet(1)

    def refused(create):
        with pytest.raises(IntegrityError), transaction.atomic():
            create()

    rollout = dict(baseline=baseline, batch_size=1, per_pod_cap=1, started_by="operator:alice")
    refused(lambda: FirmwareRollout.objects.create(**rollout | {"status": "done"}))
    refused(lambda: FirmwareRollout.objects.create(**rollout | {"batch_size": 0}))
    refused(lambda: FirmwareRollout.objects.create(**rollout | {"started_by": ""}))
    refused(lambda: FirmwareRollout.objects.create(**rollout | {"status": "paused"}))  # no reason
    refused(lambda: FirmwareRollout.objects.create(**rollout | {"status": "completed"}))  # no finish
    refused(lambda: FirmwareRollout.objects.create(**rollout | {"finished_at": timezone.now()}))  # running
    row = FirmwareRollout.objects.create(**rollout)
    row_node = dict(rollout=row, node=enrolled)
    refused(lambda: FirmwareRolloutNode.objects.create(**row_node, status="lost"))
    refused(lambda: FirmwareRolloutNode.objects.create(**row_node, status="failed", finished_at=timezone.now()))
    refused(lambda: FirmwareRolloutNode.objects.create(**row_node, status="updating"))  # no start
    refused(lambda: FirmwareRolloutNode.objects.create(**row_node, status="updated"))  # no finish
    FirmwareRolloutNode.objects.create(**row_node, status="pending")
    refused(lambda: FirmwareRolloutNode.objects.create(**row_node, status="pending"))  # once per rollout


# -- the operators' ways in: the admin and manage.py roll_out_firmware ---------------------------------


def act(client, path, action, rows, **extra):
    return client.post(path, {"action": action, ACTION_CHECKBOX_NAME: [r.pk for r in rows], **extra}, follow=True)


def test_the_admin_rolls_a_baseline_out_shows_its_progress_and_pauses_resumes_and_cancels_it(
    idle_fleet, baseline, admin_client
):
    answer = act(admin_client, "/admin/fleet/firmwarebaseline/", "roll_out", [baseline])
    assert b"Roll out firmware baselines" in answer.content and b'value="4"' in answer.content
    assert not FirmwareRollout.objects.exists()

    answer = act(
        admin_client,
        "/admin/fleet/firmwarebaseline/",
        "roll_out",
        [baseline],
        apply="Roll out",
        batch_size=2,
        per_pod_cap=2,
    )
    rollout = FirmwareRollout.objects.get()
    assert (rollout.batch_size, rollout.per_pod_cap, rollout.started_by) == (2, 2, "operator:admin")
    assert f"Started rollout {rollout.pk} of default: 12 pending".encode() in answer.content

    firmware_rollouts.advance(rollout_id=rollout.pk)
    drive(idle_fleet["node-001"], "firmware_drift", reason="BMC expected 1.5.0 found 1.5.0-custom")
    firmware_rollouts.advance(rollout_id=rollout.pk)
    page = admin_client.get(f"/admin/fleet/firmwarerollout/{rollout.pk}/change/").content.decode()
    assert "10 pending, 1 updating, 1 failed" in page
    assert "node-001: firmware_drift: BMC expected 1.5.0 found 1.5.0-custom" in page  # why it paused
    assert page.index("node-001") < page.index("node-002") < page.index("node-003")  # failed first, then updating

    changelist = "/admin/fleet/firmwarerollout/"
    assert (
        f"Rollout {rollout.pk} of default resumed".encode()  # the admin's messages start with a capital
        in act(admin_client, changelist, "resume", [rollout]).content
    )
    assert b"is running: it cannot be resumed" in act(admin_client, changelist, "resume", [rollout]).content
    assert b"paused" in act(admin_client, changelist, "pause", [rollout]).content
    assert rollout_now(rollout).paused_reason == "paused by operator:admin"
    act(admin_client, changelist, "cancel", [rollout])
    assert rollout_now(rollout).status == "cancelled"
    assert list(LogEntry.objects.order_by("id").values_list("change_message", flat=True)) == [
        "resumed",
        "paused",
        "cancelled",
    ]


def test_manage_py_roll_out_firmware_starts_one_through_the_same_service(idle_fleet, baseline):
    out = StringIO()
    call_command("roll_out_firmware", "default", "--batch", "2", "--per-pod-cap", "1", stdout=out)
    rollout = FirmwareRollout.objects.get()
    assert out.getvalue() == f"started rollout {rollout.pk} of default, running: 12 pending\n"
    assert (rollout.batch_size, rollout.per_pod_cap, rollout.started_by) == (2, 1, "operator:roll_out_firmware")
    with pytest.raises(CommandError, match="is running"):
        call_command("roll_out_firmware", "default", stdout=out)
    with pytest.raises(CommandError, match="no firmware baseline is named 'h100'"):
        call_command("roll_out_firmware", "h100", stdout=out)
