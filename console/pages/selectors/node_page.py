"""A node's page: its GPUs, its audit timeline and its remediations."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from attestation.models import AttestationResult
from console.pages.disclosure import Disclosure
from console.pages.selectors.remediations import RemediationRow, remediation_row
from core import clock
from fleet.models import GPU, Node
from fleet.services.network_attachments import hold_reasons
from remediation import rules
from remediation import selectors as remediation_selectors

NODE_TIMELINE_LIMIT = 200


@dataclass(frozen=True)
class TimelineRow:
    """One audit row as the viewer may see it."""

    at: datetime
    event: str
    from_state: str
    to_state: str
    actor: str
    reason: str


@dataclass
class NodePage:
    node: Node
    tenant: str | None
    quarantine_reason: str
    hold_reason: str  # why placement keeps off it while it is not quarantined (network_cleanup_pending)
    gpus: list[GPU]
    timeline: list[TimelineRow]
    attestation: AttestationResult | None
    remediations: list[RemediationRow]
    remediated_recently: int  # within the repeat-offender window
    repeat_offender: rules.RepeatOffender = rules.REPEAT_OFFENDER
    timeline_limit: int = NODE_TIMELINE_LIMIT


def node_page(name: str, *, disclosure: Disclosure, now: datetime | None = None) -> NodePage | None:
    """The node's page, with the remediations within the repeat-offender window before `now`
    (None: core.clock's)."""
    node = Node.objects.select_related("rack__pod", "tenant").filter(name=name).first()
    if node is None:
        return None
    timeline = [
        TimelineRow(
            at=event.at,
            event=event.event,
            from_state=event.from_state,
            to_state=event.to_state,
            actor=disclosure.actor(event.actor),
            reason=disclosure.audit_reason(event),
        )
        for event in node.audit_events.order_by("-at", "-id")[:NODE_TIMELINE_LIMIT]
    ]
    return NodePage(
        node=node,
        tenant=disclosure.tenant(node.tenant.name if node.tenant else None),
        quarantine_reason=disclosure.text(node.quarantine_reason),
        hold_reason=disclosure.text(hold_reasons([node.pk]).get(node.pk, "")),
        gpus=list(node.gpus.order_by("index")),
        timeline=timeline,
        attestation=AttestationResult.objects.filter(node=node).first(),
        remediations=[
            remediation_row(remediation, disclosure) for remediation in node.remediations.order_by("-at", "-id")[:10]
        ],
        remediated_recently=remediation_selectors.remediations_acted_on(node, now or clock.now()),
    )
