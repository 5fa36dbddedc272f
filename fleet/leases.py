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
wait where it stands: a parked node is given back, not taken over. A step that cannot go on yet
(a transient fault, something not configured) parks it too, for a quarter of the time the step
has taken so far (`park_backing_off`).

A worker claims a node, and records each step, in one statement each: on every step of every
node, a transaction's extra round trips cost more than the statements themselves.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import DurationField, ExpressionWrapper, F, Value
from django.db.models.functions import Coalesce, Least, Now

from core import acting
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
    with connection.cursor() as cursor:
        cursor.execute(
            CLAIM,
            {
                "owner": owner,
                "seconds": _duration(seconds).total_seconds(),
                "states": sorted(lifecycle.State(s).value for s in states),
                "node_ids": None if node_ids is None else list(node_ids),
                "limit": limit,
            },
        )
        claimed = sorted(cursor.fetchall())
    return [
        Lease(node_id=pk, owner=owner, token=token, took_over=previous not in ("", WAITING_ON_HARDWARE))
        for pk, token, previous in claimed
    ]


_NODE = Node._meta.db_table
# A claim in one statement, not a transaction of three: the free rows locked (skipping those
# another claim holds), leased, and returned with their new token and whoever held them before.
CLAIM = f"""
WITH free AS (
    SELECT id, lease_owner FROM {_NODE}
    WHERE (lease_owner = '' OR lease_expires_at <= statement_timestamp()) AND state = ANY(%(states)s)
      AND (%(node_ids)s::bigint[] IS NULL OR id = ANY(%(node_ids)s::bigint[]))
    ORDER BY state_since, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
)
UPDATE {_NODE} AS node
SET lease_owner = %(owner)s, lease_expires_at = statement_timestamp() + make_interval(secs => %(seconds)s),
    fencing_token = node.fencing_token + 1
FROM free WHERE node.id = free.id
RETURNING node.id, node.fencing_token, free.lease_owner
"""


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


def park_backing_off(lease: Lease, *, most: float) -> bool:
    """Park the node for a quarter of the time its step has taken so far, at most `most` seconds:
    a pause at a step just begun is over at once, one that lasts is looked at less and less often.
    False if the lease had already gone."""
    quarter = ExpressionWrapper((Now() - F("step_since")) / 4, output_field=DurationField())
    hold = Least(Coalesce(quarter, timedelta(0)), Value(timedelta(seconds=most)))
    parked = fenced(Node.objects.filter(pk=lease.node_id), lease).update(
        lease_owner=WAITING_ON_HARDWARE, lease_expires_at=Now() + hold
    )
    return bool(parked)


def reclaim(lease: Lease) -> Lease | None:
    """Claim again, under a new token, the node whose work `lease` has just completed, if the
    outcome owes more work: the worker goes straight on with what it knows of the hardware.
    Call it in the transaction that completed the work, so that no other worker is sent the node
    meanwhile (and none can claim it: that transaction holds the node's row); None if the node
    owes no work."""
    with connection.cursor() as cursor:
        cursor.execute(
            RECLAIM,
            {
                "node": lease.node_id,
                "owner": lease.owner,
                "seconds": _duration(None).total_seconds(),
                "states": sorted(s.value for s in lifecycle.WORK_STATES),
            },
        )
        taken = cursor.fetchone()
    return None if taken is None else Lease(node_id=lease.node_id, owner=lease.owner, token=taken[0])


RECLAIM = f"""
UPDATE {_NODE} SET lease_owner = %(owner)s, fencing_token = fencing_token + 1,
    lease_expires_at = statement_timestamp() + make_interval(secs => %(seconds)s)
WHERE id = %(node)s AND lease_owner = '' AND state = ANY(%(states)s)
RETURNING fencing_token
"""


def set_step(lease: Lease, *, step: str, actor: str, detail: dict | None = None) -> bool:
    """Record the workflow step the worker is on (audited, with `detail`, when it changes; a
    step resumed keeps its `step_since`); False, and an audited discard, if the lease is gone."""
    with connection.cursor() as cursor:
        cursor.execute(
            SET_STEP,
            {
                "node": lease.node_id,
                "token": lease.token,
                "owner": lease.owner,
                "step": step,
                "actor": actor,
                "user": acting.user(),
                "key": acting.key(),
                "event": AuditOnlyEvent.STEP_CHANGED.value,
                "detail": json.dumps({"token": lease.token, **(detail or {})}),
            },
        )
        (holds,) = cursor.fetchone()
    if not holds:
        record_discarded_result(lease=lease, attempted=f"step {step}", actor=actor)
    return bool(holds)


def _held(table: str) -> str:
    """What `fenced` says, in SQL, of the row of `table`: the lease still holds."""
    return (
        f"{table}.fencing_token = %(token)s AND {table}.lease_owner = %(owner)s"
        f" AND {table}.lease_expires_at > statement_timestamp()"
    )


# A step change in one statement, not a transaction of three: the node moved to the step under the
# lease and its audit row written, the step it left read from the row as it was; or, for the step
# it is on already (resumed), whether the lease holds.
SET_STEP = f"""
WITH moved AS (
    UPDATE {_NODE} AS node SET step = %(step)s, step_since = statement_timestamp()
    FROM {_NODE} AS was
    WHERE node.id = %(node)s AND was.id = node.id AND node.step <> %(step)s
      AND {_held("node")}
    RETURNING node.id, node.state, was.step
), audited AS (
    INSERT INTO {AuditEvent._meta.db_table} (node_id, actor, "user", "key", event, from_state, to_state, reason, detail)
    SELECT id, %(actor)s, %(user)s, %(key)s, %(event)s, state, state, %(step)s,
        jsonb_build_object('from_step', step) || %(detail)s::jsonb
    FROM moved
)
SELECT EXISTS (SELECT FROM moved)
    OR EXISTS (SELECT FROM {_NODE} AS node WHERE node.id = %(node)s AND node.step = %(step)s AND {_held("node")})
"""


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
