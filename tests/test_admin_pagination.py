"""The admin's inlines of rows that only grow show a page at a time: a reservation with a long
history, or a webhook a tenant made deliver thousands of times, still opens quickly."""

import re

import pytest
from django.utils import timezone

from core.admin_inlines import PaginatedInline
from fleet.admin import FirmwareRolloutNodeInline, NodeAddressInline, RackInline
from remediation.admin import IncidentEventInline
from reservations.admin import AllocationInline, ReservationEventInline, SSHKeyInline, WebhookDeliveryInline
from reservations.models import Reservation, ReservationEvent, Webhook, WebhookDelivery

pytestmark = pytest.mark.django_db

PER_PAGE = PaginatedInline.per_page


def details(page) -> list[str]:
    return re.findall(r"event number (\d+)", page.content.decode())


def test_a_long_history_shows_its_newest_page_with_links_to_the_older_ones(admin_client, alice):
    reservation = Reservation.objects.create(tenant=alice, node_count=1)
    total = 2 * PER_PAGE + 7
    ReservationEvent.objects.bulk_create(
        ReservationEvent(reservation=reservation, actor="test", event="changed", detail=f"event number {n}")
        for n in range(total)
    )
    url = f"/admin/reservations/reservation/{reservation.pk}/change/"
    newest = admin_client.get(url)
    assert newest.status_code == 200
    assert details(newest) == [str(n) for n in reversed(range(total - PER_PAGE, total))]
    assert f"of {total}".encode() in newest.content and b"events-page=3" in newest.content
    oldest = admin_client.get(url, {"events-page": "3"})
    assert details(oldest) == [str(n) for n in reversed(range(7))]
    assert admin_client.get(url, {"events-page": "x"}).status_code == 200, "a bad page is the first"


def test_a_webhooks_deliveries_page_apart_from_the_rest(admin_client, alice):
    hook = Webhook.objects.create(tenant=alice, url="https://example.com/h", events=["reservation.active"], secret="s")
    WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            webhook=hook, message_id=f"msg_{n}", event="reservation.active", payload={}, created_at=timezone.now()
        )
        for n in range(PER_PAGE + 1)
    )
    page = admin_client.get(f"/admin/reservations/webhook/{hook.pk}/change/")
    assert page.status_code == 200
    assert len(set(re.findall(r'id="deliveries-(\d+)"', page.content.decode()))) == PER_PAGE
    assert b"deliveries-page=2" in page.content


def test_every_inline_of_growing_rows_is_paginated():
    growing = [
        AllocationInline,
        ReservationEventInline,
        SSHKeyInline,
        WebhookDeliveryInline,
        FirmwareRolloutNodeInline,
        NodeAddressInline,
        RackInline,
        IncidentEventInline,
    ]
    assert [inline for inline in growing if not issubclass(inline, PaginatedInline)] == []
