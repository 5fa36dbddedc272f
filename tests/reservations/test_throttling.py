"""Per-tenant rates on the tenants' API: 429 with Retry-After past the rate, counted in Redis so
that every web process sees the same count."""

import functools

import pytest
import requests
from django.conf import settings
from django.test import override_settings
from rest_framework.test import APIClient

from tests.support.api import post, tenant_client
from tests.support.concurrency import at_once
from tests.support.factories import enrol_default_fleet, make_available, tenant_token
from tests.support.ports import free_port
from tests.support.processes import RedisServer, process_env, start_gunicorn


def rates(reads: str, writes: str):
    """Rates per day in these tests: the count's window then ends in the middle of a test once
    in a million runs, not once in a hundred."""
    return override_settings(
        REST_FRAMEWORK={
            **settings.REST_FRAMEWORK,
            "DEFAULT_THROTTLE_RATES": {"tenant_reads": reads, "tenant_writes": writes},
        }
    )


def test_a_tenant_past_its_write_rate_is_429_with_retry_after_and_others_are_not(acme, globex, available_fleet):
    with rates("100/day", "3/day"):
        for _ in range(3):
            assert post(acme, "/v1/reservations", {"node_count": 1}).status_code == 201
        over = post(acme, "/v1/reservations", {"node_count": 1})
        assert over.status_code == 429
        assert "throttled" in over.json()["detail"] and set(over.json()) == {"detail"}
        assert 0 < int(over.headers["Retry-After"]) <= 24 * 3600
        assert post(acme, "/v1/reservations/1/release", {}).status_code == 429  # releases are writes too
        assert post(globex, "/v1/reservations", {"node_count": 1}).status_code == 201  # per tenant
        assert acme.get("/v1/reservations").status_code == 200  # reads have a rate of their own


def test_a_tenant_past_its_read_rate_is_429_and_anonymous_reads_are_not_counted(acme, available_fleet):
    with rates("5/day", "100/day"):
        for _ in range(5):
            assert acme.get("/v1/reservations").status_code == 200
        assert acme.get("/v1/reservations").status_code == 429
        assert post(acme, "/v1/reservations", {"node_count": 1}).status_code == 201
        assert all(APIClient().get("/v1/capacity").status_code == 200 for _ in range(10))


@pytest.mark.django_db(transaction=True)
def test_every_web_process_counts_against_one_rate(tmp_path):
    """Two web servers (as two replicas, or two gunicorn workers) share the count in Redis: a
    cache of each process's own would let the tenant make twice as many requests."""
    make_available(enrol_default_fleet(12))
    token = tenant_token("acme")
    redis_server = RedisServer(tmp_path)  # of this test's own: no count of an earlier run in it
    env = {**process_env(tmp_path), "REDIS_URL": redis_server.url, "GPUFLEET_API_WRITE_RATE": "4/day"}
    servers = [start_gunicorn(f"web{i}", "gpufleet.wsgi", env, tmp_path, processes=1) for i in range(2)]
    try:
        statuses = [
            requests.post(
                f"{servers[i % 2][1]}/v1/reservations",
                json={"node_count": 1},
                headers={"Authorization": f"Token {token}"},
                timeout=30,
            ).status_code
            for i in range(8)
        ]
    finally:
        for server, _ in servers:
            server.stop()
        redis_server.stop()
    assert statuses == [201] * 4 + [429] * 4


def test_with_redis_down_requests_are_answered_not_throttled(acme, available_fleet):
    """The API keeps working through a Redis outage, as it did before it had throttles."""
    unreachable = {**settings.CACHES["default"], "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}
    with rates("1/day", "1/day"), override_settings(CACHES={"default": unreachable}):
        assert [acme.get("/v1/reservations").status_code for _ in range(3)] == [200] * 3
        assert post(acme, "/v1/reservations", {"node_count": 1}).status_code == 201


@pytest.mark.django_db(transaction=True)
def test_requests_in_flight_together_are_each_counted():
    """A count read and written back whole (DRF's own throttle) lets requests that arrive
    together overwrite each other's: a tenant with many connections would get many times its rate."""
    clients = [tenant_client("acme") for _ in range(12)]
    statuses = []

    def release_nothing(client):
        statuses.append(post(client, "/v1/reservations/999999/release", {}).status_code)

    with rates("100/day", "5/day"):
        at_once(*(functools.partial(release_nothing, client) for client in clients))
    assert sorted(statuses) == [404] * 5 + [429] * 7
