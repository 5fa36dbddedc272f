"""Writes to reservations: create, release, expire, start, heal and settle.

Placement is decided by the pure reservations/placement.py; PostgreSQL's exclusion constraint
on Allocation is the last word on double booking. A placement that loses a race to a
concurrent one is placed again on fresh capacity, a bounded number of times.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F, Func
from django.db.models.functions import Greatest, Now
from django.utils import timezone
from psycopg.types.range import Range

from fleet import lifecycle
from fleet.models import Node, Pod
from fleet.services import ConcurrentTransition, transition
from reservations.models import (
    LIVE_STATES,
    Allocation,
    Reservation,
    ReservationEvent,
    ReservationEventKind,
    ReservationState,
    Tenant,
)
from reservations.placement import PlacementRefused, PlacementRequest, place
from reservations.selectors import Topology, live_allocations, period, rack_capacity, topology

log = logging.getLogger(__name__)

PLACEMENT_ATTEMPTS = 8
OUT_OF_SERVICE = (lifecycle.State.QUARANTINED, lifecycle.State.MAINTENANCE, lifecycle.State.ENROLLED)
EXCLUSION_VIOLATION = "23P01"
RS = ReservationState


class LostPlacementRace(Exception):
    pass


def _record(reservation: Reservation, event: ReservationEventKind, actor: str, detail: str = "") -> None:
    ReservationEvent.objects.create(reservation=reservation, event=event, actor=actor, detail=detail)


def _is_exclusion_violation(error: IntegrityError) -> bool:
    return getattr(error.__cause__, "sqlstate", None) == EXCLUSION_VIOLATION


@dataclass(frozen=True)
class _Placement:
    node_ids: dict[str, int]  # the chosen nodes by name, in placement order
    held_for: Range
    description: str  # where they are, in words


def _choose(*, starts_at: datetime, ends_at: datetime | None, count: int, pod: str | None, rack_scale: bool):
    """Place `count` nodes on the capacity free for the period; PlacementRefused if none fit."""
    # A replacement is held from now on: the node may have served someone else before.
    starts_at = max(starts_at, timezone.now())
    fleet = topology()
    racks = rack_capacity(starts_at=starts_at, ends_at=ends_at, pod=pod, fleet=fleet)
    chosen = place(PlacementRequest(node_count=count, pod=pod, rack_scale=rack_scale), racks)
    return _Placement(
        node_ids={name: fleet.node_ids[name] for name in chosen},
        held_for=period(starts_at, ends_at),
        description=_describe(chosen, fleet),
    )


def _hold(reservation: Reservation, placement: _Placement, *, actor: str) -> None:
    """Hold the placed nodes for the reservation, and provision them if it has started.

    Runs inside _with_retries' transaction, which a LostPlacementRace rolls back: raised when a
    concurrent placement took a chosen node first.
    """
    try:
        Allocation.objects.bulk_create(
            Allocation(reservation=reservation, node_id=node_id, period=placement.held_for)
            for node_id in placement.node_ids.values()
        )
    except IntegrityError as error:
        if _is_exclusion_violation(error):
            raise LostPlacementRace from error
        raise
    if reservation.starts_at <= timezone.now():
        for node_id in placement.node_ids.values():
            try:
                transition(
                    node_id=node_id,
                    event=lifecycle.Event.PROVISION_REQUESTED,
                    actor=actor,
                    reservation=reservation,
                )
            except (ConcurrentTransition, lifecycle.IllegalTransition) as error:
                raise LostPlacementRace from error


def _with_retries(attempt):
    """Run `attempt(lost_races)` in a transaction, again on fresh capacity after each lost race."""
    for lost_races in range(PLACEMENT_ATTEMPTS):
        try:
            with transaction.atomic():
                return attempt(lost_races)
        except LostPlacementRace:
            continue
    raise PlacementRefused(
        f"the free nodes were taken by concurrent reservations {PLACEMENT_ATTEMPTS} times; try again"
    )


def create_reservation(
    *,
    tenant: Tenant,
    node_count: int,
    pod: Pod | None = None,
    rack_scale: bool = False,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    actor: str,
) -> Reservation:
    """Place and hold the nodes, or raise PlacementRefused with the reason; nothing is kept then."""
    now = timezone.now()
    starts_at = max(starts_at or now, now)
    if ends_at is not None and ends_at <= starts_at:
        raise ValueError("ends_at must be after starts_at")

    def attempt(lost_races: int) -> Reservation:
        placement = _choose(
            starts_at=starts_at, ends_at=ends_at, count=node_count, pod=pod.name if pod else None, rack_scale=rack_scale
        )
        reservation = Reservation.objects.create(
            tenant=tenant,
            node_count=node_count,
            pod=pod,
            rack_scale=rack_scale,
            starts_at=starts_at,
            ends_at=ends_at,
            state=RS.PROVISIONING if starts_at <= timezone.now() else RS.PENDING,
            placement=placement.description,
        )
        _hold(reservation, placement, actor=actor)
        retried = f" (placed again after {lost_races} lost race(s))" if lost_races else ""
        _record(reservation, ReservationEventKind.CREATED, actor, reservation.placement + retried)
        return reservation

    return _with_retries(attempt)


def _describe(chosen: list[str], fleet: Topology) -> str:
    """'p1/p1-r01: n1, n2; p1/p1-r02: n9': the chosen nodes by rack, in slot order."""
    wanted = set(chosen)
    racks = (fleet.racks[i] for i in sorted({fleet.rack_of[fleet.node_ids[name]] for name in chosen}))
    return "; ".join(f"{r.pod}/{r.rack}: {', '.join(n for n in r.nodes if n in wanted)}" for r in racks)


def _end_allocations(allocations, reason: str) -> int:
    """Cut live allocations short at now (a future one becomes empty): their nodes are free after."""
    lower = Func(F("period"), function="lower")
    return allocations.update(
        period=Func(lower, Greatest(lower, Now()), function="tstzrange"),
        ended_reason=reason,
    )


def release_reservation(*, reservation_id: int, actor: str, reason: str = "released") -> Reservation:
    """End the reservation now; its nodes go to wiping. Idempotent, and resumable if interrupted."""
    started = Reservation.objects.filter(pk=reservation_id, state__in=LIVE_STATES).update(state=RS.RELEASING, reason="")
    reservation = Reservation.objects.get(pk=reservation_id)
    if started:
        _record(reservation, ReservationEventKind.RELEASING, actor, reason)
    if reservation.state != RS.RELEASING:
        return reservation
    # One transaction per node: a node's release must not wait on, or roll back, another's.
    for node_id in Node.objects.filter(reservation=reservation).order_by("pk").values_list("pk", flat=True):
        try:
            transition(node_id=node_id, event=lifecycle.Event.RELEASED, actor=actor, reason=reason)
        except (ConcurrentTransition, lifecycle.IllegalTransition):
            log.info("node %s left reservation %s on its own while it was released", node_id, reservation_id)
    with transaction.atomic():
        _end_allocations(live_allocations().filter(reservation=reservation), reason)
        # The tenant's release and the reconciler's may finish the same release: one records it.
        if Reservation.objects.filter(pk=reservation_id, state=RS.RELEASING).update(state=RS.RELEASED):
            _record(reservation, ReservationEventKind.RELEASED, actor, reason)
    return Reservation.objects.get(pk=reservation_id)


def let_node_go(*, node_id: int, reservation_id: int, reason: str, actor: str) -> bool:
    """A node can no longer serve a live reservation: end its allocation and degrade the reservation.

    Returns whether the reservation needs a replacement (heal_reservation places it). A
    reservation that has not started yet stays pending; one being released needs nothing.
    """
    _end_allocations(live_allocations().filter(reservation_id=reservation_id, node_id=node_id), reason)
    reservation = Reservation.objects.get(pk=reservation_id)
    if reservation.state not in LIVE_STATES:
        return False
    if reservation.state != RS.PENDING:
        Reservation.objects.filter(pk=reservation_id, state__in=LIVE_STATES).update(
            state=RS.DEGRADED, reason=f"{reason}; placing a replacement"
        )
    _record(reservation, ReservationEventKind.NODE_LOST, actor, reason)
    return True


def heal_reservation(*, reservation_id: int, actor: str = "system:healer") -> Reservation:
    """Place replacements for the nodes a live reservation lost, in its pod; say why if none is free.

    The reservation's row is locked while it is counted and topped up: the healing enqueued on
    commit and the reconciler's may run at the same moment, and only one may place the replacement.
    """
    with transaction.atomic():
        reservation = Reservation.objects.select_for_update().get(pk=reservation_id)
        if reservation.state not in LIVE_STATES:
            return reservation
        held = live_allocations().filter(reservation=reservation)
        missing = reservation.node_count - held.count()
        if missing > 0:
            pod = reservation.pod.name if reservation.pod_id else _pod_of(held)

            def replace(lost_races: int) -> list[str]:
                placement = _choose(
                    starts_at=reservation.starts_at,
                    ends_at=reservation.ends_at,
                    count=missing,
                    pod=pod,
                    rack_scale=False,
                )
                _hold(reservation, placement, actor=actor)
                return list(placement.node_ids)

            try:
                chosen = _with_retries(replace)
            except PlacementRefused as refused:
                Reservation.objects.filter(pk=reservation_id, state__in=LIVE_STATES).update(
                    state=RS.DEGRADED, reason=f"waiting for capacity to replace {missing} node(s): {refused.reason}"
                )
            else:
                _record(reservation, ReservationEventKind.REPLACEMENT_PLACED, actor, ", ".join(chosen))
    return settle_reservation(reservation_id=reservation_id, actor=actor)


def _pod_of(allocations) -> str | None:
    return allocations.values_list("node__rack__pod__name", flat=True).first()


def settle_reservation(*, reservation_id: int, actor: str = "system:reconciler") -> Reservation:
    """Active once every node it holds serves it and is up, and none is missing."""
    reservation = Reservation.objects.get(pk=reservation_id)
    if reservation.state in (RS.PROVISIONING, RS.DEGRADED):
        up = Node.objects.filter(reservation=reservation, state=lifecycle.State.ACTIVE).count()
        held = live_allocations().filter(reservation=reservation).count()
        if up == held == reservation.node_count:
            if Reservation.objects.filter(pk=reservation_id, state=reservation.state).update(
                state=RS.ACTIVE, reason=""
            ):
                _record(reservation, ReservationEventKind.ACTIVE, actor)
            reservation.refresh_from_db()
    return reservation


def start_due_reservations(*, actor: str = "system:reconciler", limit: int = 100) -> int:
    """Provision the held nodes of pending reservations whose period has begun."""
    started = 0
    due = Reservation.objects.filter(state=RS.PENDING, starts_at__lte=Now()).order_by("starts_at")[:limit]
    for reservation in due:
        Reservation.objects.filter(pk=reservation.pk, state=RS.PENDING).update(state=RS.PROVISIONING)
        _record(reservation, ReservationEventKind.STARTED, actor)
        started += 1
    return started + provision_held_nodes(actor=actor, limit=limit)


def provision_held_nodes(*, actor: str = "system:reconciler", limit: int = 100) -> int:
    """Send each held node of a started reservation to provisioning as soon as it is available.

    A held node that fell out of service before its reservation started is let go and replaced.
    """
    count = 0
    held = (
        live_allocations()
        .filter(reservation__state__in=[RS.PROVISIONING, RS.DEGRADED], period__startswith__lte=Now())
        .exclude(node__reservation_id=F("reservation_id"))
        .select_related("node", "reservation")[:limit]
    )
    for allocation in held:
        node = allocation.node
        if node.state in OUT_OF_SERVICE:
            with transaction.atomic():
                let_node_go(
                    node_id=node.pk,
                    reservation_id=allocation.reservation_id,
                    reason=f"{node.name} is {node.state} {node.quarantine_reason}".strip(),
                    actor=actor,
                )
        elif node.state == lifecycle.State.AVAILABLE:
            try:
                transition(
                    node_id=node.pk,
                    event=lifecycle.Event.PROVISION_REQUESTED,
                    actor=actor,
                    reservation=allocation.reservation,
                )
                count += 1
            except (ConcurrentTransition, lifecycle.IllegalTransition):
                continue
        # Otherwise the node is still finishing with its previous tenant: wait for it.
    return count


def reconcile_reservations(*, limit: int = 100) -> dict[str, int]:
    """One pass of the reconciler over every reservation that owes work; each step is idempotent."""
    done = {
        "expired": expire_reservations(limit=limit),
        "started": start_due_reservations(limit=limit),
        "released": 0,
        "healed": 0,
    }
    for reservation_id in _ids(Reservation.objects.filter(state=RS.RELEASING), limit):
        release_reservation(reservation_id=reservation_id, actor="system:reconciler")
        done["released"] += 1
    for reservation_id in _ids(Reservation.objects.filter(state__in=[RS.DEGRADED, RS.PROVISIONING, RS.PENDING]), limit):
        before = Reservation.objects.values_list("state", flat=True).get(pk=reservation_id)
        after = heal_reservation(reservation_id=reservation_id, actor="system:reconciler").state
        done["healed"] += before == RS.DEGRADED and after == RS.ACTIVE
    return done


def _ids(queryset, limit: int) -> list[int]:
    return list(queryset.order_by("pk").values_list("pk", flat=True)[:limit])


def expire_reservations(*, actor: str = "system:expiry", limit: int = 100) -> int:
    """Release live reservations whose period has ended."""
    ended = _ids(Reservation.objects.filter(state__in=LIVE_STATES, ends_at__lte=Now()), limit)
    for reservation_id in ended:
        release_reservation(reservation_id=reservation_id, actor=actor, reason="period ended")
    return len(ended)
