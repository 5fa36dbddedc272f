"""Changing a reservation: a new end, more nodes, or some given back."""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

from django.db import IntegrityError, OperationalError, transaction
from django.db.models import F, Func, Value

from core import clock
from core.errors import Conflict, FieldRefused
from core.topology import NVLINK_DOMAIN
from fleet import lifecycle
from fleet.services import transition
from reservations.models import (
    LIVE_STATES,
    Allocation,
    Quota,
    Reservation,
    ReservationEventKind,
    ReservationState,
    Tenant,
)
from reservations.periods import changed_end
from reservations.placement import PlacementRefused, give_back
from reservations.selectors import booking_limits, live_allocations, topology
from reservations.services.healing import settle_reservation
from reservations.services.placing import (
    Placement,
    check_quota,
    choose,
    end_allocations,
    hold,
    is_deadlock,
    is_exclusion_violation,
    pod_of,
    record_event,
    request_of,
    with_retries,
)

log = logging.getLogger(__name__)


class EndRefused(Conflict):
    """The new end overlaps another reservation of one of the nodes, or the reservation is over."""


class ChangeRefused(FieldRefused):
    """A change that cannot be asked for: `field` names the request field to correct."""


def change_reservation(
    *,
    reservation_id: int,
    tenant: Tenant,
    actor: str,
    ends_at: datetime | None = None,
    node_count: int | None = None,
    release_nodes: list[str] | None = None,
    now: datetime | None = None,
) -> Reservation:
    """Extend or shorten a live reservation, grow it or give nodes back, all or nothing.

    A new end moves every node's hold, checked by the same exclusion constraint as any booking:
    an extension into another booking of one of its nodes is refused with the latest end it can
    have (PeriodRefused for an end the limits refuse). Growing places the new nodes in the same
    pod, next to the ones held (whole racks, for rack_scale), under the tenant's quota. Giving
    back releases the named nodes, or those placement chooses to leave whole racks free.
    Both the new end and the new nodes' holds are judged at `now` (None: core.clock's, read once).
    """
    with transaction.atomic():
        reservation = Reservation.objects.select_for_update().get(pk=reservation_id, tenant=tenant)
        if reservation.state not in LIVE_STATES:
            raise EndRefused(f"reservation {reservation.pk} is {reservation.state}: it cannot change")
        now = now or clock.now()
        changes = []
        if ends_at is not None:
            changes.append(_move_end(reservation, tenant, ends_at, now))
        wanted = node_count if node_count is not None else reservation.node_count - len(release_nodes or [])
        if release_nodes and wanted != reservation.node_count - len(set(release_nodes)):
            raise ChangeRefused("node_count", "must be the node count less the nodes released, or left out")
        if wanted > reservation.node_count:
            changes.append(_grow(reservation, tenant, wanted - reservation.node_count, actor, now))
        elif wanted < reservation.node_count:
            changes.append(_give_back(reservation, reservation.node_count - wanted, release_nodes, actor))
        if changes:
            record_event(reservation, ReservationEventKind.CHANGED, actor, "; ".join(changes))
    return settle_reservation(reservation_id=reservation_id, actor=actor)


def _move_end(reservation: Reservation, tenant: Tenant, ends_at: datetime, now: datetime) -> str:
    quota = Quota.objects.select_for_update().filter(tenant=tenant).first()
    end = changed_end(starts_at=reservation.starts_at, wanted=ends_at, now=now, limits=booking_limits(quota))
    held = live_allocations().filter(reservation=reservation)
    # An open-ended reservation (from before every booking had an end) is given one: never longer.
    if quota is not None and reservation.ends_at is not None and end > reservation.ends_at:  # held for longer
        check_quota(quota, tenant, held.count(), pod_of(held), reservation.ends_at, end)
    try:
        with transaction.atomic():
            held.update(period=Func(Func(F("period"), function="lower"), Value(end), function="tstzrange"))
    except IntegrityError as error:
        if not is_exclusion_violation(error):
            raise
        raise EndRefused(_latest_end(reservation, held)) from error
    except OperationalError as error:
        if not is_deadlock(error):
            raise
        raise EndRefused("a booking of one of its nodes was made at the same moment; try again") from error
    Reservation.objects.filter(pk=reservation.pk).update(ends_at=end)
    change = f"ends_at {reservation.ends_at.isoformat() if reservation.ends_at else 'open'} -> {end.isoformat()}"
    reservation.ends_at = end
    return change


