"""A tenant's page lists its reservations a page at a time, newest first: a tenant that made
thousands through the API still gets its page quickly, and a row changed on a later page comes
back to that page."""

import re

import pytest

from console.pages.selectors.tenant import RESERVATIONS_PER_PAGE
from reservations.models import Reservation

pytestmark = pytest.mark.django_db

PAGE = "/my/reservations"


@pytest.fixture
def many(alice) -> list[int]:
    """The ids of alice's reservations, newest first: one page and five more."""
    Reservation.objects.bulk_create(Reservation(tenant=alice, node_count=1) for _ in range(RESERVATIONS_PER_PAGE + 5))
    return list(Reservation.objects.filter(tenant=alice).order_by("-created_at", "-id").values_list("pk", flat=True))


def rows(answer) -> list[int]:
    assert answer.status_code == 200
    return [int(pk) for pk in re.findall(r'<tr data-reservation="(\d+)"', answer.content.decode())]


def test_the_page_shows_the_newest_reservations_and_links_to_the_older(alice_client, many):
    first = alice_client.get(PAGE)
    assert rows(first) == many[:RESERVATIONS_PER_PAGE]
    assert b'href="?page=2#reservations"' in first.content
    assert rows(alice_client.get(PAGE, {"page": "2"})) == many[RESERVATIONS_PER_PAGE:]
    assert rows(alice_client.get(PAGE, {"page": "not-a-page"})) == many[:RESERVATIONS_PER_PAGE]


def test_a_row_released_on_a_later_page_comes_back_to_that_page(alice_client, many):
    oldest = many[-1]
    second = alice_client.get(PAGE, {"page": "2"}).content.decode()
    assert f'action="/my/reservations/{oldest}/release?page=2"' in second
    answer = alice_client.post(f"/my/reservations/{oldest}/release?page=2")
    assert answer.status_code == 302
    assert answer["Location"] == f"{PAGE}?page=2#reservation-{oldest}"
    assert Reservation.objects.get(pk=oldest).state == "released"
