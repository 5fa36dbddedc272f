"""Idempotency-Key on POST /v1/reservations: a retry gets the first answer, never a second reservation."""

import functools
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from reservations import services
from reservations.models import IdempotencyKey, Reservation
from tests.support.api import post, tenant_client
from tests.support.concurrency import at_once
from tests.support.factories import enrol_default_fleet, make_available

BODY = {"node_count": 2, "pod": "p1"}


def reserve(client, body=BODY, key="retry-7f3a"):
    return post(client, "/v1/reservations", body, HTTP_IDEMPOTENCY_KEY=key)


def test_a_retry_with_the_same_key_gets_the_first_answer_and_makes_no_second_reservation(acme, available_fleet):
    first = reserve(acme)
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    again = reserve(acme, {"pod": "p1", "node_count": 2})  # the same body, its names in another order
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Reservation.objects.count() == 1
    assert reserve(acme, key="another-key").status_code == 201  # a new key is a new request
    assert Reservation.objects.count() == 2


def test_the_same_key_with_another_body_is_422_and_says_so(acme, available_fleet):
    assert reserve(acme).status_code == 201
    answer = reserve(acme, {"node_count": 3, "pod": "p1"})
    assert answer.status_code == 422
    assert "Idempotency-Key" in answer.json()["detail"] and "another request body" in answer.json()["detail"]
    assert Reservation.objects.count() == 1


def test_keys_are_per_tenant(acme, globex, available_fleet):
    mine, theirs = reserve(acme), reserve(globex)
    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["id"] != theirs.json()["id"]


def test_a_refusal_is_answered_again_to_a_retry_and_a_bad_request_keeps_nothing(acme, available_fleet):
    refused = reserve(acme, {"node_count": 40}, key="big")
    assert refused.status_code == 409
    retry = reserve(acme, {"node_count": 40}, key="big")
    assert retry.status_code == 409 and retry.json() == refused.json()
    assert retry.headers["Idempotent-Replayed"] == "true"

    bad = reserve(acme, {"node_count": 1, "starts_at": "2000-01-01T00:00:00Z", "ends_at": "2000-01-02T00:00:00Z"})
    assert bad.status_code == 400
    assert reserve(acme, {"node_count": 1}).status_code == 201  # the key is still free: nothing was decided


def test_a_key_is_forgotten_after_a_day(acme, available_fleet):
    first = reserve(acme)
    IdempotencyKey.objects.update(created_at=timezone.now() - timedelta(hours=25))
    later = reserve(acme)
    assert later.status_code == 201 and later.json()["id"] != first.json()["id"]
    IdempotencyKey.objects.update(created_at=timezone.now() - timedelta(hours=25))
    services.reconcile_reservations()
    assert not IdempotencyKey.objects.exists()


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9"])
def test_a_key_that_is_not_1_to_255_printable_ascii_characters_is_400(acme, available_fleet, key):
    answer = reserve(acme, key=key)
    assert answer.status_code == 400 and "Idempotency-Key" in answer.json()["detail"]
    assert not Reservation.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_key_make_one_reservation():
    make_available(enrol_default_fleet(12))
    clients = [tenant_client("acme") for _ in range(8)]
    answers = []

    def retry(client):
        answers.append(reserve(client))

    at_once(*(functools.partial(retry, client) for client in clients))

    assert [a.status_code for a in answers] == [201] * 8
    assert len({a.json()["id"] for a in answers}) == 1
    assert Reservation.objects.count() == 1
    assert sum(a.headers.get("Idempotent-Replayed") == "true" for a in answers) == 7


def test_the_openapi_document_shows_the_idempotency_key_header(db):
    schema = APIClient().get("/v1/schema", {"format": "json"}).json()
    create = schema["paths"]["/v1/reservations"]["post"]
    (header,) = [p for p in create["parameters"] if p["in"] == "header"]
    assert header["name"] == "Idempotency-Key" and not header.get("required", False)
    assert {"409", "422", "429"} <= set(create["responses"])
