"""A tenant's own page: its reservations, webhooks and usage this month."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.core.paginator import Page, Paginator
from django.db.models import Prefetch, Q

from core import clock
from fleet.models import Node
from reservations import access
from reservations.models import LIVE_STATES, Activity, Membership, Reservation, Tenant, Webhook, WebhookDelivery
from reservations.selectors import capacity_by_pod, quota_of, reservation_machines, reservation_nodes, usage_of
from reservations.usage import KINDS as USAGE_KINDS
from reservations.usage import calendar_month

RECENT_DELIVERIES = 10  # per webhook, on the tenant's page
RECENT_ACTIVITY = 20  # changes to the organisation, on the tenant's page
RESERVATIONS_PER_PAGE = 25  # on the tenant's page, newest first: a tenant's history only grows


@dataclass(frozen=True)
class Standing:
    """The organisation a signed-in user's pages act for, their role in it, and every organisation
    they may pick from (by name)."""

    tenant: Tenant
    role: access.Role
    organisations: list[str]


def standing_of(user, chosen: str | None = None, *, signed_in_at: datetime | None) -> Standing | None:
    """Looked up at every request: a member removed, or whose role changed, sees it at the next one.
    The organisation `chosen` if the user is its member, else the organisation whose own account
    the user is (as its admin), else their first by name; of the memberships, only those whose
    admins have not signed the member out since `signed_in_at` (None: signed in long ago)."""
    if not user.is_authenticated:
        return None
    current = Membership.objects.filter(user=user).select_related("tenant")
    if signed_in_at is None:
        current = current.filter(signed_out_at__isnull=True)
    else:
        current = current.filter(Q(signed_out_at__isnull=True) | Q(signed_out_at__lt=signed_in_at))
    memberships = {m.tenant.name: m for m in current}
    own = Tenant.objects.filter(user=user).first()
    names = sorted({*memberships, *([own.name] if own else [])})
    if chosen in memberships or (own is None and memberships):
        membership = memberships[chosen if chosen in memberships else names[0]]
        return Standing(membership.tenant, access.Role(membership.role), names)
    return Standing(own, access.Role.ADMIN, names) if own else None


def reservations_page(tenant: Tenant, number: str | None) -> Page:
    """One page of the tenant's reservations, newest first; a `number` that names no page gives
    the first (or, past the end, the last)."""
    reservations = Reservation.objects.filter(tenant=tenant).select_related("pod").order_by("-created_at", "-id")
    return Paginator(reservations, RESERVATIONS_PER_PAGE).get_page(number)


def tenant_reservations(reservations: list[Reservation]) -> list[dict]:
    """The reservations (one page of the tenant's), each with the nodes it holds and their states,
    the machines serving it (address, SSH port, host key), and whether it can still change."""
    held = reservation_nodes(reservations)
    machines = reservation_machines(reservations)
    states = dict(
        Node.objects.filter(name__in=[n for names in held.values() for n in names]).values_list("name", "state")
    )
    return [
        {
            "reservation": r,
            "nodes": [(name, states.get(name, "")) for name in held.get(r.pk, [])],
            "machines": machines.get(r.pk, []),
            "live": r.state in LIVE_STATES,
        }
        for r in reservations
    ]


def tenant_page(tenant: Tenant, *, now: datetime | None = None, page: str | None = None) -> dict:
    """Everything the tenant's page shows besides its forms, as of `now` (None: core.clock's, read
    once), with the `page` of its reservations asked for."""
    now = now or clock.now()
    shown = reservations_page(tenant, page)
    return {
        "reservations": tenant_reservations(list(shown)),
        "reservations_page": shown,
        "capacity": capacity_by_pod(now=now),
        "quota": quota_of(tenant, now=now),
        "webhooks": tenant_webhooks(tenant),
        "usage": usage_this_month(tenant, now),
        "activity": list(Activity.objects.filter(tenant=tenant).order_by("-at", "-id")[:RECENT_ACTIVITY]),
    }


def tenant_webhooks(tenant: Tenant, deliveries: int = RECENT_DELIVERIES) -> list[dict]:
    """The tenant's webhooks (without their secrets), each with its latest deliveries, newest first."""
    latest = WebhookDelivery.objects.order_by("-created_at", "-id")[:deliveries]
    hooks = Webhook.objects.filter(tenant=tenant).order_by("id")
    hooks = hooks.prefetch_related(Prefetch("deliveries", latest, to_attr="latest_deliveries"))
    return [{"webhook": hook, "deliveries": hook.latest_deliveries} for hook in hooks]


@dataclass(frozen=True)
class UsageRow:
    reservation: int | None  # None: a member's total, or the organisation's
    user: str  # who made the reservation, or whose total it is ("" for the organisation's)
    seconds: dict[str, int]

    @property
    def hours(self) -> dict[str, float]:
        return {kind: seconds / 3600 for kind, seconds in self.seconds.items()}


@dataclass(frozen=True)
class Usage:
    start: datetime
    end: datetime
    rows: list[UsageRow]
    members: list[UsageRow]
    total: UsageRow


def usage_this_month(tenant: Tenant, now: datetime | None = None) -> Usage:
    """The tenant's node-seconds per reservation and per member from the first of this month (UTC)
    until `now` (None: core.clock's)."""
    end = now or clock.now()
    start = calendar_month(end).start
    usage = usage_of(tenant, start, end, now=end)

    def row(figures: dict, reservation: int | None = None, user: str = "") -> UsageRow:
        return UsageRow(reservation, user, seconds={kind: figures[kind] for kind in USAGE_KINDS})

    return Usage(
        start=start,
        end=end,
        rows=[row(entry, entry["reservation"], entry["user"]) for entry in usage["results"]],
        members=[row(entry, user=entry["user"]) for entry in usage["members"]],
        total=row(usage["total"]),
    )
