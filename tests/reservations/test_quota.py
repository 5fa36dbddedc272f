"""Quotas per tenant: nodes held at once, in all pods and per pod, and the booking limits; shown
at GET /v1/quota, enforced under the tenant's row lock so concurrent requests cannot pass it."""

from __future__ import annotations

import functools
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.models import Node, Pod
from reservations import services
from reservations.models import Allocation, Quota, Reservation, Tenant
from reservations.placement import PlacementRefused
from reservations.selectors import live_allocations, node_hours_booked
from reservations.usage import calendar_month
from tests.support.api import post
from tests.support.concurrency import at_once
from tests.support.examples import examples
from tests.support.factories import enrol_default_fleet, make_available

H = timedelta(hours=1)


def test_the_quota_is_shown_with_what_the_tenant_holds(acme, available_fleet, settings):
    tenant = Tenant.objects.get(name="acme")
    assert acme.get("/v1/quota").json() == {
        "limits": {
            "nodes": None,
            "nodes_per_pod": None,
            "node_hours_per_month": None,
            "booking_horizon_days": settings.BOOKING_HORIZON_DAYS,
            "max_duration_days": settings.MAX_RESERVATION_DAYS,
        },
        "used": {"nodes": 0, "nodes_per_pod": {}, "node_hours_this_month": 0.0},
    }
    Quota.objects.create(tenant=tenant, nodes=5, nodes_per_pod=3, max_duration_days=7)
    assert post(acme, "/v1/reservations", {"node_count": 2, "pod": "p2"}).status_code == 201
    quota = acme.get("/v1/quota").json()
    booked = quota["used"].pop("node_hours_this_month")  # 2 nodes for 7 days, less what falls in next month
    assert 0 < booked <= 2 * 7 * 24
    assert quota == {
        "limits": {
            "nodes": 5,
            "nodes_per_pod": 3,
            "node_hours_per_month": None,
            "booking_horizon_days": settings.BOOKING_HORIZON_DAYS,
            "max_duration_days": 7,
        },
        "used": {"nodes": 2, "nodes_per_pod": {"p2": 2}},
    }


def test_a_request_over_quota_names_the_limit_and_the_use(acme, available_fleet):
    Quota.objects.create(tenant=Tenant.objects.get(name="acme"), nodes=5, nodes_per_pod=3)
    soon = (timezone.now() + 2 * H).isoformat()
    assert post(acme, "/v1/reservations", {"node_count": 2, "pod": "p2", "ends_at": soon}).status_code == 201
    per_pod = post(acme, "/v1/reservations", {"node_count": 2, "pod": "p2"})
    assert per_pod.status_code == 403
    assert per_pod.json() == {
        "detail": "your quota is 3 nodes at once in a pod; you hold 2 in p2 over that period and asked for 2 more"
    }
    assert post(acme, "/v1/reservations", {"node_count": 3, "pod": "p1", "ends_at": soon}).status_code == 201
    total = post(acme, "/v1/reservations", {"node_count": 1, "pod": "p1"})
    assert total.status_code == 403 and total.json()["detail"].startswith("your quota is 5 nodes at once; you hold 5")
    # A later period that the holds do not overlap fits again.
    later = timezone.now() + 48 * H
    body = {"node_count": 1, "pod": "p1", "starts_at": later.isoformat(), "ends_at": (later + H).isoformat()}
    assert post(acme, "/v1/reservations", body).status_code == 201


