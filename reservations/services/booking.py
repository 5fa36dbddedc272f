"""Booking a reservation: placed now, or, for a request that waits for capacity, at the earliest
period in which it fits (its offer).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from core import clock
from core.topology import NVLINK_DOMAIN, POD
from fleet.models import Image, Pod
from reservations.models import Quota, Reservation, ReservationEventKind, ReservationState, SSHKey, Tenant
from reservations.offers import Offer, earliest_offer
from reservations.periods import BookingLimits, booking_period
from reservations.placement import PlacementRefused, PlacementRequest
from reservations.selectors import booking_limits, capacity_over_time, tenant_quota
from reservations.services.placing import PLACEMENT_ATTEMPTS, check_quota, choose, hold, record_event, with_retries

QUEUED = "queued"  # how a reservation booked at an offer ("wait": true) says so


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
    now: datetime | None = None,
) -> Reservation:
    """Place and hold the nodes, or raise PlacementRefused with the reason and the earliest period
    in which the request fits (its `offer`, None if none within the booking horizon); nothing is
    kept then. With `wait`, a request that does not fit now is booked at that offer instead.

    The period follows reservations/periods.py (PeriodRefused names the field): no `ends_at`
    means the tenant's maximum duration, and is allowed only for a reservation starting now.
    The nodes boot `image`, or the catalogue's default, with the tenant's `ssh_keys` and
    `user_data` (the caller checked that the keys are the tenant's). The period, the placement and
    whether it has started are all decided at one `now` (None: core.clock's, read once).
    """
    now = now or clock.now()
    quota = tenant_quota(tenant)
    limits = booking_limits(quota)
    starts_at, ends_at = booking_period(starts_at=starts_at, ends_at=ends_at, now=now, limits=limits)
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
        now=now,
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
            refused.offer = later = _earliest_offer(booking, starts_at, ends_at, pod.name if pod else None, limits)
            if later is None:
                raise
            offer = later
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
    now: datetime  # the one clock reading the booking is decided at

    def place(self, *, starts_at: datetime, ends_at: datetime, pod: Pod | None, queued: bool = False) -> Reservation:
        def attempt(lost_races: int) -> Reservation:
            # A tenant with a quota places one request at a time, under its quota's row: concurrent
            # ones cannot each fit alone. Tenants without one are not held up, nor asked again.
            quota = self.quota and Quota.objects.select_for_update().filter(pk=self.quota.pk).first()
            wanted = replace(self.request, pod=pod.name if pod else None)
            placement = choose(wanted, starts_at=starts_at, ends_at=ends_at, now=self.now)
            if quota is not None:
                check_quota(quota, self.tenant, len(placement.node_ids), placement.pod, starts_at, ends_at)
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
                state=ReservationState.PROVISIONING if starts_at <= self.now else ReservationState.PENDING,
                reason=f"{QUEUED} for the earliest period in which it fits" if queued else "",
                placement=placement.description,
                image=self.image,
                user_data=self.user_data,
            )
            if self.ssh_keys:  # set([]) would read the keys it has, of which a new reservation has none
                reservation.ssh_keys.set(self.ssh_keys)
            hold(reservation, placement, actor=self.actor)
            reservation.placed_nodes = sorted(placement.node_ids)
            reservation.placed_ssh_keys = [key.pk for key in sorted(self.ssh_keys, key=lambda key: key.name)]
            retried = f" (placed again after {lost_races} lost race(s))" if lost_races else ""
            record_event(reservation, ReservationEventKind.CREATED, self.actor, reservation.placement + retried)
            return reservation

        return with_retries(attempt)


def _earliest_offer(booking: _Booking, starts_at: datetime, ends_at: datetime, pod: str | None, limits) -> Offer | None:
    """The first period as long as the one asked for, starting within the booking horizon, in
    which the request fits: read from the holds of the whole horizon at once."""
    duration = ends_at - starts_at
    latest_start = booking.now + limits.horizon
    racks, busy = capacity_over_time(earliest=starts_at, until=latest_start + duration, pod=pod)
    request = replace(booking.request, pod=pod)
    return earliest_offer(request, racks, busy, earliest=starts_at, latest_start=latest_start, duration=duration)
