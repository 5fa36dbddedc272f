"""A tenant reports one of its nodes broken."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from core import clock
from core.errors import TooMany
from fleet import lifecycle
from fleet.models import AuditEvent, Node
from fleet.services import transition
from reservations.models import Tenant

log = logging.getLogger(__name__)


class ReportRefused(TooMany):
    """The tenant has reported as many nodes as it may today, or its nodes have said as much of
    themselves as its budget allows for now."""


def serving_node(*, reservation_id: int, tenant: Tenant, name: str) -> Node | None:
    """The node `name` if it serves this tenant's reservation now; None otherwise (another
    tenant's node or reservation is not told apart from one that does not exist)."""
    return Node.objects.filter(name=name, reservation_id=reservation_id, reservation__tenant=tenant).first()


def report_node(*, node: Node, tenant: Tenant, description: str, now: datetime | None = None) -> None:
    """ "This node is broken": it leaves the reservation, quarantined with the tenant's words for an
    operator, and a replacement is placed at once (reservations/handlers.py). At most
    TENANT_REPORTS_PER_DAY in the day before `now` (None: core.clock's) per tenant; and a report is
    the tenant's word about its own node, so it spends the tenant's budget of such faults
    (TENANT_FAULT_BUDGET, shared with what its nodes report of themselves: remediation/blast_radius.py),
    never the blast-radius cap. Counted under the node's row lock and then the tenant's, the order
    remediation takes them in."""
    actor = f"tenant:{tenant.name}"
    with transaction.atomic():
        list(Node.objects.select_for_update().filter(pk=node.pk).values_list("pk", flat=True))
        Tenant.objects.select_for_update().get(pk=tenant.pk)
        today = AuditEvent.objects.filter(
            event=lifecycle.Event.TENANT_REPORT, actor=actor, at__gte=clock.in_query(now) - timedelta(days=1)
        ).count()
        if today >= settings.TENANT_REPORTS_PER_DAY:
            raise ReportRefused(
                f"you have reported {today} nodes in the last 24 hours, the most a tenant may; "
                "ask the operators if more are broken"
            )
        _spend_fault_budget(node=node, tenant=tenant, now=now)
        transition(
            node_id=node.pk,
            event=lifecycle.Event.TENANT_REPORT,
            actor=actor,
            reason=description,
            detail={"tenant": tenant.pk},  # what the budget counts (remediation.selectors.self_reported_spent)
        )


def _spend_fault_budget(*, node: Node, tenant: Tenant, now: datetime | None) -> None:
    """Refuse the report if the tenant's budget is spent: its reports in the cap's window, and the
    faults of its own nodes let act that overlap it (remediation.selectors.self_reported_spent
    counts the same). The refusal is logged for the operators; the node stays the tenant's."""
    window = timedelta(seconds=settings.REMEDIATION_WINDOW_SECONDS)
    since = clock.in_query(now) - window
    reports = AuditEvent.objects.filter(event=lifecycle.Event.TENANT_REPORT, detail__tenant=tenant.pk, at__gt=since)
    faults = tenant.self_reported_faults.filter(counted_from__isnull=False).filter(
        Q(counted_until__isnull=True) | Q(counted_until__gt=since)
    )
    spent = reports.count() + faults.count()
    if spent >= settings.TENANT_FAULT_BUDGET:
        minutes = f"{window.total_seconds() / 60:g} minutes"
        log.warning(
            "tenant %s's report of %s refused: %d faults in the last %s", tenant.name, node.name, spent, minutes
        )
        raise ReportRefused(
            f"tenant_fault_budget: your nodes have reported {spent} faults in the last {minutes}"
            f" (budget {settings.TENANT_FAULT_BUDGET}); ask the operators to look at {node.name}"
        )
