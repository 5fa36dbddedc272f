"""Reads of the fleet."""

from datetime import timedelta

from django.db.models import Q
from django.db.models.functions import Now

from fleet import lifecycle
from fleet.models import Node


def nodes_owing_work(*, limit: int, quiet_for: timedelta) -> list[int]:
    """Nodes in a state that owes a workflow, with no live lease, and untouched for `quiet_for`:
    longest waiting first. A node that just moved was enqueued on commit; it needs no second message."""
    unleased = Q(lease_owner="") | Q(lease_expires_at__lte=Now())
    quiet = Q(state_since__lte=Now() - quiet_for) & (Q(step_since__isnull=True) | Q(step_since__lte=Now() - quiet_for))
    return list(
        Node.objects.filter(unleased, quiet, state__in=sorted(s.value for s in lifecycle.WORK_STATES))
        .order_by("state_since", "pk")
        .values_list("pk", flat=True)[:limit]
    )
