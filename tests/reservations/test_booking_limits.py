"""Reservations that cannot be abused: a booking horizon, a maximum duration, ends_at for a later
start, and capacity that says what an open-ended request can get (through the API)."""

from datetime import UTC, datetime, timedelta

from django.utils import timezone
from rest_framework.test import APIClient

from reservations.models import Reservation
from tests.support.api import post

DAY = timedelta(days=1)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def book_p2_for_a_day(client, starts: datetime):
    """All of p2, for a day from `starts`."""
    return post(
        client,
        "/v1/reservations",
        {"node_count": 4, "pod": "p2", "starts_at": iso(starts), "ends_at": iso(starts + DAY)},
    )


def capacity(pod: str) -> dict:
    return next(p for p in APIClient().get("/v1/capacity").json()["pods"] if p["name"] == pod)


def test_a_far_future_open_ended_hold_is_refused_and_every_open_ended_request_still_fits(acme, globex, available_fleet):
    """The audit's attack: one tenant held all of p2 from 9999 on, and every open-ended
    reservation of the others in p2 was refused while capacity showed the nodes free."""
    hold = post(acme, "/v1/reservations", {"node_count": 4, "pod": "p2", "starts_at": "9999-12-31T00:00:00Z"})
    assert hold.status_code == 400 and hold.json()["detail"].startswith("starts_at: ")
    later = post(
        acme,
        "/v1/reservations",
        {"node_count": 4, "pod": "p2", "starts_at": "9999-12-31T00:00:00Z", "ends_at": "9999-12-31T01:00:00Z"},
    )
    assert later.status_code == 400 and "90 days" in later.json()["detail"]
    assert not Reservation.objects.exists()
    assert post(globex, "/v1/reservations", {"node_count": 4, "pod": "p2"}).status_code == 201


def test_a_later_start_without_ends_at_is_refused_naming_ends_at(acme, available_fleet):
    answer = post(acme, "/v1/reservations", {"node_count": 1, "starts_at": iso(timezone.now() + DAY)})
    assert answer.status_code == 400 and answer.json()["detail"].startswith("ends_at: ")
    assert "required" in answer.json()["detail"]


def test_a_reservation_longer_than_the_maximum_duration_is_refused_naming_ends_at(acme, available_fleet):
    starts = timezone.now() + DAY
    answer = post(
        acme, "/v1/reservations", {"node_count": 1, "starts_at": iso(starts), "ends_at": iso(starts + 31 * DAY)}
    )
    assert answer.status_code == 400 and answer.json()["detail"].startswith("ends_at: ")
    assert "30 days" in answer.json()["detail"]
    assert not Reservation.objects.exists()


def test_a_period_wholly_in_the_past_is_400_naming_ends_at_not_a_500(acme, available_fleet):
    """The audit's item 7: a past start means now, so a past ends_at is before it."""
    answer = post(
        acme,
        "/v1/reservations",
        {"node_count": 1, "starts_at": "2000-01-01T00:00:00Z", "ends_at": "2000-01-02T00:00:00Z"},
    )
    assert answer.status_code == 400, answer.content
    assert answer.json()["detail"].startswith("ends_at: ") and "ends_at" in answer.json()["errors"]


def test_capacity_shows_nodes_a_later_booking_holds_as_free_now_but_not_for_an_open_ended_request(
    acme, globex, available_fleet
):
    starts = timezone.now() + 2 * DAY
    assert book_p2_for_a_day(acme, starts).status_code == 201
    assert {k: v for k, v in capacity("p2").items() if k != "domains"} == {
        "name": "p2",
        "nodes": 4,
        "available": 4,
        "free_open_ended": 0,
        "whole_free_racks": 1,
    }
    assert capacity("p1")["free_open_ended"] == 8
    # what capacity says is what a request gets: open-ended is refused, one that ends before fits
    assert post(globex, "/v1/reservations", {"node_count": 1, "pod": "p2"}).status_code == 409
    before = post(globex, "/v1/reservations", {"node_count": 1, "pod": "p2", "ends_at": iso(starts)})
    assert before.status_code == 201


def test_a_booking_after_the_maximum_duration_blocks_no_open_ended_request(acme, globex, available_fleet):
    starts = timezone.now() + 40 * DAY
    assert book_p2_for_a_day(acme, starts).status_code == 201
    assert capacity("p2")["free_open_ended"] == 4
    now_on = post(globex, "/v1/reservations", {"node_count": 4, "pod": "p2"})
    assert now_on.status_code == 201, now_on.content
    assert datetime.fromisoformat(now_on.json()["ends_at"]) <= starts.astimezone(UTC)
