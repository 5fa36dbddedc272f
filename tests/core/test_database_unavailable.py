"""The database out of reach (no server answers, or the connection in use broke: a failover under
way) is 503 `{"detail": ...}` with Retry-After at once, on the API and the pages, never a 500; the
broken connection is dropped as the request ends, and the next request is served as usual.
tests/e2e/test_postgres_failover.py does it to a real primary and standby."""

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import close_old_connections, connection
from django.db.utils import OperationalError
from django.test import Client

from core import database_busy
from reservations.models import Tenant
from tests.support.api import tenant_client
from tests.support.connections import end_this_connection
from tests.support.ports import free_port

UNAVAILABLE = {"detail": "the database is unavailable: try again shortly"}


@contextmanager
def no_server_answers() -> Iterator[None]:
    """This thread's connection closed and pointed at a port where nothing listens, for a while."""
    before = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = free_port()
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["PORT"] = before


def assert_unavailable(answer, waited: float) -> None:
    assert answer.status_code == 503, answer.content
    assert answer.json() == UNAVAILABLE
    assert int(answer.headers["Retry-After"]) > 0
    assert waited < 2, f"answered after {waited:.1f} s"


def timed(request):
    started = time.monotonic()
    answer = request()
    return answer, time.monotonic() - started


@pytest.mark.django_db(transaction=True)
def test_an_api_request_while_no_server_answers_is_503_at_once():
    client = tenant_client("acme")
    with no_server_answers():
        assert_unavailable(*timed(lambda: client.get("/v1/reservations")))
    assert client.get("/v1/reservations").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_page_while_no_server_answers_is_503_at_once(django_user_model):
    user = django_user_model.objects.create_user("acme-admin", password="acme-password-1")
    Tenant.objects.create(name="acme", user=user)
    client = Client()
    client.force_login(user)
    with no_server_answers():
        assert_unavailable(*timed(lambda: client.get("/my/reservations")))
    assert client.get("/my/reservations").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_connection_broken_by_its_server_is_503_and_the_next_request_reconnects():
    client = tenant_client("acme")
    assert client.get("/v1/reservations").status_code == 200
    end_this_connection()
    assert_unavailable(*timed(lambda: client.get("/v1/reservations")))
    close_old_connections()  # as every request's end does (Django's test client leaves it out)
    assert client.get("/v1/reservations").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_an_error_on_a_sound_connection_is_no_outage():
    """psycopg refuses a statement with more parameters than the protocol carries: a bug, a 500,
    while the connection goes on working."""
    with pytest.raises(OperationalError) as refused, connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(["%s"] * 70_000), [0] * 70_000)
    assert database_busy.refusal(refused.value) is None
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
