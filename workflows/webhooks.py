"""Sending tenants' webhook deliveries (reservations/webhooks.py queues them), signed as the
Standard Webhooks specification says: `webhook-id`, `webhook-timestamp` and `webhook-signature:
v1,<base64 HMAC-SHA256 of "id.timestamp.body">` with the webhook's secret.

A worker claims one due delivery at a time by moving its next attempt a lease ahead (so two
workers never send one at once, one that dies mid-send leaves it due again, and a slow receiver
cannot outlast the lease of deliveries still waiting behind it), sends outside any transaction,
then records the outcome. Only the status is read: the receiver's body is never downloaded.
The send goes through core/outbound.py: the host is checked again and the connection goes to
exactly the address that was checked, the whole call ends at GPUFLEET_OUTBOUND_DEADLINE_SECONDS,
and a redirect is an answer that is not 2xx. The `webhooks` queue has workers of its own, so a
receiver that drips its answer holds none of the workers that provision, wipe and repair nodes.
A receiver that does not answer 2xx is tried again on the schedule below, then the delivery is
failed; the tenant sees each attempt's status.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone
from standardwebhooks import Webhook as Signer

from core import outbound
from reservations.models import WebhookDelivery
from reservations.webhooks import allowed_address

log = logging.getLogger(__name__)
# Seconds before each retry, after the first attempt (Standard Webhooks' suggested schedule, shortened).
RETRY_AFTER = (5, 30, 300, 1800, 7200, 18000)
BATCH = 50
D = WebhookDelivery.State


def deliver_due(limit: int = BATCH) -> dict[str, int]:
    """Send what is due, at most `limit`; how many were delivered, retried and failed."""
    outcome = {"delivered": 0, "retried": 0, "failed": 0}
    for _ in range(limit):
        delivery = _claim()
        if delivery is None:
            break
        outcome[_send(delivery)] += 1
    return outcome


def send_lease() -> timedelta:
    """How long a claimed delivery is the claimer's: after that, another worker sends it."""
    return timedelta(seconds=settings.WEBHOOK_SEND_LEASE_SECONDS)


def _claim() -> WebhookDelivery | None:
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(skip_locked=True)
            .filter(state=D.PENDING, next_attempt_at__lte=Now())
            .select_related("webhook")
            .order_by("next_attempt_at")
            .first()
        )
        if delivery is not None:
            WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=Now() + send_lease())
    return delivery


def _send(delivery: WebhookDelivery) -> str:
    body = json.dumps(delivery.payload, separators=(",", ":"))
    # The process's clock, not the database's: the receiver checks the signature's time against its own.
    sent_at = timezone.now()
    status, error = None, ""
    try:
        headers = {
            "Content-Type": "application/json",
            "webhook-id": delivery.message_id,
            "webhook-timestamp": str(int(sent_at.timestamp())),
            "webhook-signature": Signer(delivery.webhook.secret).sign(delivery.message_id, sent_at, body),
        }
        status = outbound.request(
            "POST",
            delivery.webhook.url,  # checked again: the name may resolve elsewhere since it was created
            check=allowed_address(),
            deadline=settings.OUTBOUND_DEADLINE_SECONDS,
            max_body_bytes=settings.OUTBOUND_MAX_BODY_BYTES,
            headers=headers,
            body=body.encode(),
            read_body=False,  # the status is all we need: a receiver's body, however big, is not read
        ).status_code
        if not 200 <= status < 300:
            error = f"answered {status}"
    except outbound.OutboundError as failure:
        error = failure.reason[:500]
    attempts = delivery.attempts + 1
    if not error:
        fields, result = {"state": D.DELIVERED, "delivered_at": Now()}, "delivered"
    elif attempts > len(RETRY_AFTER):
        fields, result = {"state": D.FAILED}, "failed"
    else:
        fields, result = {"next_attempt_at": Now() + timedelta(seconds=RETRY_AFTER[attempts - 1])}, "retried"
    # Compare-and-set on the attempt count: a successor that claimed it after a stall wins.
    WebhookDelivery.objects.filter(pk=delivery.pk, attempts=delivery.attempts, state=D.PENDING).update(
        attempts=attempts, last_status=status, last_error=error, **fields
    )
    if error:
        log.info("webhook delivery %s to %s: %s (%s)", delivery.message_id, delivery.webhook.url, error, result)
    return result
