"""Changes of how a node's BMC and agent are reached, each audited (secrets as changed, never by
value).
"""

from __future__ import annotations

from django.db import transaction

from fleet.bmc_access import check_bmc_url
from fleet.models import AuditEvent, AuditOnlyEvent, Node
from fleet.services.transitions import audit_only

# How a node's BMC and agent are reached; the secrets among them are audited as changed, never by value.
BMC_ACCESS_FIELDS = ["redfish_url", "system_id", "bmc_username", "bmc_password", "agent_url"]


SECRET_ACCESS_FIELDS = ("bmc_password",)


def bmc_change(node: Node, access: dict) -> dict:
    """What the new access changes, fit for the audit log: a secret only as changed or not."""
    return {
        field: "changed" if field in SECRET_ACCESS_FIELDS else {"from": getattr(node, field), "to": value}
        for field, value in access.items()
        if getattr(node, field) != value
    }


def bmc_change_audit(node: Node, actor: str, detail: dict) -> AuditEvent:
    reason = f"BMC access changed: {', '.join(detail)}"
    return audit_only(node, AuditOnlyEvent.BMC_CHANGED, actor=actor, reason=reason, detail=detail)


def change_bmc_access(
    *,
    node_id: int,
    actor: str,
    redfish_url: str,
    system_id: str,
    bmc_username: str,
    bmc_password: str,
    agent_url: str,
) -> Node:
    """Give the node new BMC and agent access (the BMC password always with it) and audit what changed.

    Raises BMCAddressRefused if the BMC or agent URL is outside the BMC networks. The audit
    row names the fields that changed, with old and new values, but never a secret's.
    """
    for url in filter(None, (redfish_url, agent_url)):
        check_bmc_url(url)
    access = {
        "redfish_url": redfish_url,
        "system_id": system_id,
        "bmc_username": bmc_username,
        "bmc_password": bmc_password,
        "agent_url": agent_url,
    }
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        detail = bmc_change(node, access)
        if detail:
            Node.objects.filter(pk=node_id).update(**access)
            bmc_change_audit(node, actor, detail).save()
    return Node.objects.get(pk=node_id)
