"""A lock held elsewhere (a stuck worker, another tenant's long transaction) costs a request its
lock timeout, then a 503 `{"detail": ...}` with Retry-After: never a request that waits for ever,
nor a 500. Every connection carries the timeouts the settings give (GPUFLEET_DB_*_TIMEOUT_MS)."""

import threading
import time
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.test import Client

from reservations.models import Reservation, ReservationState, Tenant
from tests.support.api import tenant_client

LOCK_TIMEOUT_MS = 300


def test_every_connection_carries_the_configured_timeouts(db):
    with connection.cursor() as cursor:
        shown = {}
        for name in ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout"):
            cursor.execute(f"SELECT setting::int FROM pg_settings WHERE name = '{name}'")
            shown[name] = cursor.fetchone()[0]
    assert shown == {
        "statement_timeout": settings.DB_STATEMENT_TIMEOUT_MS,
        "lock_timeout": settings.DB_LOCK_TIMEOUT_MS,
        "idle_in_transaction_session_timeout": settings.DB_IDLE_IN_TRANSACTION_TIMEOUT_MS,
    }
    assert all(shown.values()), "each timeout is on by default"


@pytest.fixture
def short_lock_timeout() -> Iterator[None]:
    """This thread's connection opened again with a short lock timeout, as the setting makes it."""
    options = connection.settings_dict["OPTIONS"]
    before = options["options"]
    connection.close()
    options["options"] = f"{before} -c lock_timeout={LOCK_TIMEOUT_MS}"
    yield
    connection.close()
    options["options"] = before


class RowLock:
    """Another connection (a thread's own) holding a reservation's row lock until released."""

    def __init__(self, reservation_id: int):
        self.reservation_id = reservation_id
        self.held = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._hold)

    def _hold(self) -> None:
        try:
            with transaction.atomic():
                Reservation.objects.select_for_update().get(pk=self.reservation_id)
                self.held.set()
                self.done.wait(10)
        finally:
            connection.close()

    def __enter__(self) -> "RowLock":
        self.thread.start()
        assert self.held.wait(5), "the other connection took the lock"
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()


def timed(request):
    started = time.monotonic()
    answer = request()
    return answer, time.monotonic() - started


def assert_busy(answer, waited: float) -> None:
    assert answer.status_code == 503, answer.content
    assert answer.json() == {"detail": "the database is busy: try again shortly"}
    assert int(answer.headers["Retry-After"]) > 0
    assert waited < LOCK_TIMEOUT_MS / 1000 + 2, f"answered after {waited:.1f} s"


@pytest.mark.django_db(transaction=True)
def test_an_api_request_blocked_on_a_row_lock_answers_503_within_the_lock_timeout(short_lock_timeout):
    client = tenant_client("mallory")
    reservation = Reservation.objects.create(tenant=Tenant.objects.get(name="mallory"), node_count=1)
    with RowLock(reservation.pk):
        answer, waited = timed(lambda: client.post(f"/v1/reservations/{reservation.pk}/release"))
    assert_busy(answer, waited)
    reservation.refresh_from_db()
    assert reservation.state != ReservationState.RELEASED


@pytest.mark.django_db(transaction=True)
def test_a_page_blocked_on_a_row_lock_answers_503_within_the_lock_timeout(short_lock_timeout, django_user_model):
    user = django_user_model.objects.create_user("mallory", password="mallory-password-1")
    tenant = Tenant.objects.create(name="mallory", user=user)
    reservation = Reservation.objects.create(tenant=tenant, node_count=1)
    client = Client()
    client.force_login(user)
    with RowLock(reservation.pk):
        answer, waited = timed(lambda: client.post(f"/my/reservations/{reservation.pk}/release"))
    assert_busy(answer, waited)
    reservation.refresh_from_db()
    assert reservation.state != ReservationState.RELEASED
