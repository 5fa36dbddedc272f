"""`gpufleet` on the lifecycle's newer answers: GET /v1/usage, the 409's earliest-fit offer,
"wait": true on a reserve, and PATCH with node_count / release_nodes."""

from __future__ import annotations

import json
from datetime import datetime

import requests

from fleet.models import Node
from reservations.models import Reservation
from tests.support.factories import bring_up


def server(tenant, path: str, **params) -> dict:
    answer = requests.get(
        tenant.env["GPUFLEET_URL"] + path,
        params=params,
        headers={"Authorization": f"Token {tenant.env['GPUFLEET_TOKEN']}"},
        timeout=10,
    )
    return answer.json()


def fill_the_fleet(tenant) -> None:
    """Every node held for the next two hours: p1's 8 and p2's 4."""
    for pod, count in (("p1", 8), ("p2", 4)):
        completed = tenant.run("reserve", "--nodes", str(count), "--pod", pod, "--hours", "2")
        assert completed.returncode == 0, completed.stderr


def test_usage_prints_every_numeric_key_per_reservation_per_member_and_the_total(acme, available_fleet, broker):
    assert acme.run("reserve", "--nodes", "2", "--pod", "p1").returncode == 0
    reservation = Reservation.objects.get()
    bring_up(reservation)

    completed = acme.run("usage")
    assert completed.returncode == 0, completed.stderr
    header, *rows = [line.split() for line in completed.stdout.splitlines()]
    assert header[:2] == ["RESERVATION", "USER"]
    assert {"NODE_SECONDS_ACTIVE", "NODE_SECONDS_DEGRADED"} <= set(header)
    # Made with the key of acme's admin (tests/client/conftest.py): the member who made it.
    assert [row[:2] for row in rows] == [
        [str(reservation.pk), "acme-admin"],
        ["member", "acme-admin"],
        ["total", "all"],
    ]

    # a period that is over: the same answer each time it is asked
    start, end = "2026-01-01T00:00:00+00:00", datetime.now().astimezone().isoformat()
    as_json = acme.run("usage", "--from", start, "--to", end, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == server(acme, "/v1/usage", **{"from": start, "to": end})


def test_a_refusal_with_an_offer_says_the_earliest_fit(acme, available_fleet, broker):
    fill_the_fleet(acme)
    completed = acme.run("reserve", "--nodes", "4", "--hours", "1")
    assert completed.returncode == 1
    detail, offer = completed.stderr.splitlines()
    assert detail.startswith("gpufleet: ") and detail.endswith("(409)")
    assert offer.startswith("earliest fit: ") and offer.endswith("; rerun with --wait-for-capacity to queue it")

    as_json = acme.run("reserve", "--nodes", "4", "--hours", "1", "--json")
    assert as_json.returncode == 1
    body = json.loads(as_json.stdout)
    assert set(body) == {"detail", "offer"} and set(body["offer"]) == {"starts_at", "ends_at", "pod"}
    assert f" in {body['offer']['pod']}; " in offer


def test_wait_for_capacity_books_the_earliest_fit(acme, available_fleet, broker):
    fill_the_fleet(acme)
    refused = json.loads(acme.run("reserve", "--nodes", "4", "--hours", "1", "--json").stdout)
    completed = acme.run("reserve", "--nodes", "4", "--hours", "1", "--wait-for-capacity", "--json")
    assert completed.returncode == 0, completed.stderr
    queued = json.loads(completed.stdout)
    assert queued["state"] == "pending"
    assert datetime.fromisoformat(queued["starts_at"]) == datetime.fromisoformat(refused["offer"]["starts_at"])
    assert Reservation.objects.count() == 3


def test_extend_changes_the_nodes_held_and_gives_named_ones_back(acme, available_fleet, broker):
    assert acme.run("reserve", "--nodes", "2", "--pod", "p1").returncode == 0
    reservation = Reservation.objects.get()

    grown = acme.run("extend", str(reservation.pk), "--nodes", "3", "--json")
    assert grown.returncode == 0, grown.stderr
    assert json.loads(grown.stdout)["node_count"] == 3
    reservation.refresh_from_db()
    assert reservation.node_count == 3

    first = Node.objects.filter(reservation=reservation).order_by("name").first()
    assert first is not None
    leaving = first.name
    shrunk = acme.run("extend", str(reservation.pk), "--release", leaving)
    assert shrunk.returncode == 0, shrunk.stderr
    reservation.refresh_from_db()
    assert reservation.node_count == 2
    assert leaving not in server(acme, f"/v1/reservations/{reservation.pk}")["nodes"]
