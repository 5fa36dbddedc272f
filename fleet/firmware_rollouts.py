"""Firmware rollouts applied to the database: start, advance, pause, resume, cancel.

fleet/rollout_rules.py decides (pure); this applies its decisions in transactions. Locks are
taken in one order: the baseline's row (a start only), the rollout's, its node rows, a node's idle
diagnostics run, then the node's own (fleet.services.transition), as an idle run's verdict takes the
last two. Pausing, resuming and cancelling take the rollout's only and placement takes nodes only, so
nothing waits on another in a cycle. Each node is sent to inspection in a transaction of its own, under the
rollout's lock, which checks again that the rollout still runs and that the caps leave room: a
pause, or another advance, comes wholly before or after it. The node's lifecycle event goes through
`transition`, a compare-and-set on its state, so a node that placement took meanwhile is left alone.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace

from django.db import transaction
from django.db.models.functions import Now

from core.errors import Conflict
from fleet import firmware, lifecycle, rollout_rules, selectors
from fleet.models import FirmwareBaseline, FirmwareRollout, FirmwareRolloutNode, IdleDiagnosticStatus
from fleet.rollout_rules import NodeStatus, RolloutStatus
from fleet.services import end_idle_diagnostics, transition


class RolloutRefused(Conflict):
    """The rollout cannot do that now: one is under way already, or it has finished."""


def start_rollout(*, baseline: FirmwareBaseline, batch_size: int, per_pod_cap: int, actor: str) -> FirmwareRollout:
    """Start rolling `baseline` out to every node of its class: nodes that run it already count as
    updated, nodes in use as at their next handoff, the others wait for a batch (the reconciler's
    `advance` sends them). RolloutRefused if one is under way for the baseline; InvalidLimits for a
    batch size or cap below 1."""
    limits = rollout_rules.Limits(batch_size=batch_size, per_pod_cap=per_pod_cap)
    with transaction.atomic():
        FirmwareBaseline.objects.select_for_update().get(pk=baseline.pk)  # one start at a time per baseline
        under_way = FirmwareRollout.objects.filter(baseline=baseline, status__in=rollout_rules.UNDER_WAY).first()
        if under_way is not None:
            raise RolloutRefused(f"{under_way} is {under_way.status}: resume or cancel it rather than start another")
        rollout = FirmwareRollout.objects.create(
            baseline=baseline, batch_size=limits.batch_size, per_pod_cap=limits.per_pod_cap, started_by=actor
        )
        FirmwareRolloutNode.objects.bulk_create(
            FirmwareRolloutNode(rollout=rollout, node_id=node_id, status=NodeStatus.PENDING)
            for node_id in selectors.nodes_of_baseline(baseline).order_by("pk").values_list("pk", flat=True)
        )
        _settle(FirmwareRollout.objects.select_related("baseline").get(pk=rollout.pk), held=frozenset())
    return FirmwareRollout.objects.get(pk=rollout.pk)


@dataclass(frozen=True)
class Advanced:
    status: RolloutStatus
    sent: list[str]  # the nodes sent to inspection


def advance(*, rollout_id: int, held: Collection[int] = frozenset()) -> Advanced:
    """One look at a rollout, as the reconciler takes one every period: settle what its nodes did
    since the last (pausing it at the first failure, completing it once every node runs the baseline
    or is out of service), then, if it still runs, send the next batch to inspection. `held`: ids of
    nodes a booking holds now or soon, which fleet cannot know (it knows no reservations)."""
    held = frozenset(held)
    with transaction.atomic():
        rollout = FirmwareRollout.objects.select_for_update().select_related("baseline").get(pk=rollout_id)
        if rollout.status not in rollout_rules.UNDER_WAY:
            return Advanced(RolloutStatus(rollout.status), [])
        settled = _settle(rollout, held=held)
    if rollout.status != RolloutStatus.RUNNING:
        return Advanced(RolloutStatus(rollout.status), [])
    rows = {facts.name: row for row, facts in settled}
    batch = rollout_rules.next_batch([facts for _, facts in settled], rollout.limits)
    return Advanced(RolloutStatus.RUNNING, [n.name for n in batch if _send(rollout.pk, rows[n.name], n.pod)])


def advance_all(*, held: Iterable[int] = ()) -> dict:
    """Advance every rollout under way. `held` (the nodes bookings hold, a query maybe) is read only
    when one is: most passes find none, and at 100,000 nodes it is thousands of ids."""
    under_way = list(
        FirmwareRollout.objects.filter(status__in=rollout_rules.UNDER_WAY).order_by("pk").values_list("pk", flat=True)
    )
    held_now = frozenset(held) if under_way else frozenset()
    advanced = {pk: advance(rollout_id=pk, held=held_now) for pk in under_way}
    return {
        "rollouts": len(advanced),
        "sent_to_inspection": [name for each in advanced.values() for name in each.sent],
    }


def _settle(
    rollout: FirmwareRollout, *, held: frozenset[int]
) -> list[tuple[selectors.CheckedRolloutNode, rollout_rules.RolloutNode]]:
    """Bring the rollout's (under way) node rows up to date, then pause it at a new failure or complete
    it; each row with its node as settled. Call it in the transaction that holds the rollout's row."""
    settled, before, after = [], {}, {}
    baseline = rollout.baseline.as_baseline()
    for row in selectors.rollout_nodes(rollout):
        facts = _facts(row, baseline, held)
        now = rollout_rules.settle(facts)
        if (now.status, now.reason) != (row.status, row.reason):
            changes: dict[str, object] = {"reason": now.reason}
            if now.status != row.status:
                changes |= {"status": now.status, "finished_at": Now() if now.status in rollout_rules.DONE else None}
            FirmwareRolloutNode.objects.filter(pk=row.pk).update(**changes)
        settled.append((row, replace(facts, status=now.status)))
        before[facts.name], after[facts.name] = facts.status, now
    if (failure := rollout_rules.first_failure(before, after)) is not None:
        # Paused already (by an operator), it now says why it must not simply be resumed.
        rollout.status = RolloutStatus.PAUSED
        FirmwareRollout.objects.filter(pk=rollout.pk).update(status=rollout.status, paused_reason=failure)
    elif rollout.status == RolloutStatus.RUNNING and rollout_rules.complete(facts for _, facts in settled):
        rollout.status = RolloutStatus.COMPLETED
        FirmwareRollout.objects.filter(pk=rollout.pk).update(status=rollout.status, finished_at=Now())
    return settled


