"""Changes of a node's state: `transition` (for operators, the reconciler, reservations and
remediation) and `complete` (a worker's result under its lease) are the only code that changes
one. Both apply the pure state machine of fleet/lifecycle.py with a compare-and-set on the old
state (and, for a worker, on its lease's fencing token, fleet/leases.py) and write the audit row
in the same transaction.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection, transaction
from django.db.models.functions import Now

from fleet import leases, lifecycle
from fleet.leases import Lease
from fleet.models import (
    AuditEvent,
    AuditOnlyEvent,
    ConfigDrive,
    CredentialHolder,
    Node,
    NodeAddress,
    NodeCredential,
    NodeState,
)
from fleet.services.network_attachments import forget_tenant_networks, isolate
from fleet.signals import node_transitioned


class ConcurrentTransition(lifecycle.TransitionRefused):
    """Another writer changed the node between our read and our compare-and-set."""

    def __init__(self, node: str, expected_state: str):
        super().__init__(f"node {node} left state {expected_state!r} before this transition could apply")


def _state_fields(
    node: Node, new_state: lifecycle.State, event: lifecycle.Event, reason: str, reservation, *, now: datetime
) -> dict[str, object]:
    fields: dict[str, object] = {"state": new_state.value}
    if new_state != node.state:
        # A new state starts afresh: no step yet, and whatever lease was held is over.
        fields.update(state_since=now, step="", step_since=None, lease_owner="", lease_expires_at=None)
    if new_state not in lifecycle.SERVING_STATES:
        fields.update(reservation=None, ssh_host_key_fingerprint="", reinstall_image=None)
    if event is lifecycle.Event.REINSTALL_REQUESTED:
        fields["ssh_host_key_fingerprint"] = ""  # a new instance: new host keys, a new config drive
    if new_state in lifecycle.CLEAN_STATES:
        fields["tenant"] = None  # only a wipe makes a node clean; the tenant stays until then
    if event is lifecycle.Event.PROVISION_REQUESTED:
        if reservation is None:
            raise ValueError(f"{event.value} for node {node.name} needs the reservation it serves")
        fields.update(tenant_id=reservation.tenant_id, reservation=reservation)
    if new_state is lifecycle.State.QUARANTINED:
        fields["quarantine_reason"] = f"{event.value}: {reason}" if reason else event.value
    elif node.state == NodeState.QUARANTINED:
        fields["quarantine_reason"] = ""
    return fields


def transition(
    *,
    node_id: int,
    event: lifecycle.Event | str,
    actor: str,
    reason: str = "",
    reservation=None,
    detail: dict | None = None,
) -> Node:
    """Apply `event` to the node and audit it; returns the updated node.

    Raises lifecycle.IllegalTransition if the state machine refuses the event, and
    ConcurrentTransition if someone else changed the node first. A change of state ends any
    lease on the node: the new state's work is claimed afresh (fleet.signals.node_transitioned
    tells who sends it).
    """
    node = _apply(node_id=node_id, event=event, actor=actor, reason=reason, reservation=reservation, detail=detail)
    assert node is not None, "only a worker's result under a lease that no longer holds is discarded"
    return node


def complete(
    lease: Lease, *, event: lifecycle.Event | str, actor: str, reason: str = "", detail: dict | None = None
) -> Node | None:
    """Apply a worker's result as a lifecycle event under its lease; the updated node, or None if
    the lease no longer holds (a successor took the node, or it moved on), the discard audited.
    Raises lifecycle.IllegalTransition if the event does not fit the node while the lease holds."""
    return _apply(node_id=lease.node_id, event=event, actor=actor, reason=reason, detail=detail, lease=lease)


def _apply(
    *,
    node_id: int,
    event: lifecycle.Event | str,
    actor: str,
    reason: str,
    detail: dict | None,
    reservation=None,
    lease: Lease | None = None,
) -> Node | None:
    """The compare-and-set of both: on the node's state and, under a lease, on its fencing token."""
    event = lifecycle.Event(event)
    applied = False
    with transaction.atomic():
        # The database's clock read with the node: the new state's start, without a round trip of its own.
        node = Node.objects.annotate(read_at=Now()).get(pk=node_id)
        try:
            new_state = lifecycle.next_state(node.state, event)
        except lifecycle.IllegalTransition:
            # A worker whose lease has gone reports on a node that has moved on: a discard, not a bug.
            if lease is None or leases.fenced(Node.objects.filter(pk=node_id), lease).exists():
                raise
            new_state = None
        if new_state is not None:
            target = Node.objects.filter(pk=node_id, state=node.state)
            if lease is not None:
                target = leases.fenced(target, lease)
            fields = _state_fields(node, new_state, event, reason, reservation, now=node.read_at)
            applied = target.update(**fields) == 1
            if applied:
                _follow_through(node, new_state, event, actor=actor, reason=reason, detail=detail)
    if applied:
        # The node as written, without reading it back: the compare-and-set wrote exactly these.
        for name, value in fields.items():
            setattr(node, name, value)
        return node
    if lease is not None:
        leases.record_discarded_result(lease=lease, attempted=event.value, actor=actor)
        return None
    raise ConcurrentTransition(node.name, node.state)


