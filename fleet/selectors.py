"""Reads of the fleet."""

from django.db.models import Q
from django.db.models.functions import Now

from fleet import lifecycle
from fleet.models import Node


def nodes_owing_work(*, limit: int) -> list[int]:
    """Nodes in a state that owes a workflow, with no live lease: longest waiting first."""
    unleased = Q(lease_owner="") | Q(lease_expires_at__lte=Now())
    return list(
        Node.objects.filter(unleased, state__in=sorted(s.value for s in lifecycle.WORK_STATES))
        .order_by("state_since", "pk")
        .values_list("pk", flat=True)[:limit]
    )
