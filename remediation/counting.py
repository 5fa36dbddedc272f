"""Counting an automatic remediation as a new incident: against the blast-radius cap under its
PostgreSQL advisory lock, or, for what a tenant's own node says of itself, against that tenant's
budget under the tenant's row lock (remediation/blast_radius.py). remediation.services calls it
with the node's row locked already: the node, then the tenant or the cap, always in that order."""

from __future__ import annotations

from datetime import datetime

from django.db import connection

from core import clock
from fleet.models import Node
from remediation import blast_radius, selectors
from remediation.models import Remediation

# One lock for every process and replica that may quarantine on its own ("gpuf" in ASCII).
CAP_LOCK = 0x67707566


def count_against_cap(remediation: Remediation, node: Node) -> str | None:
    """Count the remediation as a new incident, or say why it may not act: against its tenant's
    budget if the tenant's own node reported it (`self_reported_by`), else against the blast-radius
    cap (remediation/blast_radius.py). Each takes its lock, so the count and the act that follows
    share one locked transaction."""
    if (tenant_id := remediation.self_reported_by_id) is not None:
        over, now = _budget_refusal(tenant_id)
    else:
        over, now = _cap_refusal(node)
    if over is None:
        remediation.counted_from = now
    return over


def _cap_refusal(node: Node) -> tuple[str | None, datetime]:
    """Under the cap's advisory lock: why the cap refuses one more incident on `node`, and when."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CAP_LOCK])
    # Read under the lock, not the service's earlier `now`: each count starts after the one before it.
    now = clock.now()
    cap = selectors.blast_radius_cap()
    counted = selectors.cap_incidents(since=now - cap.window)
    return blast_radius.refusal(cap, counted, pod=node.rack.pod.name, at=now), now


def _budget_refusal(tenant_id: int) -> tuple[str | None, datetime]:
    """Under the tenant's row lock, the one its reports of broken nodes take too: why its budget
    refuses one more fault of its own nodes, and when."""
    # The tenant's model reached through the relation: remediation imports nothing of reservations.
    tenants = Remediation._meta.get_field("self_reported_by").related_model._default_manager
    tenants.select_for_update().values_list("pk", flat=True).get(pk=tenant_id)  # the lock
    now = clock.now()
    budget = selectors.tenant_fault_budget()
    spent = selectors.self_reported_spent(tenant_id=tenant_id, since=now - budget.window)
    return blast_radius.budget_refusal(budget, spent, at=now), now
