"""Writes to reservations: create, release, expire, start, heal and settle.

Placement is decided by the pure reservations/placement.py, the period by the pure
reservations/periods.py; PostgreSQL's exclusion constraint on Allocation is the last word on
double booking. A placement that loses a race to a concurrent one is placed again on fresh
capacity, a bounded number of times.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import tenacity
from django.conf import settings
from django.db import IntegrityError, OperationalError, transaction
from django.db.models import Count, F, Func, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce, Greatest, Now
from django.utils import timezone
from psycopg.types.range import Range

from core.errors import Conflict, DomainError, TooMany
from core.topology import NVLINK_DOMAIN, POD
from fleet import lifecycle
from fleet.models import AuditEvent, Image, Node, Pod
from fleet.services import transition
from reservations import ssh_keys as keys
from reservations import usage, webhooks
from reservations.models import (
    IDEMPOTENCY_KEY_LIFETIME,
    LIVE_STATES,
    Allocation,
    IdempotencyKey,
    Quota,
    Reservation,
    ReservationEvent,
    ReservationEventKind,
    ReservationState,
    SSHKey,
    Tenant,
    WebhookEvent,
)
from reservations.offers import Offer, earliest_offer
from reservations.periods import BookingLimits, booking_period, changed_end
from reservations.placement import PlacementRefused, PlacementRequest, give_back, place_in
from reservations.selectors import (
    INSTANT,
    Topology,
    booking_limits,
    capacity_over_time,
    free_capacity,
    live_allocations,
    node_hours_booked,
    nodes_cut_off,
    nodes_held,
    period,
    rack_capacity,
    topology,
)
from reservations.signals import reservation_lost_node

log = logging.getLogger(__name__)

PLACEMENT_ATTEMPTS = 8
OUT_OF_SERVICE = (lifecycle.State.QUARANTINED, lifecycle.State.MAINTENANCE, lifecycle.State.ENROLLED)
EXCLUSION_VIOLATION = "23P01"
DEADLOCK_DETECTED = "40P01"
# Rows a reconciler pass reads per query: it goes through every row that needs work, a batch at a time.
RECONCILE_BATCH = 100
WAITING_FOR_CAPACITY = "waiting for capacity"  # how a degraded reservation's reason says no node was free
QUEUED = "queued"  # how a reservation booked at an offer ("wait": true) says so


class LostPlacementRace(Exception):
    pass


def _record(reservation: Reservation, event: ReservationEventKind, actor: str, detail: str = "") -> None:
    ReservationEvent.objects.create(reservation=reservation, event=event, actor=actor, detail=detail)


def _is_exclusion_violation(error: IntegrityError) -> bool:
    return getattr(error.__cause__, "sqlstate", None) == EXCLUSION_VIOLATION


def _is_deadlock(error: OperationalError) -> bool:
    # Two transactions writing holds that overlap each wait for the other's exclusion check:
    # PostgreSQL aborts one, which lost the race as surely as by a violation.
    return getattr(error.__cause__, "sqlstate", None) == DEADLOCK_DETECTED


@dataclass(frozen=True)
class _Placement:
    node_ids: dict[str, int]  # the chosen nodes by name, in placement order
    held_for: Range
    description: str  # where they are, in words
    pod: str  # placement never spans pods
    domain: str  # the domain of the request's required level that holds them


def _choose(request: PlacementRequest, *, starts_at: datetime, ends_at: datetime | None) -> _Placement:
    """Place the request on the capacity free for the period; PlacementRefused if it does not fit."""
    # A replacement is held from now on: the node may have served someone else before.
    starts_at = max(starts_at, timezone.now())
    fleet = topology()
    with free_capacity(starts_at=starts_at, ends_at=ends_at, fleet=fleet) as capacity:
        chosen = place_in(request, capacity)
    rack = fleet.racks[fleet.rack_of[fleet.node_ids[chosen[0]]]]
    return _Placement(
        node_ids={name: fleet.node_ids[name] for name in chosen},
        held_for=period(starts_at, ends_at),
        description=_describe(chosen, fleet),
        pod=rack.pod,
        domain=rack.domain_at(request.required) or "",
    )


def _request_of(reservation: Reservation, count: int, **changes) -> PlacementRequest:
    """What placement is asked for more of a reservation's nodes: what it was asked for, inside
    the domain it was placed in (its pod, for a reservation placed before domains were kept)."""
    held = live_allocations().filter(reservation=reservation)
    asked = PlacementRequest(
        node_count=count,
        pod=reservation.pod.name if reservation.pod_id else (None if reservation.placed_in else _pod_of(held)),
        rack_scale=reservation.rack_scale,
        gpu_model=reservation.gpu_model or None,
        required=reservation.required_level,
        preferred=reservation.preferred_level or None,
        whole=reservation.whole_level or None,
        attributes=reservation.attributes,
        within=reservation.placed_in or None,
    )
    return replace(asked, **changes)


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
    except OperationalError as error:
        if _is_deadlock(error):
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
            except lifecycle.TransitionRefused as error:
                raise LostPlacementRace from error


def _with_retries(attempt):
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


def create_reservation(
    *,
    tenant: Tenant,
    node_count: int,
    pod: Pod | None = None,
    rack_scale: bool = False,
    required: str = POD,
    preferred: str | None = None,
    whole: str | None = None,
    gpu_model: str | None = None,
    attributes: dict[str, str] | None = None,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    image: Image | None = None,
    ssh_keys: Iterable[SSHKey] = (),
    user_data: str = "",
    wait: bool = False,
    actor: str,
) -> Reservation:
    """Place and hold the nodes, or raise PlacementRefused with the reason and the earliest period
    in which the request fits (its `offer`, None if none within the booking horizon); nothing is
    kept then. With `wait`, a request that does not fit now is booked at that offer instead.

    The period follows reservations/periods.py (PeriodRefused names the field): no `ends_at`
    means the tenant's maximum duration, and is allowed only for a reservation starting now.
    The nodes boot `image`, or the catalogue's default, with the tenant's `ssh_keys` and
    `user_data` (the caller checked that the keys are the tenant's).
    """
    quota = Quota.objects.filter(tenant=tenant).first()
    limits = booking_limits(quota)
    starts_at, ends_at = booking_period(starts_at=starts_at, ends_at=ends_at, now=timezone.now(), limits=limits)
    booking = _Booking(
        tenant=tenant,
        quota=quota,
        request=PlacementRequest(
            node_count=node_count,
            rack_scale=rack_scale,
            required=required,
            preferred=preferred,
            whole=whole,
            gpu_model=gpu_model,
            attributes=attributes or {},
        ),
        image=image or Image.objects.filter(default=True).first(),
        ssh_keys=list(ssh_keys),
        user_data=user_data,
        actor=actor,
    )
    try:
        return booking.place(starts_at=starts_at, ends_at=ends_at, pod=pod)
    except PlacementRefused as refused:
        refused.offer = offer = _earliest_offer(booking, starts_at, ends_at, pod.name if pod else None, limits)
        if not wait or offer is None:
            raise
    return _book_at_offer(booking, offer, asked=(starts_at, ends_at, pod), limits=limits)


def _book_at_offer(
    booking: _Booking, offer: Offer, *, asked: tuple[datetime, datetime, Pod | None], limits: BookingLimits
) -> Reservation:
    """Book a request that waits for capacity at its offer. The offer's capacity may be taken
    before it is: look again for the request as `asked`, a bounded number of times."""
    starts_at, ends_at, pod = asked
    for _ in range(PLACEMENT_ATTEMPTS):
        try:
            at = Pod.objects.get(name=offer.pod)
            return booking.place(starts_at=offer.starts_at, ends_at=offer.ends_at, pod=at, queued=True)
        except PlacementRefused as refused:
            refused.offer = offer = _earliest_offer(booking, starts_at, ends_at, pod.name if pod else None, limits)
            if offer is None:
                raise
    raise PlacementRefused(f"the offered capacity was taken by concurrent reservations {PLACEMENT_ATTEMPTS} times")


@dataclass(frozen=True)
class _Booking:
    """What a tenant asked for, apart from where and when: placed now, or at an offer."""

    tenant: Tenant
    quota: Quota | None  # as read before: a quota given the tenant since applies from its next request
    request: PlacementRequest  # of no pod: the pod is given where it is placed
    image: Image | None
    ssh_keys: list[SSHKey]
    user_data: str
    actor: str

    def place(self, *, starts_at: datetime, ends_at: datetime, pod: Pod | None, queued: bool = False) -> Reservation:
        def attempt(lost_races: int) -> Reservation:
            # A tenant with a quota places one request at a time, under its quota's row: concurrent
            # ones cannot each fit alone. Tenants without one are not held up, nor asked again.
            quota = self.quota and Quota.objects.select_for_update().filter(pk=self.quota.pk).first()
            wanted = replace(self.request, pod=pod.name if pod else None)
            placement = _choose(wanted, starts_at=starts_at, ends_at=ends_at)
            if quota is not None:
                _check_quota(quota, self.tenant, len(placement.node_ids), placement.pod, starts_at, ends_at)
            reservation = Reservation.objects.create(
                tenant=self.tenant,
                node_count=wanted.node_count,
                pod=pod,
                rack_scale=wanted.whole_level == NVLINK_DOMAIN,
                required_level=wanted.required,
                preferred_level=wanted.preferred or "",
                whole_level=wanted.whole_level or "",
                gpu_model=wanted.gpu_model or "",
                attributes=dict(wanted.attributes),
                placed_in=placement.domain,
                starts_at=starts_at,
                ends_at=ends_at,
                state=ReservationState.PROVISIONING if starts_at <= timezone.now() else ReservationState.PENDING,
                reason=f"{QUEUED} for the earliest period in which it fits" if queued else "",
                placement=placement.description,
                image=self.image,
                user_data=self.user_data,
            )
            if self.ssh_keys:  # set([]) would read the keys it has, of which a new reservation has none
                reservation.ssh_keys.set(self.ssh_keys)
            _hold(reservation, placement, actor=self.actor)
            reservation.placed_nodes = sorted(placement.node_ids)
            reservation.placed_ssh_keys = [key.pk for key in sorted(self.ssh_keys, key=lambda key: key.name)]
            retried = f" (placed again after {lost_races} lost race(s))" if lost_races else ""
            _record(reservation, ReservationEventKind.CREATED, self.actor, reservation.placement + retried)
            return reservation

        return _with_retries(attempt)


def _earliest_offer(booking: _Booking, starts_at: datetime, ends_at: datetime, pod: str | None, limits) -> Offer | None:
    """The first period as long as the one asked for, starting within the booking horizon, in
    which the request fits: read from the holds of the whole horizon at once."""
    duration = ends_at - starts_at
    latest_start = timezone.now() + limits.horizon
    racks, busy = capacity_over_time(earliest=starts_at, until=latest_start + duration, pod=pod)
    request = replace(booking.request, pod=pod)
    return earliest_offer(request, racks, busy, earliest=starts_at, latest_start=latest_start, duration=duration)


class QuotaExceeded(DomainError):
    """The request would take the tenant past a limit of its quota; says which, and the use."""


def _check_quota(
    quota: Quota, tenant: Tenant, wanted: int, pod: str | None, starts_at: datetime, ends_at: datetime
) -> None:
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
        for month in usage.months(usage.Span(starts_at, ends_at)):
            booked = node_hours_booked(tenant, usage.calendar_month(month.start))
            asked = wanted * (month.end - month.start) / timedelta(hours=1)
            if booked + asked > quota.node_hours_per_month:
                raise QuotaExceeded(
                    f"your quota is {quota.node_hours_per_month} node-hours a month; you have {booked:.1f} booked "
                    f"in {month.start:%Y-%m} and asked for {asked:.1f} more there"
                )


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
    started = Reservation.objects.filter(pk=reservation_id, state__in=LIVE_STATES).update(
        state=ReservationState.RELEASING, reason=""
    )
    reservation = Reservation.objects.get(pk=reservation_id)
    if started:
        _record(reservation, ReservationEventKind.RELEASING, actor, reason)
    if reservation.state != ReservationState.RELEASING:
        return reservation
    # One transaction per node: a node's release must not wait on, or roll back, another's.
    for node_id in Node.objects.filter(reservation=reservation).order_by("pk").values_list("pk", flat=True):
        try:
            transition(node_id=node_id, event=lifecycle.Event.RELEASED, actor=actor, reason=reason)
        except lifecycle.TransitionRefused:
            log.info("node %s left reservation %s on its own while it was released", node_id, reservation_id)
    with transaction.atomic():
        _end_allocations(live_allocations().filter(reservation=reservation), reason)
        # The tenant's release and the reconciler's may finish the same release: one records it.
        if Reservation.objects.filter(pk=reservation_id, state=ReservationState.RELEASING).update(
            state=ReservationState.RELEASED
        ):
            _record(reservation, ReservationEventKind.RELEASED, actor, reason)
            webhooks.notify(
                reservation, WebhookEvent.RESERVATION_RELEASED, state=ReservationState.RELEASED, detail=reason
            )
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
    if reservation.state != ReservationState.PENDING:
        Reservation.objects.filter(pk=reservation_id, state__in=LIVE_STATES).update(
            state=ReservationState.DEGRADED, reason=f"{reason}; placing a replacement"
        )
        webhooks.notify(reservation, WebhookEvent.RESERVATION_DEGRADED, state=ReservationState.DEGRADED, detail=reason)
    _record(reservation, ReservationEventKind.NODE_LOST, actor, reason)
    return True


def let_go_of_cut_off_nodes(*, actor: str = "system:fabric") -> int:
    """Take the nodes an unhealthy switch has cut off (selectors.nodes_cut_off) for at least
    FABRIC_LET_GO_AFTER_SECONDS from the reservations they serve: each is let go with the switch's
    reason, which degrades its reservation, and wiped; healing places its replacement inside the
    reservation's domain, on nodes the fabric reaches. Returns how many nodes were let go. A node
    whose transition races another is left for the next sweep, all of its change undone."""
    cut_off = nodes_cut_off(lasting=timedelta(seconds=settings.FABRIC_LET_GO_AFTER_SECONDS))
    serving = Node.objects.filter(pk__in=list(cut_off), state__in=lifecycle.SERVING_STATES, reservation__isnull=False)
    let_go = 0
    for node_id, name, reservation_id in serving.order_by("pk").values_list("pk", "name", "reservation_id"):
        reason = f"{name} cut off from the fabric: {cut_off[node_id]}"
        try:
            with transaction.atomic():
                lost = let_node_go(node_id=node_id, reservation_id=reservation_id, reason=reason, actor=actor)
                transition(node_id=node_id, event=lifecycle.Event.RELEASED, actor=actor, reason=reason)
        except lifecycle.TransitionRefused:
            log.info("node %s moved on its own while it was let go for its switch", name)
            continue
        let_go += 1
        if lost:
            reservation_lost_node.send(sender=let_go_of_cut_off_nodes, reservation_id=reservation_id)
    return let_go


def heal_reservation(*, reservation_id: int, actor: str = "system:healer") -> Reservation:
    """Place replacements for the nodes a live reservation lost, in its pod; say why if none is free.

    The reservation's row is locked while it is counted and topped up: the healing enqueued on
    commit and the reconciler's may run at the same moment, and only one may place the replacement.
    """
    with transaction.atomic():
        reservation = Reservation.objects.select_for_update().get(pk=reservation_id)
        # A period that has ended needs no replacement: expiry releases it.
        if reservation.state not in LIVE_STATES or _ended(reservation):
            return reservation
        held = live_allocations().filter(reservation=reservation)
        missing = reservation.node_count - held.count()
        if missing > 0:
            # Replacements need not make whole domains: the nodes kept are not whole ones any more.
            wanted = _request_of(reservation, missing, rack_scale=False, whole=None)

            def replacements(lost_races: int) -> list[str]:
                placement = _choose(wanted, starts_at=reservation.starts_at, ends_at=reservation.ends_at)
                _hold(reservation, placement, actor=actor)
                return list(placement.node_ids)

            try:
                chosen = _with_retries(replacements)
            except PlacementRefused as refused:
                Reservation.objects.filter(pk=reservation_id, state__in=LIVE_STATES).update(
                    state=ReservationState.DEGRADED,
                    reason=f"{WAITING_FOR_CAPACITY} to replace {missing} node(s): {refused.reason}",
                )
            else:
                _record(reservation, ReservationEventKind.REPLACEMENT_PLACED, actor, ", ".join(chosen))
    return settle_reservation(reservation_id=reservation_id, actor=actor)


def _ended(reservation: Reservation) -> bool:
    return reservation.ends_at is not None and reservation.ends_at <= timezone.now()


def _pod_of(allocations) -> str | None:
    return allocations.values_list("node__rack__pod__name", flat=True).first()


def settle_reservation(*, reservation_id: int, actor: str = "system:reconciler") -> Reservation:
    """Active once every node it holds serves it and is up, and none is missing."""
    reservation = Reservation.objects.get(pk=reservation_id)
    if reservation.state in (ReservationState.PROVISIONING, ReservationState.DEGRADED):
        up = Node.objects.filter(reservation=reservation, state=lifecycle.State.ACTIVE).count()
        held = live_allocations().filter(reservation=reservation).count()
        if up == held == reservation.node_count:
            with transaction.atomic():
                if Reservation.objects.filter(pk=reservation_id, state=reservation.state).update(
                    state=ReservationState.ACTIVE, reason=""
                ):
                    _record(reservation, ReservationEventKind.ACTIVE, actor)
                    # Active again after it lost a node: healed.
                    healed = reservation.state == ReservationState.DEGRADED
                    webhooks.notify(
                        reservation,
                        WebhookEvent.RESERVATION_HEALED if healed else WebhookEvent.RESERVATION_ACTIVE,
                        state=ReservationState.ACTIVE,
                        nodes=sorted(Node.objects.filter(reservation=reservation).values_list("name", flat=True)),
                    )
            reservation.refresh_from_db()
    return reservation


def _in_batches(queryset: QuerySet) -> Iterator:
    """Every row of `queryset`, by ascending id, read RECONCILE_BATCH at a time after the last one
    seen: a pass reaches them all however many there are, and reads each batch afresh."""
    after = 0
    while True:
        batch = list(queryset.filter(pk__gt=after).order_by("pk")[:RECONCILE_BATCH])
        yield from batch
        if len(batch) < RECONCILE_BATCH:
            return
        after = batch[-1].pk


def start_due_reservations(*, actor: str = "system:reconciler") -> int:
    """Provision the held nodes of pending reservations whose period has begun."""
    started = 0
    for reservation in _in_batches(Reservation.objects.filter(state=ReservationState.PENDING, starts_at__lte=Now())):
        if Reservation.objects.filter(pk=reservation.pk, state=ReservationState.PENDING).update(
            state=ReservationState.PROVISIONING
        ):
            _record(reservation, ReservationEventKind.STARTED, actor)
            started += 1
    return started + provision_held_nodes(actor=actor)


def provision_held_nodes(*, actor: str = "system:reconciler") -> int:
    """Send each held node of a started reservation to provisioning as soon as it is available.

    A held node that fell out of service before its reservation started is let go and replaced.
    Held nodes still finishing with their previous tenant are not even read: they cannot move yet.
    """
    count = 0
    held = (
        live_allocations()
        .filter(
            reservation__state__in=[ReservationState.PROVISIONING, ReservationState.DEGRADED],
            period__startswith__lte=Now(),
            node__state__in=[lifecycle.State.AVAILABLE, *OUT_OF_SERVICE],
        )
        .exclude(node__reservation_id=F("reservation_id"))
        .select_related("node", "reservation")
    )
    for allocation in _in_batches(held):
        node = allocation.node
        if node.state in OUT_OF_SERVICE:
            with transaction.atomic():
                let_node_go(
                    node_id=node.pk,
                    reservation_id=allocation.reservation_id,
                    reason=f"{node.name} is {node.state} {node.quarantine_reason}".strip(),
                    actor=actor,
                )
        else:
            count += _provision_if_still_started(node_id=node.pk, reservation_id=allocation.reservation_id, actor=actor)
    return count


def _provision_if_still_started(*, node_id: int, reservation_id: int, actor: str) -> bool:
    """Send one held node to provisioning while its reservation's row is locked and still started.

    The batch that found the node may be stale: a release that began since would list the
    reservation's nodes before this one joined it and leave it serving no one. The lock (the
    one release_reservation's first update takes) puts the two in order.
    """
    with transaction.atomic():
        reservation = (
            Reservation.objects.select_for_update(no_key=True)
            .filter(pk=reservation_id, state__in=[ReservationState.PROVISIONING, ReservationState.DEGRADED])
            .first()
        )
        if reservation is None:
            return False
        try:
            transition(node_id=node_id, event=lifecycle.Event.PROVISION_REQUESTED, actor=actor, reservation=reservation)
        except lifecycle.TransitionRefused:
            return False
    return True


def _count_per_reservation(queryset) -> Subquery:
    """How many rows of `queryset` belong to the outer query's reservation, 0 if none."""
    counted = queryset.filter(reservation=OuterRef("pk")).order_by().values("reservation").annotate(n=Count("pk"))
    return Coalesce(Subquery(counted.values("n")), 0)


def heal_under_allocated(*, actor: str = "system:reconciler") -> int:
    """Place replacements for every live reservation that holds fewer nodes than it asked for,
    where that can succeed: one that already says it waits for capacity is tried again only once
    its pod has as many nodes free now as it misses. Returns how many got their replacements."""
    first_held = live_allocations().filter(reservation=OuterRef("pk")).order_by("pk")
    short = (
        Reservation.objects.filter(
            state__in=[ReservationState.PENDING, ReservationState.PROVISIONING, ReservationState.DEGRADED]
        )
        .exclude(ends_at__lte=Now())
        .annotate(
            held=_count_per_reservation(live_allocations()),
            held_pod=Subquery(first_held.values("node__rack__pod__name")[:1]),
        )
        .filter(held__lt=F("node_count"))
        .select_related("pod")
    )
    free_now: Counter | None = None  # nodes free now per pod, read once a reservation needs it
    healed = 0
    for reservation in _in_batches(short):
        missing = reservation.node_count - reservation.held
        pod = reservation.pod.name if reservation.pod_id else reservation.held_pod
        if reservation.reason.startswith(WAITING_FOR_CAPACITY):
            free_now = free_now if free_now is not None else _free_now_per_pod()
            if (free_now[pod] if pod else max(free_now.values(), default=0)) < missing:
                continue  # it says why already, and nothing in this pass can place it
        heal_reservation(reservation_id=reservation.pk, actor=actor)
        if live_allocations().filter(reservation=reservation).count() >= reservation.node_count:
            healed += 1
            if free_now is not None and pod and reservation.state != ReservationState.PENDING:
                free_now[pod] -= missing
    return healed


def _free_now_per_pod() -> Counter:
    now = timezone.now()
    free = Counter()
    for rack in rack_capacity(starts_at=now, ends_at=now + INSTANT):
        free[rack.pod] += len(rack.free)
    return free


def settle_ready(*, actor: str = "system:reconciler") -> int:
    """Make active every provisioning or degraded reservation whose nodes are all up: what the
    node's own signal does, in case its process died before it could."""
    ready = (
        Reservation.objects.filter(state__in=[ReservationState.PROVISIONING, ReservationState.DEGRADED])
        .annotate(
            held=_count_per_reservation(live_allocations()),
            up=_count_per_reservation(Node.objects.filter(state=lifecycle.State.ACTIVE)),
        )
        .filter(held=F("node_count"), up=F("node_count"))
    )
    return sum(
        settle_reservation(reservation_id=reservation.pk, actor=actor).state == ReservationState.ACTIVE
        for reservation in _in_batches(ready)
    )


def reconcile_reservations() -> dict[str, int]:
    """One pass of the reconciler over every reservation that owes work; each step is idempotent.

    Each step reads only the reservations it can move (in batches, however many are live): what
    has ended, what is being released, what has started, what misses nodes that are free, what
    is up. Releases come first, since they free capacity that healing can use.
    """
    done = {"expired": expire_reservations(), "released": 0}
    for reservation in _in_batches(Reservation.objects.filter(state=ReservationState.RELEASING)):
        release_reservation(reservation_id=reservation.pk, actor="system:reconciler")
        done["released"] += 1
    done["ending notices"] = notify_ending_reservations()
    done["started"] = start_due_reservations()
    done["healed"] = heal_under_allocated()
    done["settled"] = settle_ready()
    done["idempotency keys forgotten"] = forget_expired_idempotency_keys()
    return done


def notify_ending_reservations(*, actor: str = "system:reconciler") -> int:
    """Tell each tenant that a reservation ends within RESERVATION_ENDING_NOTICE_MINUTES: once per
    end (an end that moves is told again), marked with a compare-and-set so two passes tell once."""
    notice = timedelta(minutes=settings.RESERVATION_ENDING_NOTICE_MINUTES)
    ending = Reservation.objects.filter(
        state__in=[ReservationState.PROVISIONING, ReservationState.ACTIVE, ReservationState.DEGRADED],
        ends_at__lte=Now() + notice,
        ends_at__gt=Now(),
    ).exclude(ending_notice_for=F("ends_at"))
    told = 0
    for reservation in _in_batches(ending):
        ends_at = reservation.ends_at.isoformat()
        with transaction.atomic():
            marked = (
                Reservation.objects.filter(pk=reservation.pk, ends_at=reservation.ends_at)
                .exclude(ending_notice_for=F("ends_at"))
                .update(ending_notice_for=F("ends_at"))
            )
            if not marked:
                continue  # another pass told it, or its end just moved
            _record(reservation, ReservationEventKind.ENDING_NOTICE, actor, f"ends at {ends_at}")
            webhooks.notify(reservation, WebhookEvent.RESERVATION_ENDING, ends_at=ends_at)
        told += 1
    return told


def expire_reservations(*, actor: str = "system:expiry") -> int:
    """Release live reservations whose period has ended."""
    ended = 0
    for reservation in _in_batches(Reservation.objects.filter(state__in=LIVE_STATES, ends_at__lte=Now())):
        release_reservation(reservation_id=reservation.pk, actor=actor, reason="period ended")
        ended += 1
    return ended


def forget_expired_idempotency_keys() -> int:
    """Drop the answers kept for idempotency keys older than their lifetime."""
    deleted, _ = IdempotencyKey.objects.filter(created_at__lte=Now() - IDEMPOTENCY_KEY_LIFETIME).delete()
    return deleted


class KeyRefused(Conflict):
    pass


def add_ssh_key(*, tenant: Tenant, name: str, public_key: str) -> SSHKey:
    """Keep one of the tenant's public keys; raises ssh_keys.BadKey for a malformed one and
    KeyRefused for a name or a key the tenant already has."""
    parsed = keys.parse(public_key)
    clash = SSHKey.objects.filter(tenant=tenant).filter(Q(name=name) | Q(fingerprint=parsed.fingerprint)).first()
    if clash is not None:
        raise KeyRefused(
            f"you have a key named {name!r} already"
            if clash.name == name
            else f"this key is yours already, named {clash.name!r}"
        )
    try:
        with transaction.atomic():
            return SSHKey.objects.create(
                tenant=tenant, name=name, public_key=parsed.line, fingerprint=parsed.fingerprint
            )
    except IntegrityError as error:  # the same key or name added at the same moment
        raise KeyRefused("you added this key or this name a moment ago") from error


def delete_ssh_key(*, tenant: Tenant, key_id: int) -> bool:
    """Forget one of the tenant's keys; False if the tenant has no such key. Nodes that were given
    it keep it until their reservation ends."""
    deleted, _ = SSHKey.objects.filter(pk=key_id, tenant=tenant).delete()
    return bool(deleted)


class ReportRefused(TooMany):
    """The tenant has reported as many nodes as it may today."""


def serving_node(*, reservation_id: int, tenant: Tenant, name: str) -> Node | None:
    """The node `name` if it serves this tenant's reservation now; None otherwise (another
    tenant's node or reservation is not told apart from one that does not exist)."""
    return Node.objects.filter(name=name, reservation_id=reservation_id, reservation__tenant=tenant).first()


def report_node(*, node: Node, tenant: Tenant, description: str) -> None:
    """ "This node is broken": it leaves the reservation, quarantined with the tenant's words for an
    operator, and a replacement is placed at once (reservations/handlers.py). At most
    TENANT_REPORTS_PER_DAY a day per tenant, counted under the tenant's row lock."""
    actor = f"tenant:{tenant.name}"
    with transaction.atomic():
        Tenant.objects.select_for_update().get(pk=tenant.pk)
        today = AuditEvent.objects.filter(
            event=lifecycle.Event.TENANT_REPORT, actor=actor, at__gte=timezone.now() - timedelta(days=1)
        ).count()
        if today >= settings.TENANT_REPORTS_PER_DAY:
            raise ReportRefused(
                f"you have reported {today} nodes in the last 24 hours, the most a tenant may; "
                "ask the operators if more are broken"
            )
        transition(node_id=node.pk, event=lifecycle.Event.TENANT_REPORT, actor=actor, reason=description)


class EndRefused(Conflict):
    """The new end overlaps another reservation of one of the nodes, or the reservation is over."""


class ChangeRefused(DomainError):
    """A change that cannot be asked for: `field` names the request field to correct."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def change_reservation(
    *,
    reservation_id: int,
    tenant: Tenant,
    actor: str,
    ends_at: datetime | None = None,
    node_count: int | None = None,
    release_nodes: list[str] | None = None,
) -> Reservation:
    """Extend or shorten a live reservation, grow it or give nodes back, all or nothing.

    A new end moves every node's hold, checked by the same exclusion constraint as any booking:
    an extension into another booking of one of its nodes is refused with the latest end it can
    have (PeriodRefused for an end the limits refuse). Growing places the new nodes in the same
    pod, next to the ones held (whole racks, for rack_scale), under the tenant's quota. Giving
    back releases the named nodes, or those placement chooses to leave whole racks free.
    """
    with transaction.atomic():
        reservation = Reservation.objects.select_for_update().get(pk=reservation_id, tenant=tenant)
        if reservation.state not in LIVE_STATES:
            raise EndRefused(f"reservation {reservation.pk} is {reservation.state}: it cannot change")
        changes = []
        if ends_at is not None:
            changes.append(_move_end(reservation, tenant, ends_at))
        wanted = node_count if node_count is not None else reservation.node_count - len(release_nodes or [])
        if release_nodes and wanted != reservation.node_count - len(set(release_nodes)):
            raise ChangeRefused("node_count", "must be the node count less the nodes released, or left out")
        if wanted > reservation.node_count:
            changes.append(_grow(reservation, tenant, wanted - reservation.node_count, actor))
        elif wanted < reservation.node_count:
            changes.append(_give_back(reservation, reservation.node_count - wanted, release_nodes, actor))
        if changes:
            _record(reservation, ReservationEventKind.CHANGED, actor, "; ".join(changes))
    return settle_reservation(reservation_id=reservation_id, actor=actor)


def _move_end(reservation: Reservation, tenant: Tenant, ends_at: datetime) -> str:
    quota = Quota.objects.select_for_update().filter(tenant=tenant).first()
    end = changed_end(starts_at=reservation.starts_at, wanted=ends_at, now=timezone.now(), limits=booking_limits(quota))
    held = live_allocations().filter(reservation=reservation)
    if quota is not None and end > reservation.ends_at:  # the nodes held now, held for longer
        _check_quota(quota, tenant, held.count(), _pod_of(held), reservation.ends_at, end)
    try:
        with transaction.atomic():
            held.update(period=Func(Func(F("period"), function="lower"), Value(end), function="tstzrange"))
    except IntegrityError as error:
        if not _is_exclusion_violation(error):
            raise
        raise EndRefused(_latest_end(reservation, held)) from error
    except OperationalError as error:
        if not _is_deadlock(error):
            raise
        raise EndRefused("a booking of one of its nodes was made at the same moment; try again") from error
    Reservation.objects.filter(pk=reservation.pk).update(ends_at=end)
    change = f"ends_at {reservation.ends_at.isoformat()} -> {end.isoformat()}"
    reservation.ends_at = end
    return change


def _grow(reservation: Reservation, tenant: Tenant, more: int, actor: str) -> str:
    """Hold `more` nodes for the rest of the reservation, in its pod, next to the ones it holds."""
    held = live_allocations().filter(reservation=reservation)
    wanted = _request_of(reservation, more, near=frozenset(held.values_list("node__rack__name", flat=True)))

    def attempt(lost_races: int) -> _Placement:
        quota = Quota.objects.select_for_update().filter(tenant=tenant).first()
        placement = _choose(wanted, starts_at=reservation.starts_at, ends_at=reservation.ends_at)
        if quota is not None:
            _check_quota(
                quota, tenant, more, placement.pod, max(reservation.starts_at, timezone.now()), reservation.ends_at
            )
        _hold(reservation, placement, actor=actor)
        return placement

    placement = _with_retries(attempt)
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
    _end_allocations(held.filter(node__name__in=chosen), reason)
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
