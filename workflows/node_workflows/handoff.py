"""The handoff to the tenant: once the node is read back on its reservation's networks, its
inspection's verdict is signed again with those memberships, the result its tenant verifies.

The memberships come from the node's attachments as the fabric sync last read them back
(fleet/models/networks.py); inspection signs them too, to prove the previous tenant's are gone.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings

from attestation import services as attestation_services
from core.topology import FABRICS
from fleet import networks
from fleet.models import NetworkAttachment, Node
from workflows.node_workflows.run import NotYet, Run, StepFailed


def networks_read_back(node: Node) -> dict:
    """The node's membership of each fabric it has ports on, as last read back, for the `networks`
    claim of its signed result. Only a confirmed read-back counts as read: any other membership is
    what was seen last, marked `"confirmed": false`, and `read_at` is the oldest confirmed read."""
    attachments = {a.fabric: a for a in NetworkAttachment.objects.filter(node_id=node.pk)}
    confirmed_reads = [a.checked_at for a in attachments.values() if a.confirmed and a.checked_at is not None]
    return {
        "read_at": _iso(min(confirmed_reads, default=None)),
        "reservation": node.reservation_id,
        "fabrics": {fabric: _membership(attachments[fabric]) for fabric in FABRICS if fabric in attachments},
    }


def _membership(attachment: NetworkAttachment) -> dict:
    idle = networks.idle_membership(attachment.fabric, provisioning_vlan=settings.PROVISIONING_VLAN)
    shown: dict[str, object] = {
        "membership": attachment.found,
        "tenant": attachment.found not in (idle, ""),  # "": an isolated Ethernet port, on no VLAN
        "read_at": _iso(attachment.checked_at),
    }
    if not attachment.confirmed:
        shown["confirmed"] = False
    return shown


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def sign_handoff(run: Run) -> None:
    """Sign the node's inspection verdict again with the tenant's networks, as read back (GET
    /v1/nodes/{name}/attestation serves it while the tenant holds the node). A membership no
    longer confirmed since the wait for it (drift) waits for the sync to put it back."""
    read_back = networks_read_back(run.node)
    if unconfirmed := [fabric for fabric, shown in read_back["fabrics"].items() if not shown.get("confirmed", True)]:
        raise NotYet(f"handoff: the {', '.join(unconfirmed)} membership is no longer read back as wanted")
    try:
        attestation_services.sign_handoff(node_id=run.node.pk, node_name=run.node.name, networks=read_back)
    except attestation_services.NotConfigured as missing:
        raise NotYet(f"handoff: {missing}") from missing
    except attestation_services.NothingToHandOff as nothing:
        raise StepFailed(f"handoff: {nothing}") from nothing
