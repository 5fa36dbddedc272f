"""Reads of the fleet."""

from collections.abc import Iterable
from datetime import timedelta

from django.db.models import Q, QuerySet
from django.db.models.functions import Now

from fleet import lifecycle
from fleet.models import ConfigDrive, Node


def _unleased_owing_work() -> QuerySet[Node]:
    unleased = Q(lease_owner="") | Q(lease_expires_at__lte=Now())
    return Node.objects.filter(unleased, state__in=sorted(s.value for s in lifecycle.WORK_STATES))


def nodes_owing_work(*, limit: int, quiet_for: timedelta) -> list[int]:
    """Nodes in a state that owes a workflow, with no live lease, and untouched for `quiet_for`:
    longest waiting first. A node that just moved was enqueued on commit; it needs no second message."""
    quiet = Q(state_since__lte=Now() - quiet_for) & (Q(step_since__isnull=True) | Q(step_since__lte=Now() - quiet_for))
    return list(_unleased_owing_work().filter(quiet).order_by("state_since", "pk").values_list("pk", flat=True)[:limit])


def unleased_nodes_owing_work(node_ids: Iterable[int]) -> list[int]:
    """Those of `node_ids` that owe a workflow and that no live lease holds."""
    return list(_unleased_owing_work().filter(pk__in=list(node_ids)).order_by("pk").values_list("pk", flat=True))


def config_drive_token(*, node_id: int) -> str:
    """The token of the URL the node's BMC fetches its config drive from."""
    return ConfigDrive.objects.values_list("token", flat=True).get(node_id=node_id)
