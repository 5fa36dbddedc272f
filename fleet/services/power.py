"""Tenants' power actions on their nodes: rate-limited, audited, and kept as due work
(fleet/models/power_actions.py) that a worker takes once and the reconciler sends again if its
message is lost."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from core.due_work import take_due
from core.errors import Conflict, TooMany
from fleet.models import AuditEvent, AuditOnlyEvent, Node, NodeState, PowerAction, PowerActionState
from fleet.models.power_actions import TAKEN, WAITING
from fleet.services.transitions import audit_only
from fleet.signals import power_action_requested

POWER_ACTIONS = ("reboot", "power-cycle")
POWER_ACTOR = "system:power"
# A worker that took an action and has not finished it this long after stopped mid-call (it is
# far past any power task's time limit): the action is closed as failed, not tried again.
TAKEN_GIVEN_UP_AFTER = timedelta(minutes=10)
_NOT_HELD = "the reservation no longer holds the node"
_TAKEN_FROM = {PowerActionState.DUE: PowerActionState.ASKING, PowerActionState.RESTART_DUE: PowerActionState.CHECKING}


class PowerActionRefused(Conflict):
    """The node is not up for one."""


class TooManyPowerActions(TooMany):
    """The node had as many as it may this hour."""


def _resend_after() -> timedelta:
    # A message no worker took within its expiry is gone: the reconciler sends the next one then.
    return timedelta(seconds=settings.WORKER_SWEEP_EXPIRES)


def request_power_action(*, node_id: int, action: str, actor: str) -> PowerAction:
    """Audit a tenant's reboot or power cycle of its active node and record it as due; a worker is
    sent it on commit. At most TENANT_POWER_ACTIONS_PER_HOUR a node, counted under the node's row
    lock. An earlier request for the node that has not begun is replaced by this one; one a worker
    is carrying out at the BMC right now makes this one wait (409)."""
    if action not in POWER_ACTIONS:
        raise ValueError(action)
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        if node.state != NodeState.ACTIVE:
            raise PowerActionRefused(f"{node.name} is {node.state}: only an active node can be rebooted")
        hour = AuditEvent.objects.filter(
            node_id=node_id,
            event=AuditOnlyEvent.POWER_ACTION,
            actor__startswith="tenant:",
            at__gte=Now() - timedelta(hours=1),
        ).count()
        if hour >= settings.TENANT_POWER_ACTIONS_PER_HOUR:
            raise TooManyPowerActions(
                f"{node.name} had {hour} power actions in the last hour, the most a node may; try again later"
            )
        power = _record(node, action=action, actor=actor)
        audit_power_action(node, actor=actor, reason=action)
        power_action_requested.send(sender=PowerAction, power_action_id=power.pk)
    return power


def _record(node: Node, *, action: str, actor: str) -> PowerAction:
    """The request as a row, due for the reconciler a resend period from now unless a worker took
    it first. The node's actions no worker has begun are closed first: another reservation's
    expire, its own are replaced by this one (a restart is a restart)."""
    reservation_id = node.reservation_id
    assert reservation_id is not None  # an active node serves a reservation (Node.Meta)
    waiting = PowerAction.objects.filter(node=node, state__in=WAITING)
    waiting.exclude(reservation_id=reservation_id).update(
        state=PowerActionState.EXPIRED, due_at=None, finished_at=Now(), result=_NOT_HELD
    )
    waiting.update(
        state=PowerActionState.SUPERSEDED, due_at=None, finished_at=Now(), result="a later request took its place"
    )
    try:
        with transaction.atomic():
            return PowerAction.objects.create(
                node=node,
                reservation_id=reservation_id,
                action=action,
                requested_by=actor,
                due_at=Now() + _resend_after(),
            )
    except IntegrityError as error:  # power_action_one_open_per_node: a worker is carrying one out
        raise PowerActionRefused(
            f"a power action on {node.name} is under way at its BMC; try again in a minute"
        ) from error


def audit_power_action(node: Node, *, actor: str, reason: str) -> None:
    audit_only(node, AuditOnlyEvent.POWER_ACTION, actor=actor, reason=reason).save()


def take_due_power_actions(*, limit: int) -> tuple[list[int], list[int]]:
    """The actions no worker took in time (their message lost, or expired in a backlog) and the
    reboots whose grace is over, each due again a resend period later (core.due_work); the caller
    sends a worker each. First, actions a worker took and never finished are closed as failed."""
    PowerAction.objects.filter(state__in=TAKEN, taken_at__lt=Now() - TAKEN_GIVEN_UP_AFTER).update(
        state=PowerActionState.FAILED,
        finished_at=Now(),
        result="the worker that took it stopped before it finished: not tried again, it may have run",
    )
    asks = take_due(
        PowerAction.objects.filter(state=PowerActionState.DUE),
        due_field="due_at",
        again_in=_resend_after(),
        limit=limit,
    )
    checks = take_due(
        PowerAction.objects.filter(state=PowerActionState.RESTART_DUE),
        due_field="due_at",
        again_in=_resend_after(),
        limit=limit,
    )
    return asks, checks


def take_power_action(*, power_action_id: int, waiting: PowerActionState) -> PowerAction | None:
    """Take the action for this worker (compare-and-set from `waiting`, due or restart_due, to the
    state a worker holds it in): None if another worker took it first or it has closed. One whose
    reservation no longer holds the node is closed as expired instead, and None too."""
    if not PowerAction.objects.filter(pk=power_action_id, state=waiting).update(
        state=_TAKEN_FROM[waiting], due_at=None, taken_at=Now()
    ):
        return None
    power = PowerAction.objects.select_related("node").get(pk=power_action_id)
    serving = Node.objects.filter(pk=power.node_id, state=NodeState.ACTIVE, reservation_id=power.reservation_id)
    if not serving.exists():
        finish_power_action(power_action_id=power_action_id, state=PowerActionState.EXPIRED, result=_NOT_HELD)
        return None
    return power


def restart_asked(*, power_action_id: int, reset_before: str) -> None:
    """The BMC took the graceful restart: once TENANT_REBOOT_GRACE_SECONDS are over, the
    reconciler has a worker check that the system restarted, and force it if not."""
    PowerAction.objects.filter(pk=power_action_id, state=PowerActionState.ASKING).update(
        state=PowerActionState.RESTART_DUE,
        reset_before=reset_before,
        due_at=Now() + timedelta(seconds=settings.TENANT_REBOOT_GRACE_SECONDS),
    )


def restart_forced(*, power_action_id: int) -> None:
    """The OS ignored the graceful restart and the BMC forced it: audited on the node."""
    grace = settings.TENANT_REBOOT_GRACE_SECONDS
    with transaction.atomic():
        power = PowerAction.objects.select_related("node").get(pk=power_action_id)
        audit_power_action(power.node, actor=POWER_ACTOR, reason=f"reboot forced: no restart within {grace:g}s")
        finish_power_action(power_action_id=power_action_id, state=PowerActionState.DONE, result="forced")


def finish_power_action(*, power_action_id: int, state: PowerActionState, result: str) -> str:
    """Close the action a worker took, with what came of it; `result` is returned for the task's log."""
    PowerAction.objects.filter(pk=power_action_id, state__in=TAKEN).update(
        state=state, finished_at=Now(), result=result
    )
    return result
