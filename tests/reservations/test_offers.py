"""Earliest-start offers: the pure sweep (reservations/offers.py), the 409's offer, and "wait": true."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.models import Pod
from reservations import services
from reservations.models import Reservation, ReservationState, Tenant
from reservations.offers import Busy, earliest_offer
from reservations.placement import PlacementRefused, PlacementRequest, RackCapacity, place
from tests.support.api import post
from tests.support.examples import examples
from tests.support.factories import drive

H = timedelta(hours=1)
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def rack(pod: str, name: str, size: int, out: tuple[str, ...] = ()) -> RackCapacity:
    nodes = tuple(f"{name}-n{i}" for i in range(size))
    return RackCapacity(pod=pod, rack=name, nodes=nodes, free=tuple(n for n in nodes if n not in out))


def test_a_request_that_fits_at_once_is_offered_its_own_start():
    offer = earliest_offer(
        PlacementRequest(node_count=2), [rack("p1", "r1", 4)], [], earliest=T0, latest_start=T0 + 9 * H, duration=H
    )
    assert offer is not None
    assert (offer.starts_at, offer.ends_at, offer.pod) == (T0, T0 + H, "p1")


def test_the_offer_starts_when_enough_holds_have_ended():
    racks = [rack("p1", "r1", 4)]
    busy = [Busy(f"r1-n{i}", T0 - H, T0 + (i + 1) * H) for i in range(4)]  # n0 free at +1h, n3 at +4h
    offer = earliest_offer(
        PlacementRequest(node_count=3), racks, busy, earliest=T0, latest_start=T0 + 9 * H, duration=2 * H
    )
    assert offer is not None
    assert offer.starts_at == T0 + 3 * H and set(offer.nodes) == {"r1-n0", "r1-n1", "r1-n2"}


def test_a_later_hold_in_the_way_pushes_the_offer_past_it():
    racks = [rack("p1", "r1", 2)]
    busy = [Busy("r1-n0", T0, T0 + H), Busy("r1-n1", T0 + 2 * H, T0 + 3 * H)]
    # Both nodes for 2 h: free [1h, 2h) is too short, so the offer starts at 3 h.
    offer = earliest_offer(
        PlacementRequest(node_count=2), racks, busy, earliest=T0, latest_start=T0 + 9 * H, duration=2 * H
    )
    assert offer is not None
    assert offer.starts_at == T0 + 3 * H


def test_no_offer_for_what_never_fits_or_fits_only_past_the_horizon():
    racks = [rack("p1", "r1", 4, out=("r1-n3",))]  # one node out of service for good
    assert (
        earliest_offer(PlacementRequest(node_count=4), racks, [], earliest=T0, latest_start=T0 + H, duration=H) is None
    )
    busy = [Busy("r1-n0", T0, T0 + 5 * H)]
    request = PlacementRequest(node_count=3)
    assert earliest_offer(request, racks, busy, earliest=T0, latest_start=T0 + 4 * H, duration=H) is None
    offer = earliest_offer(request, racks, busy, earliest=T0, latest_start=T0 + 5 * H, duration=H)
    assert offer is not None and offer.starts_at == T0 + 5 * H


def test_rack_scale_waits_for_a_whole_rack():
    racks = [rack("p1", "r1", 4), rack("p1", "r2", 4)]
    busy = [Busy("r1-n0", T0, T0 + 2 * H), Busy("r2-n3", T0, T0 + H)]
    offer = earliest_offer(
        PlacementRequest(node_count=4, rack_scale=True), racks, busy, earliest=T0, latest_start=T0 + 9 * H, duration=H
    )
    assert offer is not None
    assert offer.starts_at == T0 + H and set(offer.nodes) == set(racks[1].nodes)


@st.composite
def fleets_and_holds(draw):
    racks = []
    for p in range(draw(st.integers(1, 2))):
        for r in range(draw(st.integers(1, 3))):
            size = draw(st.integers(1, 4))
            racks.append(rack(f"p{p}", f"p{p}r{r}", size))
    nodes = [n for r in racks for n in r.nodes]
    holds = draw(
        st.lists(
            st.tuples(st.sampled_from(nodes), st.integers(-3, 12), st.integers(1, 6)).map(
                lambda t: Busy(t[0], T0 + t[1] * H, T0 + (t[1] + t[2]) * H)
            ),
            max_size=12,
        )
    )
    request = PlacementRequest(
        node_count=draw(st.integers(1, 6)),
        rack_scale=draw(st.booleans()),
        pod=draw(st.sampled_from([None, "p0", "p1"])),
    )
    return racks, holds, request, timedelta(hours=draw(st.integers(1, 4)))


def _free_over(racks, holds, start, end):
    return [
        RackCapacity(
            pod=r.pod,
            rack=r.rack,
            nodes=r.nodes,
            free=tuple(n for n in r.free if not any(b.node == n and b.start < end and b.end > start for b in holds)),
        )
        for r in racks
    ]


def _fits(request, racks, holds, start, duration) -> bool:
    try:
        place(request, _free_over(racks, holds, start, start + duration))
    except PlacementRefused:
        return False
    return True


@settings(max_examples=examples(300), deadline=None)
@given(fleets_and_holds())
def test_an_offer_is_placeable_and_nothing_earlier_is(case):
    racks, holds, request, duration = case
    latest = T0 + 10 * H
    offer = earliest_offer(request, racks, holds, earliest=T0, latest_start=latest, duration=duration)
    # Every whole hour is a start capacity could change at (the holds start and end on hours).
    starts = [T0 + i * H for i in range(11)]
    if offer is None:
        assert not any(_fits(request, racks, holds, s, duration) for s in starts)
        return
    assert T0 <= offer.starts_at <= latest and offer.ends_at - offer.starts_at == duration
    free = {n for r in _free_over(racks, holds, offer.starts_at, offer.ends_at) for n in r.free}
    assert set(offer.nodes) <= free and len(offer.nodes) == request.node_count
    assert {r.pod for r in racks if set(r.nodes) & set(offer.nodes)} == {offer.pod}
    assert not any(_fits(request, racks, holds, s, duration) for s in starts if s < offer.starts_at)


# Through the service and the API: the 12-node fleet, p1 one rack of 8 nodes, p2 one of 4.


def reserve(tenant, count, pod, starts_at=None, ends_at=None, **extra) -> Reservation:
    pod = Pod.objects.get(name=pod) if pod else None
    return services.create_reservation(
        tenant=tenant, node_count=count, pod=pod, starts_at=starts_at, ends_at=ends_at, actor="t", **extra
    )


def iso(moment) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def test_a_refusal_offers_the_earliest_period_and_the_offer_can_be_taken(acme, globex, available_fleet):
    now = timezone.now()
    reserve(Tenant.objects.get(name="globex"), 3, "p2", ends_at=now + 2 * H)
    answer = post(acme, "/v1/reservations", {"node_count": 2, "pod": "p2", "ends_at": iso(now + H)})
    assert answer.status_code == 409, answer.content
    body = answer.json()
    assert "fewer than the 2 requested" in body["detail"]
    assert body["offer"]["pod"] == "p2"
    assert datetime.fromisoformat(body["offer"]["starts_at"]) == now + 2 * H
    asked = datetime.fromisoformat(body["offer"]["ends_at"]) - datetime.fromisoformat(body["offer"]["starts_at"])
    assert H - timedelta(minutes=1) < asked <= H  # as long as the period asked for
    taken = post(
        acme,
        "/v1/reservations",
        {"node_count": 2, "pod": "p2", "starts_at": body["offer"]["starts_at"], "ends_at": body["offer"]["ends_at"]},
    )
    assert taken.status_code == 201, taken.content


def test_no_offer_when_nothing_fits_within_the_horizon(acme, available_fleet):
    answer = post(acme, "/v1/reservations", {"node_count": 13})
    assert answer.status_code == 409 and answer.json()["offer"] is None


def test_wait_books_the_offer_as_a_pending_reservation_that_can_be_cancelled(acme, globex, available_fleet):
    now = timezone.now()
    reserve(Tenant.objects.get(name="globex"), 8, "p1", ends_at=now + 3 * H)
    answer = post(acme, "/v1/reservations", {"node_count": 4, "pod": "p1", "ends_at": iso(now + H), "wait": True})
    assert answer.status_code == 201, answer.content
    queued = answer.json()
    assert queued["state"] == ReservationState.PENDING and queued["reason"].startswith(services.QUEUED)
    assert datetime.fromisoformat(queued["starts_at"]) == now + 3 * H
    assert now + 4 * H - timedelta(minutes=1) < datetime.fromisoformat(queued["ends_at"]) <= now + 4 * H
    assert len(queued["nodes"]) == 4
    released = acme.post(f"/v1/reservations/{queued['id']}/release")
    assert released.status_code == 200 and released.json()["state"] == ReservationState.RELEASED


def test_wait_with_room_now_books_now(acme, available_fleet):
    answer = post(acme, "/v1/reservations", {"node_count": 2, "wait": True})
    assert answer.status_code == 201 and answer.json()["state"] == ReservationState.PROVISIONING


def test_the_offer_counts_nodes_that_are_out_of_service_as_never_free(acme, available_fleet):
    for node in available_fleet[8:11]:  # three of p2's four nodes quarantined
        drive(node, "operator_quarantine")
    with pytest.raises(PlacementRefused) as refused:
        reserve(Tenant.objects.get(name="acme"), 2, "p2", ends_at=timezone.now() + H)
    assert refused.value.offer is None
