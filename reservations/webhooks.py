"""Tenants' webhooks: where they are told what happens to their reservations.

An event is written as one WebhookDelivery per subscribed webhook in the transaction that made
it (an outbox: a process that dies after the commit loses nothing, and a rolled-back change
tells no one); workflows/webhooks.py sends them, signed as Standard Webhooks says, and retries.

A tenant names the URL, so the control plane must not be turned against its own networks: a
webhook's host must resolve only to public addresses (core.outbound.special_purpose names every
range that is not one), or to GPUFLEET_WEBHOOK_ALLOWED_NETWORKS. The sender checks again, and
connects to exactly the address it checked.
"""

from __future__ import annotations

import base64
import secrets
import uuid

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from core import clock, outbound
from core.errors import FieldRefused, NotFound
from reservations import activity
from reservations.models import ActivityKind, Reservation, Tenant, Webhook, WebhookDelivery, WebhookEvent
from reservations.signals import webhook_deliveries_due

SECRET_BYTES = 32
MAX_WEBHOOKS_PER_TENANT = 10


class WebhookRefused(FieldRefused):
    """The URL is not one the control plane may post a tenant's events to."""

    def __init__(self, reason: str):
        super().__init__("url", reason)


def allowed_address() -> outbound.AddressCheck:
    """Where a tenant's webhook may go: public addresses, and GPUFLEET_WEBHOOK_ALLOWED_NETWORKS."""
    return outbound.public_only(settings.WEBHOOK_ALLOWED_NETWORKS)


def check_target(url: str) -> None:
    """Refuse a URL that is not plain http(s) to a host whose every address the control plane may reach."""
    try:
        outbound.resolve_checked(url, allowed_address())
    except outbound.OutboundError as refused:
        raise WebhookRefused(refused.reason) from None


def create_webhook(*, tenant: Tenant, url: str, events: list[str]) -> Webhook:
    """A new webhook with a new secret (the answer is the only time the tenant sees it)."""
    check_target(url)
    with transaction.atomic():
        Tenant.objects.select_for_update().get(pk=tenant.pk)
        if Webhook.objects.filter(tenant=tenant).count() >= MAX_WEBHOOKS_PER_TENANT:
            raise WebhookRefused(f"a tenant has at most {MAX_WEBHOOKS_PER_TENANT} webhooks; delete one first")
        secret = "whsec_" + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()
        webhook = Webhook.objects.create(tenant=tenant, url=url, events=sorted(set(events)), secret=secret)
        activity.record(tenant, ActivityKind.WEBHOOK_CREATED, webhook=webhook.pk, url=url, events=webhook.events)
        return webhook


def delete_webhook(*, tenant: Tenant, webhook_id: int) -> None:
    with transaction.atomic():
        deleted, _ = Webhook.objects.filter(pk=webhook_id, tenant=tenant).delete()
        if not deleted:
            raise NotFound(f"no webhook {webhook_id}")
        activity.record(tenant, ActivityKind.WEBHOOK_DELETED, webhook=webhook_id)


def notify(reservation: Reservation, event: WebhookEvent, **data) -> int:
    """Queue `event` for every webhook of the reservation's tenant that subscribed to it, in the
    caller's transaction; how many deliveries were queued."""
    webhooks = list(Webhook.objects.filter(tenant_id=reservation.tenant_id, events__contains=[event.value]))
    if not webhooks:
        return 0  # nobody listens: not even the clock is read
    payload = {
        "type": event.value,
        "timestamp": clock.now().isoformat(),
        "data": {"reservation": reservation.pk, **data},
    }
    WebhookDelivery.objects.bulk_create(
        WebhookDelivery(webhook=webhook, message_id=f"msg_{uuid.uuid4().hex}", event=event.value, payload=payload)
        for webhook in webhooks
    )
    webhook_deliveries_due.send(sender=Webhook)
    return len(webhooks)


def reason_for_tenant(quarantine_reason: str) -> str:
    """A quarantine's reason as the node's tenant is told it: the machine's own words (an XID, a
    failed attestation, the tenant's report), but not an operator's, which may name anyone."""
    event, _, _ = quarantine_reason.partition(":")
    if event == "operator_quarantine":
        return "operator_quarantine: taken out of service by an operator"
    return quarantine_reason


def redeliver(*, tenant: Tenant, webhook_id: int, delivery_id: int) -> WebhookDelivery:
    """Send one of the tenant's deliveries again, now, with the same webhook-id (so a receiver that
    got it can tell)."""
    delivery = WebhookDelivery.objects.filter(pk=delivery_id, webhook_id=webhook_id, webhook__tenant=tenant).first()
    if delivery is None:
        raise NotFound(f"no delivery {delivery_id} of webhook {webhook_id}")
    with transaction.atomic():
        WebhookDelivery.objects.filter(pk=delivery.pk).update(
            state=WebhookDelivery.State.PENDING, attempts=0, next_attempt_at=Now(), last_error=""
        )
        webhook_deliveries_due.send(sender=Webhook)
    delivery.refresh_from_db()
    return delivery
