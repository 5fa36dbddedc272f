"""The tenants' API: shapes of DESIGN.md, tenants kept apart, and bad input refused as JSON 4xx."""

from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from rest_framework.test import APIClient

from reservations.models import Tenant
from tests.support.api import post
from tests.support.factories import tenant_token


def test_create_tenant_prints_a_new_key_alone_on_its_last_line_and_never_an_earlier_one(db):
    first = tenant_token("acme")
    out = StringIO()
    call_command("create_tenant", "acme", stdout=out)  # a second run finds the organisation
    second = out.getvalue().strip().splitlines()[-1]
    assert first.startswith("gf_") and second.startswith("gf_") and first != second
    assert first not in out.getvalue()
    for key in (first, second):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        assert client.get("/v1/reservations").status_code == 200
    assert Tenant.objects.get(name="acme").api_keys.filter(organisation_key=True).count() == 2


def test_reserve_list_show_and_release(acme, available_fleet):
    created = post(acme, "/v1/reservations", {"node_count": 2, "pod": "p1"})
    assert created.status_code == 201, created.content
    body = created.json()
    assert set(body) >= {"id", "state", "node_count", "pod", "rack_scale", "nodes", "starts_at", "ends_at"}
    assert (body["state"], body["node_count"], body["pod"], body["rack_scale"]) == ("provisioning", 2, "p1", False)
    assert len(body["nodes"]) == 2
    # no ends_at: until released, at most the maximum duration (GPUFLEET_MAX_RESERVATION_DAYS)
    lasts = datetime.fromisoformat(body["ends_at"]) - datetime.fromisoformat(body["starts_at"])
    assert lasts == timedelta(days=settings.MAX_RESERVATION_DAYS)

    listing = acme.get("/v1/reservations").json()
    assert set(listing) == {"count", "next", "previous", "results"}
    assert listing["count"] == 1 and listing["results"][0]["id"] == body["id"]
    assert acme.get(f"/v1/reservations/{body['id']}").json()["nodes"] == body["nodes"]

    released = post(acme, f"/v1/reservations/{body['id']}/release", {})
    assert released.status_code == 200 and released.json()["state"] == "released"
    assert released.json()["nodes"] == []


def test_a_reservation_that_cannot_be_placed_is_409_with_the_reason(acme, available_fleet):
    answer = post(acme, "/v1/reservations", {"node_count": 40})
    assert answer.status_code == 409
    assert "40" in answer.json()["detail"]


def test_rack_scale_takes_whole_racks(acme, available_fleet):
    answer = post(acme, "/v1/reservations", {"node_count": 8, "rack_scale": True})
    assert answer.status_code == 201
    assert answer.json()["nodes"] == [f"node-{i:03d}" for i in range(1, 9)]  # all of r01
    assert post(acme, "/v1/reservations", {"node_count": 3, "rack_scale": True}).status_code == 409


def test_tenants_see_only_their_own(acme, globex, available_fleet):
    mine = post(acme, "/v1/reservations", {"node_count": 1}).json()
    assert globex.get(f"/v1/reservations/{mine['id']}").status_code == 404
    assert post(globex, f"/v1/reservations/{mine['id']}/release", {}).status_code == 404
    assert globex.get("/v1/reservations").json()["count"] == 0


def test_no_token_is_401_and_a_bad_token_too(db):
    assert APIClient().get("/v1/reservations").status_code == 401
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token nope")
    answer = client.get("/v1/reservations")
    assert answer.status_code == 401 and "detail" in answer.json()


def test_capacity_per_pod(available_fleet, acme):
    post(acme, "/v1/reservations", {"node_count": 1, "pod": "p1"})
    answer = APIClient().get("/v1/capacity")
    assert answer.status_code == 200
    pods = answer.json()["pods"]
    assert [{k: v for k, v in pod.items() if k != "domains"} for pod in pods] == [
        {"name": "p1", "nodes": 8, "available": 7, "free_open_ended": 7, "whole_free_racks": 0},
        {"name": "p2", "nodes": 4, "available": 4, "free_open_ended": 4, "whole_free_racks": 1},
    ]
    # The fabric below each pod: its leaves, then its racks (NVLink domains).
    assert pods[0]["domains"] == [
        {
            "level": "leaf",
            "name": "p1-leaf1",
            "nodes": 8,
            "available": 7,
            "children": [{"level": "nvlink_domain", "name": "r01", "nodes": 8, "available": 7, "children": []}],
        }
    ]
    assert [(d["name"], d["available"], d["children"][0]["name"]) for d in pods[1]["domains"]] == [
        ("p2-leaf1", 4, "r02")
    ]


@pytest.mark.parametrize(
    ("body", "status", "names"),
    [
        ("{not json", 400, "JSON"),
        ('["node_count", 1]', 400, "object"),
        ({"node_count": "two"}, 400, "node_count"),
        ({"node_count": "2"}, 400, "node_count"),
        ({"node_count": True}, 400, "node_count"),
        ({"node_count": -1}, 400, "node_count"),
        ({"node_count": 0}, 400, "node_count"),
        ({}, 400, "node_count"),
        ({"node_count": 1, "rack_scale": "yes"}, 400, "rack_scale"),
        ({"node_count": 1, "pod": "p9"}, 400, "pod"),
        ({"node_count": 1, "colour": "red"}, 400, "colour"),
        ({"node_count": 1, "starts_at": "yesterday"}, 400, "starts_at"),
        ({"node_count": 1, "starts_at": "2030-01-02T00:00:00Z", "ends_at": "2030-01-01T00:00:00Z"}, 400, "ends_at"),
        ({"node_count": 1, "ends_at": "2001-01-01T00:00:00Z"}, 400, "ends_at"),
    ],
)
def test_bad_input_is_a_json_4xx_naming_the_field(acme, fleet, body, status, names):
    answer = post(acme, "/v1/reservations", body)
    assert answer.status_code == status, answer.content
    assert names in answer.json()["detail"]


def test_an_oversized_body_is_413(acme, db):
    answer = post(acme, "/v1/reservations", {"node_count": 1, "padding": "x" * 300_000})
    assert answer.status_code == 413 and "limit" in answer.json()["detail"]


def test_unknown_paths_and_methods_are_json(acme, db):
    missing = acme.get("/v1/nowhere")
    assert missing.status_code == 404 and missing.json() == {"detail": "not found"}
    wrong = acme.put("/v1/reservations", "{}", content_type="application/json")
    assert wrong.status_code == 405 and "detail" in wrong.json()
    assert acme.get("/v1/reservations/12345").status_code == 404
