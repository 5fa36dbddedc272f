"""Behind the documented TLS proxy every login comes from the proxy's address: an attacker's failed
guesses must lock out only the attacker's own address, not the operator's login from everywhere, and
an X-Forwarded-For the attacker writes itself must not move its failures onto someone else."""

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-operator-passphrase-71"
PROXY = "10.0.0.9"  # the TLS proxy, as the listener sees every connection
ATTACKER = "198.51.100.66"
OPERATOR = "203.0.113.10"


@pytest.fixture
def operator(db):
    return get_user_model().objects.create_user("ops", password=PASSWORD, is_staff=True)


def through_proxy(client, password, *, client_address, header=None):
    """A login as the proxy passes it on: it appends the address it was reached from."""
    forwarded = f"{header}, {client_address}" if header else client_address
    return client.post(
        "/admin/login/",
        {"username": "ops", "password": password},
        REMOTE_ADDR=PROXY,
        HTTP_X_FORWARDED_FOR=forwarded,
    )


def lock_out_from_attacker(**header):
    attacker = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        through_proxy(attacker, "wrong-guess", client_address=ATTACKER, **header)
    return attacker


@override_settings(TRUSTED_PROXY_COUNT=1)
def test_an_attackers_failures_behind_the_proxy_do_not_lock_the_operator_out(operator):
    attacker = lock_out_from_attacker()
    assert through_proxy(attacker, PASSWORD, client_address=ATTACKER).status_code == 429
    answer = through_proxy(Client(), PASSWORD, client_address=OPERATOR)
    assert answer.status_code == 302, "the operator's own address is not locked out"


@override_settings(TRUSTED_PROXY_COUNT=1)
def test_an_address_the_attacker_forwards_itself_is_not_believed(operator):
    attacker = lock_out_from_attacker(header=OPERATOR)
    assert through_proxy(attacker, PASSWORD, client_address=ATTACKER, header="192.0.2.1").status_code == 429
    assert through_proxy(Client(), PASSWORD, client_address=OPERATOR).status_code == 302


def test_without_a_trusted_proxy_the_header_is_ignored(operator):
    attacker = Client()
    for guess in range(settings.AXES_FAILURE_LIMIT):
        through_proxy(attacker, "wrong-guess", client_address=f"192.0.2.{guess}")
    assert through_proxy(Client(), PASSWORD, client_address=OPERATOR).status_code == 429