def _follow_through(
    node: Node, new_state: lifecycle.State, event: lifecycle.Event, *, actor: str, reason: str, detail: dict | None
) -> None:
    """What an applied transition brings with it, in its transaction: the tenant network and the
    tenancy's credentials given back (or the credentials alone, for a reinstall: a new instance
    gets new ones with its new drive), the audit row, and node_transitioned."""
    if new_state not in lifecycle.SERVING_STATES:
        _forget_tenant_network(node.pk)
        if node.state in lifecycle.SERVING_STATES:
            forget_tenant_networks(node_id=node.pk)  # held until a sync reads its removal back
        elif new_state in lifecycle.ISOLATED_STATES:
            isolate(node_id=node.pk)
    elif event is lifecycle.Event.REINSTALL_REQUESTED:
        with connection.cursor() as cursor:
            cursor.execute(REVOKE_TENANCY, {"node": node.pk})
    AuditEvent.objects.create(
        node_id=node.pk,
        actor=actor,
        event=event.value,
        from_state=node.state,
        to_state=new_state.value,
        reason=reason,
        detail=detail or {},
    )
    node_transitioned.send(
        sender=Node,
        node_id=node.pk,
        event=event,
        actor=actor,
        from_state=lifecycle.State(node.state),
        to_state=new_state,
        reservation_id=node.reservation_id,
    )


# The tenancy's live credential revoked and every tenancy drive of the node deleted (their URLs
# then 404), in one statement; the boot credential, the service image's, is the boots' to end.
REVOKE_TENANCY = (
    f"WITH revoked AS (UPDATE {NodeCredential._meta.db_table} SET revoked_at = statement_timestamp()"
    f" WHERE node_id = %(node)s AND holder = '{CredentialHolder.TENANCY.value}' AND revoked_at IS NULL)"
    f" DELETE FROM {ConfigDrive._meta.db_table} WHERE node_id = %(node)s AND credential_id IN"
    f" (SELECT id FROM {NodeCredential._meta.db_table}"
    f" WHERE node_id = %(node)s AND holder = '{CredentialHolder.TENANCY.value}')"
)
# With the address, in one statement: QuerySet.delete() would cost round trips and its collector's
# checks, about a quarter of a transition's time, on every transition that leaves a node not serving.
FORGET_TENANT_NETWORK = f"WITH address AS (DELETE FROM {NodeAddress._meta.db_table} WHERE node_id = %(node)s), " + (
    REVOKE_TENANCY.removeprefix("WITH ")
)


def _forget_tenant_network(node_id: int) -> None:
    """A node that stops serving gives back its address, and its tenancy's credentials with their
    config drive (whose URL then 404s). Every transition to a state that does not serve does so,
    not only one from a serving state: a worker whose lease ended with the tenancy may still have
    written the address after it ended, and the next tenant must not be given the last one's."""
    with connection.cursor() as cursor:
        cursor.execute(FORGET_TENANT_NETWORK, {"node": node_id})


def start_inspections(*, actor: str, limit: int) -> int:
    """Send newly enrolled nodes to inspection."""
    started = 0
    for node_id in Node.objects.filter(state=NodeState.ENROLLED).order_by("pk").values_list("pk", flat=True)[:limit]:
        try:
            transition(node_id=node_id, event=lifecycle.Event.INSPECTION_STARTED, actor=actor)
            started += 1
        except lifecycle.TransitionRefused:
            continue
    return started


def audit_only(node: Node, event: AuditOnlyEvent, *, actor: str, reason: str, detail: dict | None = None) -> AuditEvent:
    """An audit row of something done to the node that leaves its state as it was (unsaved)."""
    return AuditEvent(
        node=node,
        actor=actor,
        event=event,
        from_state=node.state,
        to_state=node.state,
        reason=reason,
        detail=detail or {},
    )
