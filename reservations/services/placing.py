"""What every write that places or holds nodes shares: choosing nodes for a request (the pure
reservations/placement.py decides), holding them in a transaction placed again on fresh capacity
after a lost race (PostgreSQL's exclusion constraint on Allocation is the last word on double
booking), the quota, and the reservation's history.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import tenacity
from django.db import IntegrityError, OperationalError, transaction
from django.db.models import F, Func
from django.db.models.functions import Greatest, Now
from psycopg.types.range import Range

from core import clock
from core.errors import Forbidden
from fleet import lifecycle
from fleet.services import transition
from reservations import usage
from reservations.models import Allocation, Quota, Reservation, ReservationEvent, ReservationEventKind, Tenant
from reservations.placement import PlacementRefused, PlacementRequest, place_in
from reservations.selectors import (
    Topology,
    free_capacity,
    live_allocations,
    node_hours_booked,
    nodes_held,
    period,
    topology,
)

PLACEMENT_ATTEMPTS = 8


EXCLUSION_VIOLATION = "23P01"


DEADLOCK_DETECTED = "40P01"


class LostPlacementRace(Exception):
    pass


def record_event(reservation: Reservation, event: ReservationEventKind, actor: str, detail: str = "") -> None:
    ReservationEvent.objects.create(reservation=reservation, event=event, actor=actor, detail=detail)


def is_exclusion_violation(error: IntegrityError) -> bool:
    return getattr(error.__cause__, "sqlstate", None) == EXCLUSION_VIOLATION


def is_deadlock(error: OperationalError) -> bool:
    # Two transactions writing holds that overlap each wait for the other's exclusion check:
    # PostgreSQL aborts one, which lost the race as surely as by a violation.
    return getattr(error.__cause__, "sqlstate", None) == DEADLOCK_DETECTED


@dataclass(frozen=True)
class Placement:
    node_ids: dict[str, int]  # the chosen nodes by name, in placement order
    held_for: Range
    description: str  # where they are, in words
    pod: str  # placement never spans pods
    domain: str  # the domain of the request's required level that holds them
    placed_at: datetime  # the `now` it was placed at: hold's "has it started" compares with it


def choose(
    request: PlacementRequest, *, starts_at: datetime, ends_at: datetime | None, now: datetime | None = None
) -> Placement:
    """Place the request on the capacity free for the period as it is at `now` (None: core.clock's);
    PlacementRefused if it does not fit."""
    now = now or clock.now()
    # A replacement is held from now on: the node may have served someone else before.
    starts_at = max(starts_at, now)
    fleet = topology()
    with free_capacity(starts_at=starts_at, ends_at=ends_at, fleet=fleet, now=now) as capacity:
        chosen = place_in(request, capacity)
    rack = fleet.racks[fleet.rack_of[fleet.node_ids[chosen[0]]]]
    return Placement(
        node_ids={name: fleet.node_ids[name] for name in chosen},
        held_for=period(starts_at, ends_at),
        description=describe(chosen, fleet),
        pod=rack.pod,
        domain=rack.domain_at(request.required) or "",
        placed_at=now,
    )


def request_of(reservation: Reservation, count: int, **changes) -> PlacementRequest:
    """What placement is asked for more of a reservation's nodes: what it was asked for, inside
    the domain it was placed in (its pod, for a reservation placed before domains were kept)."""
    held = live_allocations().filter(reservation=reservation)
    asked = PlacementRequest(
        node_count=count,
        pod=reservation.pod.name if reservation.pod is not None else (None if reservation.placed_in else pod_of(held)),
        rack_scale=reservation.rack_scale,
        gpu_model=reservation.gpu_model or None,
        required=reservation.required_level,
        preferred=reservation.preferred_level or None,
        whole=reservation.whole_level or None,
        attributes=reservation.attributes,
        within=reservation.placed_in or None,
    )
    return replace(asked, **changes)


def pod_of(allocations) -> str | None:
    return allocations.values_list("node__rack__pod__name", flat=True).first()


def hold(reservation: Reservation, placement: Placement, *, actor: str) -> None:
    """Hold the placed nodes for the reservation, and provision them if it has started by the
    `now` it was placed at.

    Runs inside with_retries' transaction, which a LostPlacementRace rolls back: raised when a
    concurrent placement took a chosen node first.
    """
    try:
        Allocation.objects.bulk_create(
            Allocation(reservation=reservation, node_id=node_id, period=placement.held_for)
            for node_id in placement.node_ids.values()
        )
    except IntegrityError as error:
        if is_exclusion_violation(error):
            raise LostPlacementRace from error
        raise
    except OperationalError as error:
        if is_deadlock(error):
            raise LostPlacementRace from error
        raise
    if reservation.starts_at <= placement.placed_at:
        for node_id in placement.node_ids.values():
            try:
                transition(
                    node_id=node_id,
                    event=lifecycle.Event.PROVISION_REQUESTED,
                    actor=actor,
                    reservation=reservation,
                )
            except lifecycle.TransitionRefused as error:
                raise LostPlacementRace from error


def with_retries(attempt):
    """Run `attempt(lost_races)` in a transaction, again at once on fresh capacity after each lost
    race, PLACEMENT_ATTEMPTS times in all."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(LostPlacementRace),
        stop=tenacity.stop_after_attempt(PLACEMENT_ATTEMPTS),
        retry_error_callback=_placement_races_lost,
    )
    for attempt_state in retrying:
        with attempt_state, transaction.atomic():
            return attempt(attempt_state.retry_state.attempt_number - 1)