def _grow(reservation: Reservation, tenant: Tenant, more: int, actor: str, now: datetime) -> str:
    """Hold `more` nodes for the rest of the reservation, in its pod, next to the ones it holds."""
    held = live_allocations().filter(reservation=reservation)
    wanted = request_of(reservation, more, near=frozenset(held.values_list("node__rack__name", flat=True)))

    def attempt(lost_races: int) -> Placement:
        quota = Quota.objects.select_for_update().filter(tenant=tenant).first()
        placement = choose(wanted, starts_at=reservation.starts_at, ends_at=reservation.ends_at, now=now)
        if quota is not None:
            check_quota(quota, tenant, more, placement.pod, max(reservation.starts_at, now), reservation.ends_at)
        hold(reservation, placement, actor=actor)
        return placement

    placement = with_retries(attempt)
    growing = Reservation.objects.filter(pk=reservation.pk)
    growing.update(node_count=F("node_count") + more, placement=f"{reservation.placement}; {placement.description}")
    # Up again once the new nodes are: the tenant hears reservation.active then.
    growing.filter(state=ReservationState.ACTIVE).update(state=ReservationState.PROVISIONING)
    return f"node_count {reservation.node_count} -> {reservation.node_count + more}: {placement.description}"


def _give_back(reservation: Reservation, fewer: int, names: list[str] | None, actor: str) -> str:
    """Release `fewer` of the reservation's nodes now: the ones named, or those that free whole racks."""
    held = live_allocations().filter(reservation=reservation).select_related("node__rack")
    by_name = {allocation.node.name: allocation for allocation in held}
    if fewer >= len(by_name) or fewer >= reservation.node_count:
        raise ChangeRefused("node_count", "must leave at least one node: to give back every node, release it")
    if reservation.whole_level not in ("", NVLINK_DOMAIN):
        raise ChangeRefused(
            "node_count", f"a reservation of whole {reservation.whole_level} domains keeps them whole: release it"
        )
    if names:
        unknown = sorted(set(names) - set(by_name))
        if unknown:
            raise ChangeRefused("release_nodes", f"not held by this reservation: {', '.join(unknown)}")
        if reservation.rack_scale:
            _check_whole_racks(names, by_name)
        chosen = sorted(set(names))
    else:
        by_rack = defaultdict(list)
        for allocation in sorted(held, key=lambda a: (a.node.rack.name, a.node.position)):
            by_rack[allocation.node.rack.name].append(allocation.node.name)
        try:
            paths = {rack.rack: rack.path for rack in topology().racks if rack.rack in by_rack}
            chosen = give_back(by_rack, fewer, rack_scale=reservation.rack_scale, paths=paths)
        except PlacementRefused as refused:
            raise ChangeRefused("node_count", refused.reason) from refused
    reason = "given back by the tenant"
    end_allocations(held.filter(node__name__in=chosen), reason)
    for name in chosen:
        node = by_name[name].node
        if node.reservation_id == reservation.pk:
            try:
                transition(node_id=node.pk, event=lifecycle.Event.RELEASED, actor=actor, reason=reason)
            except lifecycle.TransitionRefused:
                log.info("node %s left reservation %s on its own while it was given back", name, reservation.pk)
    Reservation.objects.filter(pk=reservation.pk).update(node_count=F("node_count") - fewer)
    return f"node_count {reservation.node_count} -> {reservation.node_count - fewer}: gave back {', '.join(chosen)}"


def _check_whole_racks(names: list[str], held: dict[str, Allocation]) -> None:
    """A rack-scale reservation gives back every node it holds in a rack, or none of them."""
    named = set(names)
    for rack in {held[name].node.rack for name in named}:
        mine = {name for name, allocation in held.items() if allocation.node.rack_id == rack.pk}
        if not mine <= named:
            raise ChangeRefused(
                "release_nodes",
                f"a rack-scale reservation gives back whole racks: add {', '.join(sorted(mine - named))}",
            )


def _latest_end(reservation: Reservation, held) -> str:
    """Why an extension collides, and the latest end it can have: the next booking of its nodes."""
    following = (
        Allocation.objects.filter(
            node_id__in=list(held.values_list("node_id", flat=True)), period__startswith__gte=reservation.ends_at
        )
        .exclude(reservation=reservation)
        .select_related("node")
        .order_by("period__startswith")
        .first()
    )
    if following is None:  # booked in the moment between: say so without a date
        return "another booking of one of its nodes now overlaps that period; try again"
    until = following.period.lower.isoformat()
    return f"{following.node.name} is booked from {until}: this reservation can be extended until {until}"
