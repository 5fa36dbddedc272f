"""Tenants' webhooks: subscribed events queued in the transaction that made them, sent signed as
Standard Webhooks says (checked with the specification's own library), retried, and never sent
to the control plane's own networks."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from standardwebhooks import Webhook as Verifier

from fleet.models import Node
from reservations import services
from reservations.models import Reservation, WebhookDelivery
from reservations.webhooks import reason_for_tenant
from tests.support.api import post
from tests.support.factories import drive
from tests.support.loopback import serving
from tests.support.webhooks import Receiver
from workflows import webhooks as sender

EVENTS = ["reservation.active", "reservation.degraded", "reservation.healed", "node.quarantined"]


@pytest.fixture
def receiver(settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"),)
    server = Receiver()
    with serving(server):
        yield server


def bring_up(reservation_id: int) -> None:
    """What the provisioning workflows and the reconciler do for the reservation's nodes."""
    for node in Node.objects.filter(reservation_id=reservation_id, state="provisioning"):
        drive(node, "provision_succeeded")
    services.settle_reservation(reservation_id=reservation_id)


def signed_by_hand(secret: str, headers: dict, body: bytes) -> bool:
    """The specification's signature computed here, apart from the library that made it."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return hmac.compare_digest(expected, headers["webhook-signature"])


def received(receiver: Receiver, secret: str) -> list[dict]:
    """Every delivery the receiver got so far, each verified as the tenant would, twice over."""
    found = []
    while not receiver.received.empty():
        headers, body = receiver.received.get()
        assert signed_by_hand(secret, headers, body)
        found.append(Verifier(secret).verify(body, headers))
    return found


def test_a_webhook_is_created_with_its_secret_shown_once_and_only_for_public_addresses(acme, globex, receiver):
    made = post(acme, "/v1/webhooks", {"url": receiver.url, "events": ["reservation.healed"]})
    assert made.status_code == 201, made.content
    assert set(made.json()) == {"id", "url", "events", "created_at", "secret"} and made.json()["secret"].startswith(
        "whsec_"
    )
    assert "secret" not in acme.get("/v1/webhooks").json()["results"][0]
    assert globex.delete(f"/v1/webhooks/{made.json()['id']}").status_code == 404
    assert globex.get(f"/v1/webhooks/{made.json()['id']}/deliveries").status_code == 404
    assert acme.delete(f"/v1/webhooks/{made.json()['id']}").status_code == 204


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"url": "http://10.0.0.5/x", "events": ["reservation.healed"]}, "10.0.0.5, which is not a public address"),
        ({"url": "http://169.254.169.254/latest", "events": ["reservation.healed"]}, "not a public address"),
        ({"url": "http://[::1]:8000/", "events": ["reservation.healed"]}, "not a public address"),
        ({"url": "http://user:pw@example.com/", "events": ["reservation.healed"]}, "may not hold credentials"),
        ({"url": "ftp://example.com/", "events": ["reservation.healed"]}, "must be http or https"),
        ({"url": "https://example.com/", "events": ["reservation.exploded"]}, "is not a valid choice"),
        ({"url": "https://example.com/", "events": []}, "events"),
    ],
)
def test_a_webhook_the_control_plane_must_not_call_is_refused(acme, db, body, says):
    answer = post(acme, "/v1/webhooks", body)
    assert answer.status_code == 400 and says in answer.json()["detail"], answer.content


def test_a_lost_node_and_its_healing_reach_the_tenant_signed(acme, available_fleet, receiver):
    hook = post(acme, "/v1/webhooks", {"url": receiver.url, "events": EVENTS}).json()
    created = post(acme, "/v1/reservations", {"node_count": 2, "pod": "p1"}).json()
    bring_up(created["id"])
    post(acme, f"/v1/reservations/{created['id']}/nodes/{created['nodes'][0]}/report", {"description": "dead"})
    services.heal_reservation(reservation_id=created["id"])
    services.provision_held_nodes()
    bring_up(created["id"])

    assert sender.deliver_due() == {"delivered": 4, "retried": 0, "failed": 0}
    got = sorted(received(receiver, hook["secret"]), key=lambda m: m["timestamp"])
    assert [m["type"] for m in got] == [
        "reservation.active",
        "node.quarantined",
        "reservation.degraded",
        "reservation.healed",
    ]
    assert got[1]["data"] == {
        "reservation": created["id"],
        "node": created["nodes"][0],
        "reason": "tenant_report: dead",
    }
    assert got[3]["data"]["state"] == "active" and len(got[3]["data"]["nodes"]) == 2
    deliveries = acme.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["results"]
    assert {(d["state"], d["attempts"], d["last_status"]) for d in deliveries} == {("delivered", 1, 204)}


def test_a_receiver_that_fails_is_retried_on_the_schedule_then_given_up(acme, available_fleet, receiver):
    hook = post(acme, "/v1/webhooks", {"url": receiver.url, "events": ["reservation.active"]}).json()
    created = post(acme, "/v1/reservations", {"node_count": 1, "pod": "p2"}).json()
    bring_up(created["id"])
    receiver.status = 500
    assert sender.deliver_due() == {"delivered": 0, "retried": 1, "failed": 0}
    delivery = WebhookDelivery.objects.get()
    assert (delivery.attempts, delivery.last_status, delivery.last_error) == (1, 500, "answered 500")
    assert delivery.next_attempt_at > timezone.now() + timedelta(seconds=3)
    assert sender.deliver_due() == {"delivered": 0, "retried": 0, "failed": 0}  # not due yet
    for _ in sender.RETRY_AFTER:
        WebhookDelivery.objects.update(next_attempt_at=timezone.now())
        sender.deliver_due()
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == ("failed", len(sender.RETRY_AFTER) + 1)
    assert len(received(receiver, hook["secret"])) == len(sender.RETRY_AFTER) + 1  # the same message each time


def test_a_change_rolled_back_tells_no_one_and_an_ending_reservation_is_told_once(acme, available_fleet, receiver):
    post(acme, "/v1/webhooks", {"url": receiver.url, "events": ["reservation.ending", "reservation.active"]})
    created = post(acme, "/v1/reservations", {"node_count": 1, "pod": "p2"}).json()
    node = Node.objects.get(reservation_id=created["id"])
    with pytest.raises(RuntimeError), transaction.atomic():
        drive(node, "provision_succeeded")
        services.settle_reservation(reservation_id=created["id"])  # active: queued ...
        raise RuntimeError("... and rolled back with it")
    assert not WebhookDelivery.objects.exists()

    Reservation.objects.filter(pk=created["id"]).update(ends_at=timezone.now() + timedelta(minutes=10))
    assert services.notify_ending_reservations() == 1
    assert services.notify_ending_reservations() == 0
    (ending,) = WebhookDelivery.objects.filter(event="reservation.ending")
    assert json.loads(json.dumps(ending.payload))["data"]["reservation"] == created["id"]


def test_a_delivery_is_sent_again_on_request_with_the_same_id(acme, globex, available_fleet, receiver):
    hook = post(acme, "/v1/webhooks", {"url": receiver.url, "events": ["reservation.active"]}).json()
    created = post(acme, "/v1/reservations", {"node_count": 1, "pod": "p2"}).json()
    bring_up(created["id"])
    sender.deliver_due()
    (delivery,) = acme.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["results"]
    path = f"/v1/webhooks/{hook['id']}/deliveries/{delivery['id']}/redeliver"
    assert post(globex, path, {}).status_code == 404
    again = post(acme, path, {})
    assert again.status_code == 202 and again.json()["state"] == "pending"
    assert sender.deliver_due()["delivered"] == 1
    first, second = (receiver.received.get(timeout=5) for _ in range(2))
    assert first[0]["webhook-id"] == second[0]["webhook-id"] == delivery["message_id"]


def test_a_worker_that_dies_mid_delivery_loses_nothing(acme, available_fleet, receiver):
    post(acme, "/v1/webhooks", {"url": receiver.url, "events": ["reservation.active"]})
    created = post(acme, "/v1/reservations", {"node_count": 1, "pod": "p2"}).json()
    bring_up(created["id"])
    with transaction.atomic():  # what a worker does before it sends, then it dies
        WebhookDelivery.objects.update(next_attempt_at=timezone.now() + sender.send_lease())
    assert sender.deliver_due() == {"delivered": 0, "retried": 0, "failed": 0}  # held by the dead worker's lease
    WebhookDelivery.objects.update(next_attempt_at=timezone.now())  # its lease runs out
    assert sender.deliver_due() == {"delivered": 1, "retried": 0, "failed": 0}


def test_an_operators_words_are_not_passed_to_the_tenant():
    assert reason_for_tenant("operator_quarantine: ask Bob, fan noise") == (
        "operator_quarantine: taken out of service by an operator"
    )
    assert reason_for_tenant("hardware_fault: XID 79 on GPU 3") == "hardware_fault: XID 79 on GPU 3"


def test_every_event_of_a_reservations_life_arrives_in_order_even_after_the_receiver_fails_three_times(
    acme, available_fleet, receiver
):
    every = ["reservation.active", "reservation.ending", "reservation.degraded", "reservation.healed"]
    hook = post(
        acme, "/v1/webhooks", {"url": receiver.url, "events": [*every, "reservation.released", "node.quarantined"]}
    ).json()
    soon = (timezone.now() + timedelta(minutes=30)).isoformat()
    created = post(acme, "/v1/reservations", {"node_count": 2, "pod": "p1", "ends_at": soon}).json()
    bring_up(created["id"])
    assert services.notify_ending_reservations() == 1
    post(acme, f"/v1/reservations/{created['id']}/nodes/{created['nodes'][0]}/report", {"description": "dead"})
    services.heal_reservation(reservation_id=created["id"])
    services.provision_held_nodes()
    bring_up(created["id"])
    acme.post(f"/v1/reservations/{created['id']}/release")

    receiver.status = 503  # down for three rounds of attempts, then back
    for _ in range(3):
        assert sender.deliver_due() == {"delivered": 0, "retried": 6, "failed": 0}
        WebhookDelivery.objects.update(next_attempt_at=timezone.now())
    receiver.status = 204
    assert sender.deliver_due() == {"delivered": 6, "retried": 0, "failed": 0}
    got = received(receiver, hook["secret"])  # each verified by hand and by the specification's library
    assert len(got) == 4 * 6
    life = sorted(got[-6:], key=lambda m: m["timestamp"])  # the round that was answered 204
    assert [m["type"] for m in life] == [
        "reservation.active",
        "reservation.ending",
        "node.quarantined",
        "reservation.degraded",
        "reservation.healed",
        "reservation.released",
    ]
