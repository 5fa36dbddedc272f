"""Leases with fencing: how workers share the nodes that owe work.

A worker claims nodes with SELECT ... FOR UPDATE SKIP LOCKED, so two workers never claim the
same node and neither waits on the other. Each claim sets the owner, an expiry from the
database's clock, and a fencing token that grows on every claim. The worker heartbeats to
extend its lease and writes every result through a conditional update on its token and an
unexpired lease: a stalled worker whose lease a successor took over cannot overwrite the
successor's work; its result is discarded and the discard audited.

A worker does not wait out slow or hung hardware: it parks the node (`park`), held by nobody
until its wait is due to be checked again. Once that hold expires the reconciler sends the node
again, like any node that owes work and has no live lease, and its next claimer resumes the
wait where it stands: a parked node is given back, not taken over.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from fleet import lifecycle
from fleet.models import AuditEvent, AuditOnlyEvent, Node

# The owner of a parked node's hold: no worker.
WAITING_ON_HARDWARE = "waiting on hardware"


class LeaseLost(Exception):
    """The worker's lease no longer holds: its result was discarded (and audited)."""


@dataclass(frozen=True)
class Lease:
    node_id: int
    owner: str
    token: int
    # The previous lease expired rather than being released or parked: its holder died or
    # stalled mid-step.
    took_over: bool = False


def _duration(seconds: float | None) -> timedelta:
    return timedelta(seconds=settings.LEASE_SECONDS if seconds is None else seconds)


def claim(
    *,
    owner: str,
    states: Iterable[lifecycle.State] = lifecycle.WORK_STATES,
    limit: int = 1,
    seconds: float | None = None,
    node_ids: Iterable[int] | None = None,
) -> list[Lease]:
    """Claim up to `limit` nodes in `states` (among `node_ids`, if given) whose lease is free or
    expired, longest waiting first."""
    if not owner:
        raise ValueError("a lease needs an owner")
    with transaction.atomic():
        free = Q(lease_owner="") | Q(lease_expires_at__lte=Now())
        candidates = Node.objects.filter(free, state__in=sorted(lifecycle.State(s).value for s in states))
        if node_ids is not None:
            candidates = candidates.filter(pk__in=list(node_ids))
        previous_owner = dict(
            candidates.order_by("state_since", "pk")
            .select_for_update(skip_locked=True)
            .values_list("pk", "lease_owner")[:limit]
        )
        Node.objects.filter(pk__in=previous_owner).update(
            lease_owner=owner, lease_expires_at=Now() + _duration(seconds), fencing_token=F("fencing_token") + 1
        )
        claimed = Node.objects.filter(pk__in=previous_owner).order_by("pk").values_list("pk", "fencing_token")
        return [
            Lease(node_id=pk, owner=owner, token=token, took_over=previous_owner[pk] not in ("", WAITING_ON_HARDWARE))
            for pk, token in claimed
        ]


def heartbeat(lease: Lease, *, seconds: float | None = None) -> None:
    """Extend a live lease; LeaseLost if it expired or a successor took the node."""
    extended = fenced(Node.objects.filter(pk=lease.node_id), lease).update(lease_expires_at=Now() + _duration(seconds))
    if not extended:
        raise LeaseLost(f"lease {lease.token} of {lease.owner} on node {lease.node_id} no longer holds")


def release(lease: Lease) -> bool:
    """Give the node back without a result; False if the lease had already gone."""
    return bool(fenced(Node.objects.filter(pk=lease.node_id), lease).update(lease_owner="", lease_expires_at=None))


def park(lease: Lease, *, seconds: float) -> bool:
    """Give the node back mid-wait, with its step: nobody may claim it for `seconds`, then the
    reconciler sends it again. False if the lease had already gone."""
    parked = fenced(Node.objects.filter(pk=lease.node_id), lease).update(
        lease_owner=WAITING_ON_HARDWARE, lease_expires_at=Now() + timedelta(seconds=seconds)
    )
    return bool(parked)


def reclaim(lease: Lease) -> Lease | None:
    """Claim again, under a new token, the node whose work `lease` has just completed, if the
    outcome owes more work: the worker goes straight on with what it knows of the hardware.
    Call it in the transaction that completed the work, so that no other worker is sent the node
    meanwhile (and none can claim it: that transaction holds the node's row); None if the node
    owes no work."""
    taken = Node.objects.filter(
        pk=lease.node_id, lease_owner="", state__in=sorted(s.value for s in lifecycle.WORK_STATES)
    ).update(lease_owner=lease.owner, lease_expires_at=Now() + _duration(None), fencing_token=F("fencing_token") + 1)
    if not taken:
        return None
    token = Node.objects.values_list("fencing_token", flat=True).get(pk=lease.node_id)
    return Lease(node_id=lease.node_id, owner=lease.owner, token=token)


def set_step(lease: Lease, *, step: str, actor: str, detail: dict | None = None) -> bool:
    """Record the workflow step the worker is on (audited, with `detail`, when it changes; a
    step resumed keeps its `step_since`); False, and an audited discard, if the lease is gone."""
    with transaction.atomic():
        node = Node.objects.get(pk=lease.node_id)
        moved = (
            fenced(Node.objects.filter(pk=lease.node_id), lease).exclude(step=step).update(step=step, step_since=Now())
        )
        if moved:
            AuditEvent.objects.create(
                node_id=node.pk,
                actor=actor,
                event=AuditOnlyEvent.STEP_CHANGED,
                from_state=node.state,
                to_state=node.state,
                reason=step,
                detail={"from_step": node.step, "token": lease.token, **(detail or {})},
            )
        holds = moved or fenced(Node.objects.filter(pk=lease.node_id, step=step), lease).exists()
    if not holds:
        record_discarded_result(lease=lease, attempted=f"step {step}", actor=actor)
    return bool(holds)


def fenced(queryset, lease: Lease):
    """The rows of `queryset` that `lease` still holds: its token, its owner, not expired."""
    return queryset.filter(fencing_token=lease.token, lease_owner=lease.owner, lease_expires_at__gt=Now())


def record_discarded_result(*, lease: Lease, attempted: str, actor: str) -> AuditEvent:
    """Audit what a worker whose lease no longer holds tried to do, and that was not done."""
    node = Node.objects.get(pk=lease.node_id)
    return AuditEvent.objects.create(
        node_id=node.pk,
        actor=actor,
        event=AuditOnlyEvent.RESULT_DISCARDED,
        from_state=node.state,
        to_state=node.state,
        reason=f"{attempted} from {lease.owner} with fencing token {lease.token} discarded: "
        f"the node's token is {node.fencing_token} and its lease owner {node.lease_owner or 'nobody'}",
        detail={"attempted": attempted, "token": lease.token, "current_token": node.fencing_token},
    )
