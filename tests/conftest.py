"""Shared fixtures: a small enrolled fleet and named tenants, on the real PostgreSQL, and the
tests' own Redis broker."""

import gc
import os

import hypothesis
import pytest
import redis
from django.conf import settings

from fleet.models import Node
from reservations.models import Reservation, Tenant
from tests.support.examples import examples
from tests.support.factories import drive, enrol_default_fleet, make_available
from tests.support.test_database import copy_of_migrated_database, drop_copy

# No example has a deadline, and slow generation is no failure: these machines are shared and
# noisy, and a test that fails for the time it took is a timed assertion (bench/ measures speed).
# Hypothesis's hundred examples, or the inner loop's share of them (tests/support/examples.py).
hypothesis.settings.register_profile(
    "shared-machines",
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
    max_examples=examples(100),
)
hypothesis.settings.load_profile("shared-machines")


def pytest_sessionstart(session):
    """Each test process collects garbage less often: what it imported is frozen out of the
    collector's sight, and the youngest objects are looked at every 50,000 allocations, not 700
    (the ORM makes many short-lived ones): 10-15% less CPU for about 10 MB more memory."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment, django_db_blocker, django_db_modify_db_settings):
    """pytest-django's, but each process's database is a copy of one migrated template."""
    with django_db_blocker.unblock():
        name_before = copy_of_migrated_database(os.environ.get("PYTEST_XDIST_WORKER", "main"))
    yield
    with django_db_blocker.unblock():
        drop_copy(name_before)


@pytest.fixture
def fleet(db) -> list[Node]:
    return enrol_default_fleet()


@pytest.fixture
def node(fleet) -> Node:
    return fleet[0]


@pytest.fixture
def alice(db) -> Tenant:
    return Tenant.objects.create(name="alice")


@pytest.fixture
def bob(db) -> Tenant:
    return Tenant.objects.create(name="bob")


@pytest.fixture
def alices_reservation(alice) -> Reservation:
    return Reservation.objects.create(tenant=alice, node_count=1)


@pytest.fixture
def available_fleet(fleet) -> list[Node]:
    """The 12-node fleet, inspected and attested: p1 is rack r01 (8 nodes), p2 is r02 (4 nodes)."""
    return make_available(fleet)


@pytest.fixture
def available_node(node) -> Node:
    return drive(node, "inspection_started", "inspection_passed", "attestation_passed")


@pytest.fixture
def active_node(available_node, alices_reservation) -> Node:
    return drive(available_node, "provision_requested", "provision_succeeded", reservation=alices_reservation)


@pytest.fixture
def broker():
    """The tests' broker, empty before and after the test: what this process enqueues lands there."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.flushdb()
    yield client
    client.flushdb()