def _facts(
    row: selectors.CheckedRolloutNode, baseline: firmware.Baseline, held: frozenset[int]
) -> rollout_rules.RolloutNode:
    node = row.node
    return rollout_rules.RolloutNode(
        name=node.name,
        pod=node.rack.pod.name,
        state=lifecycle.State(node.state),
        status=NodeStatus(row.status),
        runs_baseline=rollout_rules.runs_baseline(baseline, row.last_check),
        quarantine_reason=node.quarantine_reason,
        held=node.pk in held,
        under_repair=node.under_repair,
    )


def _send(rollout_id: int, row: FirmwareRolloutNode, pod: str) -> bool:
    """Send one node of the batch to inspection (lifecycle firmware_update), audited as the rollout's,
    if the rollout still runs, the caps leave room and the node is still pending and available;
    whether it was sent. An idle diagnostics run on it is preempted: the inspection's first step
    reboots the node, which ends the run, and the inspection runs diagnostics of its own."""
    try:
        with transaction.atomic():
            rollout = FirmwareRollout.objects.select_for_update().select_related("baseline").get(pk=rollout_id)
            updating = rollout.nodes.filter(status=NodeStatus.UPDATING).values_list("node__rack__pod__name", flat=True)
            if rollout.status != RolloutStatus.RUNNING or not rollout_rules.has_room(pod, updating, rollout.limits):
                return False
            taken = FirmwareRolloutNode.objects.filter(pk=row.pk, status=NodeStatus.PENDING).update(
                status=NodeStatus.UPDATING, reason="", started_at=Now()
            )
            if not taken:
                return False
            if (idle := selectors.running_idle_diagnostics(node_id=row.node_id)) is not None:
                end_idle_diagnostics(
                    run_id=idle.pk,
                    status=IdleDiagnosticStatus.PREEMPTED,
                    actor=rollout.actor,
                    detail="a firmware rollout took the node: its inspection reboots it",
                )
            transition(
                node_id=row.node_id,
                event=lifecycle.Event.FIRMWARE_UPDATE,
                actor=rollout.actor,
                reason=f"firmware rollout {rollout.pk} of baseline {rollout.baseline.name}",
                detail={"rollout": rollout.pk, "baseline": rollout.baseline.name},
            )
    except lifecycle.TransitionRefused:
        return False  # placement or an operator took the node first; the next look settles it
    return True


def pause(*, rollout_id: int, actor: str) -> FirmwareRollout:
    """Stop sending nodes to inspection; those inspecting finish, and their outcomes are still settled."""
    return _move(
        rollout_id, {RolloutStatus.RUNNING}, "paused", status=RolloutStatus.PAUSED, paused_reason=f"paused by {actor}"
    )


def resume(*, rollout_id: int) -> FirmwareRollout:
    """Go on with the next batch; a node that failed stays failed until it runs the baseline."""
    return _move(rollout_id, {RolloutStatus.PAUSED}, "resumed", status=RolloutStatus.RUNNING, paused_reason="")


def cancel(*, rollout_id: int) -> FirmwareRollout:
    """End it: nothing more is sent. Nodes inspecting finish their inspection (stopping one halfway
    could leave it half flashed); every node still gets the baseline at its next inspection."""
    return _move(rollout_id, rollout_rules.UNDER_WAY, "cancelled", status=RolloutStatus.CANCELLED, finished_at=Now())


def _move(rollout_id: int, allowed: Collection[RolloutStatus], verb: str, **fields) -> FirmwareRollout:
    """Compare-and-set of the rollout's status, under its row lock; RolloutRefused if it is not in `allowed`."""
    with transaction.atomic():
        rollout = FirmwareRollout.objects.select_for_update().select_related("baseline").get(pk=rollout_id)
        if rollout.status not in allowed:
            raise RolloutRefused(f"{rollout} is {rollout.status}: it cannot be {verb}")
        FirmwareRollout.objects.filter(pk=rollout_id).update(**fields)
    return FirmwareRollout.objects.select_related("baseline").get(pk=rollout_id)
