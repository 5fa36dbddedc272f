"""`gpufleet webhooks`: add (the secret shown once), list, deliveries, redeliver, delete, against
the live control plane. Loopback is allowed as a webhook target here, as in
tests/reservations/test_webhooks.py (GPUFLEET_WEBHOOK_ALLOWED_NETWORKS)."""

from __future__ import annotations

import ipaddress
import json

import pytest

from reservations import services
from reservations.models import Tenant, Webhook, WebhookDelivery, WebhookEvent
from reservations.webhooks import notify

URL = "http://127.0.0.1:9/hooks"


@pytest.fixture
def loopback_allowed(settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"),)


def test_add_list_and_delete_a_webhook(acme, globex, loopback_allowed, db):
    added = acme.run("webhooks", "add", URL, "--event", "reservation.active", "--event", "node.quarantined")
    assert added.returncode == 0, added.stderr
    webhook = Webhook.objects.get()
    shown = dict(line.split(None, 1) for line in added.stdout.splitlines())
    assert shown == {
        "id": str(webhook.pk),
        "url": URL,
        "events": "node.quarantined, reservation.active",
        "secret": webhook.secret,
    }
    assert "the secret is shown only now" in added.stderr

    listed = acme.run("webhooks")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["ID", "URL", "EVENTS", "CREATED"]
    assert row.split()[:4] == [str(webhook.pk), URL, "node.quarantined,", "reservation.active"]
    assert webhook.secret not in listed.stdout
    assert json.loads(acme.run("webhooks", "--json").stdout)["results"][0]["url"] == URL

    assert globex.run("webhooks", "delete", str(webhook.pk)).returncode == 3  # not globex's
    deleted = acme.run("webhooks", "delete", str(webhook.pk))
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == f"webhook {webhook.pk} deleted\n"
    assert not Webhook.objects.exists()
    assert acme.run("webhooks", "delete", str(webhook.pk)).returncode == 3
    assert acme.run("webhooks").stderr == "no webhooks\n"


def test_add_prints_the_servers_json_with_its_secret(acme, loopback_allowed, db):
    added = acme.run("webhooks", "add", URL, "--event", "reservation.released", "--json")
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout) == {
        "id": Webhook.objects.get().pk,
        "url": URL,
        "events": ["reservation.released"],
        "created_at": json.loads(added.stdout)["created_at"],
        "secret": Webhook.objects.get().secret,
    }


def test_a_webhook_to_a_private_address_is_refused_with_the_servers_reason(acme, db):
    completed = acme.run("webhooks", "add", URL, "--event", "reservation.active")
    assert completed.returncode == 1
    assert completed.stderr.startswith("gpufleet: url: ") and completed.stderr.rstrip().endswith("(400)")


def test_an_unknown_event_is_refused(acme, loopback_allowed, db):
    completed = acme.run("webhooks", "add", URL, "--event", "reservation.exploded")
    assert completed.returncode == 1
    assert "events" in completed.stderr and "(400)" in completed.stderr


def test_deliveries_and_redeliver(acme, loopback_allowed, available_fleet, broker):
    assert acme.run("webhooks", "add", URL, "--event", "reservation.released").returncode == 0
    webhook = Webhook.objects.get()
    assert acme.run("webhooks", "deliveries", str(webhook.pk)).stderr == f"nothing sent to webhook {webhook.pk} yet\n"

    reservation = services.create_reservation(tenant=Tenant.objects.get(name="acme"), node_count=1, actor="test")
    notify(reservation, WebhookEvent.RESERVATION_RELEASED, state="released", detail="test")
    delivery = WebhookDelivery.objects.get()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(state="failed", attempts=8, last_status=503)

    listed = acme.run("webhooks", "deliveries", str(webhook.pk))
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split()[:5] == ["ID", "EVENT", "STATE", "ATTEMPTS", "LAST"]
    assert row.split()[:5] == [str(delivery.pk), "reservation.released", "failed", "8", "503"]

    again = acme.run("webhooks", "redeliver", str(webhook.pk), str(delivery.pk))
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"delivery {delivery.pk} (reservation.released) will be sent again now: pending\n"
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == ("pending", 0)

    assert acme.run("webhooks", "redeliver", str(webhook.pk), "999999").returncode == 3
    assert acme.run("webhooks", "deliveries", "999999").returncode == 3