def _placement_races_lost(_state: tenacity.RetryCallState):
    raise PlacementRefused(
        f"the free nodes were taken by concurrent reservations {PLACEMENT_ATTEMPTS} times; try again"
    )


class QuotaExceeded(Forbidden):
    """The request would take the tenant past a limit of its quota; says which, and the use."""


def check_quota(
    quota: Quota, tenant: Tenant, wanted: int, pod: str | None, starts_at: datetime, ends_at: datetime | None
) -> None:
    """Refuse what would take the tenant past its quota. `ends_at` None: an open-ended reservation
    from before every booking had an end, which only the limits at once can count."""
    held = nodes_held(tenant, starts_at, ends_at)
    if quota.nodes is not None and sum(held.values()) + wanted > quota.nodes:
        raise QuotaExceeded(
            f"your quota is {quota.nodes} nodes at once; you hold {sum(held.values())} over that period "
            f"and asked for {wanted} more"
        )
    if quota.nodes_per_pod is not None and held[pod] + wanted > quota.nodes_per_pod:
        raise QuotaExceeded(
            f"your quota is {quota.nodes_per_pod} nodes at once in a pod; you hold {held[pod]} in {pod} over that "
            f"period and asked for {wanted} more"
        )
    if quota.node_hours_per_month is not None:
        if ends_at is None:
            raise QuotaExceeded(
                f"your quota is {quota.node_hours_per_month} node-hours a month, and an open-ended reservation "
                "cannot be counted against it: give it an end first"
            )
        for month in usage.months(usage.Span(starts_at, ends_at)):
            booked = node_hours_booked(tenant, usage.calendar_month(month.start))
            asked = wanted * (month.end - month.start) / timedelta(hours=1)
            if booked + asked > quota.node_hours_per_month:
                raise QuotaExceeded(
                    f"your quota is {quota.node_hours_per_month} node-hours a month; you have {booked:.1f} booked "
                    f"in {month.start:%Y-%m} and asked for {asked:.1f} more there"
                )


def describe(chosen: list[str], fleet: Topology) -> str:
    """'p1/p1-r01: n1, n2; p1/p1-r02: n9': the chosen nodes by rack, in slot order."""
    wanted = set(chosen)
    racks = (fleet.racks[i] for i in sorted({fleet.rack_of[fleet.node_ids[name]] for name in chosen}))
    return "; ".join(f"{r.pod}/{r.rack}: {', '.join(n for n in r.nodes if n in wanted)}" for r in racks)


def end_allocations(allocations, reason: str) -> int:
    """Cut live allocations short at now (a future one becomes empty): their nodes are free after."""
    lower = Func(F("period"), function="lower")
    return allocations.update(
        period=Func(lower, Greatest(lower, Now()), function="tstzrange"),
        ended_reason=reason,
    )