def test_the_quotas_duration_refines_the_fleets(acme, available_fleet):
    Quota.objects.create(tenant=Tenant.objects.get(name="acme"), max_duration_days=1)
    start = timezone.now() + H
    body = {"node_count": 1, "starts_at": start.isoformat(), "ends_at": (start + 30 * H).isoformat()}
    answer = post(acme, "/v1/reservations", body)
    assert answer.status_code == 400 and "at most 1 day" in answer.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_never_pass_the_quota():
    make_available(enrol_default_fleet(12))
    tenant = Tenant.objects.create(name="acme")
    Quota.objects.create(tenant=tenant, nodes=3)
    outcomes = []

    def request():
        try:
            services.create_reservation(tenant=tenant, node_count=1, pod=Pod.objects.get(name="p1"), actor="t")
            outcomes.append("placed")
        except services.QuotaExceeded:
            outcomes.append("over quota")
        except PlacementRefused:
            outcomes.append("refused")

    at_once(*[functools.partial(request)] * 8)
    assert sorted(outcomes) == ["over quota"] * 5 + ["placed"] * 3
    assert Reservation.objects.filter(tenant=tenant).count() == Allocation.objects.count() == 3


@st.composite
def quota_races(draw):
    quota = {
        "nodes": draw(st.one_of(st.none(), st.integers(1, 6))),
        "nodes_per_pod": draw(st.one_of(st.none(), st.integers(1, 4))),
        "node_hours_per_month": draw(st.one_of(st.none(), st.integers(1, 24))),
    }
    asks = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["create", "grow", "extend"]),
                st.integers(1, 3),  # nodes
                st.sampled_from([None, "p1", "p2"]),
                st.integers(1, 4),  # start, hours from now
                st.integers(1, 3),  # duration or extension, hours
            ),
            min_size=2,
            max_size=6,
        )
    )
    return quota, asks


@pytest.mark.django_db(transaction=True)
@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=quota_races())
def test_no_mix_of_concurrent_creates_growths_and_extensions_passes_the_quota(case):
    quota_limits, asks = case
    if not Node.objects.exists():
        make_available(enrol_default_fleet(12))
    for earlier in Reservation.objects.filter(state__in=["pending", "provisioning"]):  # the last example's
        services.release_reservation(reservation_id=earlier.pk, actor="t")
    tenant = Tenant.objects.create(name=f"acme-{Tenant.objects.count()}")
    Quota.objects.create(tenant=tenant, **quota_limits)
    now = timezone.now()
    # One reservation to grow and extend, inside the quota or not there at all.
    try:
        first = services.create_reservation(
            tenant=tenant,
            node_count=1,
            pod=Pod.objects.get(name="p2"),
            starts_at=now + H,
            ends_at=now + 2 * H,
            actor="t",
        )
    except services.QuotaExceeded:
        return

    def ask(kind, count, pod, start, hours):
        try:
            if kind == "create":
                services.create_reservation(
                    tenant=tenant,
                    node_count=count,
                    pod=Pod.objects.get(name=pod) if pod else None,
                    starts_at=now + start * H,
                    ends_at=now + (start + hours) * H,
                    actor="t",
                )
            elif kind == "grow":
                current = Reservation.objects.get(pk=first.pk).node_count
                services.change_reservation(
                    reservation_id=first.pk, tenant=tenant, node_count=current + count, actor="t"
                )
            else:
                services.change_reservation(
                    reservation_id=first.pk, tenant=tenant, ends_at=now + (2 + hours) * H, actor="t"
                )
        except (services.QuotaExceeded, PlacementRefused, services.EndRefused):
            pass

    at_once(*(functools.partial(ask, *a) for a in asks))
    holds = list(live_allocations().filter(reservation__tenant=tenant).values_list("period", "node__rack__pod__name"))
    for moment in {period.lower for period, _ in holds}:
        at = [pod for period, pod in holds if period.lower <= moment < period.upper]
        if quota_limits["nodes"] is not None:
            assert len(at) <= quota_limits["nodes"]
        if quota_limits["nodes_per_pod"] is not None:
            assert max(Counter(at).values(), default=0) <= quota_limits["nodes_per_pod"]
    if quota_limits["node_hours_per_month"] is not None:
        for month in {calendar_month(period.lower) for period, _ in holds}:
            assert node_hours_booked(tenant, month) <= quota_limits["node_hours_per_month"] + 1e-6
