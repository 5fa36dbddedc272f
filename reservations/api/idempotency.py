"""Idempotency-Key on POST /v1/reservations: a retry gets the first answer, never a second reservation.

A tenant's key is remembered for IDEMPOTENCY_KEY_LIFETIME with the request's digest and the
first answer (a created reservation, 201, or a refusal, 409). A retry with the same key and
body is answered from the record, marked `Idempotent-Replayed: true`; with another body it is
422. A bad request (400) or an error keeps nothing, so the key may be used again. Retries that
arrive together queue on a transaction-level advisory lock for (tenant, key): the first makes
the reservation and records it in the same transaction, the others then find the record. The
unique constraint on (tenant, key) stays the last word.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from django.db import connection, transaction
from django.db.models.functions import Now
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions, status
from rest_framework.response import Response

from reservations.models import IDEMPOTENCY_KEY_LIFETIME, IdempotencyKey, Tenant

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
# The first of pg_advisory_xact_lock's two int keys: a namespace of this module's own. (The
# single bigint keys, such as remediation's cap lock, are another key space.)
LOCK_NAMESPACE = 0x1DE4
STORED_STATUSES = (status.HTTP_201_CREATED, status.HTTP_409_CONFLICT)

PARAMETER = OpenApiParameter(
    HEADER,
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description=(
        "Any unique string of 1 to 255 printable ASCII characters, such as a UUID. A retry with the same key "
        "within 24 hours gets the first answer (201 or 409) with `Idempotent-Replayed: true`, and never makes "
        "a second reservation; the same key with another body is 422."
    ),
)


class KeyReused(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_key_reused"


def key_of(request) -> str | None:
    """The request's Idempotency-Key, None if it has none; 400 if it is not one."""
    key = request.headers.get(HEADER)
    if key is None:
        return None
    if not 0 < len(key) <= MAX_KEY_LENGTH or not (key.isascii() and key.isprintable()):
        raise exceptions.ValidationError({HEADER: [f"must be 1 to {MAX_KEY_LENGTH} printable ASCII characters"]})
    return key


def digest(body) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def answer_once(*, tenant: Tenant, key: str, body, answer: Callable[[], Response]) -> Response:
    """`answer()`'s response, recorded under (tenant, key); or the recorded one, for a retry."""
    request_digest = digest(body)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [LOCK_NAMESPACE, f"{tenant.pk}:{key}"])
        mine = IdempotencyKey.objects.filter(tenant=tenant, key=key)
        mine.filter(created_at__lte=Now() - IDEMPOTENCY_KEY_LIFETIME).delete()
        first = mine.first()
        if first is not None:
            if first.request_digest != request_digest:
                raise KeyReused(
                    f"{HEADER} {key!r} was first used with another request body; use a new key for a new request"
                )
            return Response(first.answer, status=first.status, headers={"Idempotent-Replayed": "true"})
        response = answer()
        if response.status_code in STORED_STATUSES:
            IdempotencyKey.objects.create(
                tenant=tenant, key=key, request_digest=request_digest, status=response.status_code, answer=response.data
            )
        return response
