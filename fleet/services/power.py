"""Tenants' power actions on their nodes, rate-limited and audited."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from core.errors import Conflict, TooMany
from fleet.models import AuditEvent, AuditOnlyEvent, Node, NodeState
from fleet.services.transitions import audit_only
from fleet.signals import power_action_requested

POWER_ACTIONS = ("reboot", "power-cycle")


class PowerActionRefused(Conflict):
    """The node is not up for one."""


class TooManyPowerActions(TooMany):
    """The node had as many as it may this hour."""


def request_power_action(*, node_id: int, action: str, actor: str) -> None:
    """Audit a tenant's reboot or power cycle of its active node and have the BMC do it on commit;
    at most TENANT_POWER_ACTIONS_PER_HOUR a node, counted under the node's row lock."""
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
        audit_power_action(node, actor=actor, reason=action)
        power_action_requested.send(sender=Node, node_id=node_id, action=action, reservation_id=node.reservation_id)


def audit_power_action(node: Node, *, actor: str, reason: str) -> None:
    audit_only(node, AuditOnlyEvent.POWER_ACTION, actor=actor, reason=reason).save()
