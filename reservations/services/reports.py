"""A tenant reports one of its nodes broken."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from core import clock
from core.errors import TooMany
from fleet import lifecycle
from fleet.models import AuditEvent, Node
from fleet.services import transition
from reservations.models import Tenant


class ReportRefused(TooMany):
    """The tenant has reported as many nodes as it may today."""


def serving_node(*, reservation_id: int, tenant: Tenant, name: str) -> Node | None:
    """The node `name` if it serves this tenant's reservation now; None otherwise (another
    tenant's node or reservation is not told apart from one that does not exist)."""
    return Node.objects.filter(name=name, reservation_id=reservation_id, reservation__tenant=tenant).first()


def report_node(*, node: Node, tenant: Tenant, description: str, now: datetime | None = None) -> None:
    """ "This node is broken": it leaves the reservation, quarantined with the tenant's words for an
    operator, and a replacement is placed at once (reservations/handlers.py). At most
    TENANT_REPORTS_PER_DAY in the day before `now` (None: core.clock's) per tenant, counted under
    the tenant's row lock."""
    actor = f"tenant:{tenant.name}"
    with transaction.atomic():
        Tenant.objects.select_for_update().get(pk=tenant.pk)
        today = AuditEvent.objects.filter(
            event=lifecycle.Event.TENANT_REPORT, actor=actor, at__gte=clock.in_query(now) - timedelta(days=1)
        ).count()
        if today >= settings.TENANT_REPORTS_PER_DAY:
            raise ReportRefused(
                f"you have reported {today} nodes in the last 24 hours, the most a tenant may; "
                "ask the operators if more are broken"
            )
        transition(node_id=node.pk, event=lifecycle.Event.TENANT_REPORT, actor=actor, reason=description)
