"""GET /v1/nodes and /v1/nodes/{name}: state, place, current step and GPUs, and no secret."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from fleet import leases
from tests.support.factories import drive


@pytest.fixture
def api(admin_user):
    """An operator signed in: the private listener's node reads need a signed-in viewer."""
    client = APIClient()
    client.force_login(admin_user)
    return client


def test_a_node_shows_its_state_place_step_and_gpus(api, node):
    drive(node, "inspection_started")
    lease = leases.claim(owner="w", node_ids=[node.pk])[0]
    leases.set_step(lease, step="wait_for_agent", actor="w")
    body = api.get(f"/v1/nodes/{node.name}").json()
    assert {k: body[k] for k in ("name", "state", "pod", "rack", "quarantine_reason", "step")} == {
        "name": "node-001",
        "state": "inspecting",
        "pod": "p1",
        "rack": "r01",
        "quarantine_reason": "",
        "step": "wait_for_agent",
    }
    assert body["step_since"] and body["state_since"]
    assert [g["index"] for g in body["gpus"]] == list(range(8))
    assert set(body["gpus"][0]) == {"index", "uuid", "model", "health"}
    assert node.bmc_password not in str(body) and "tenant" not in body


def test_the_list_is_paginated_and_filtered(api, fleet):
    drive(fleet[0], "hardware_fault", reason="XID 79")
    listing = api.get("/v1/nodes").json()
    assert set(listing) == {"count", "next", "previous", "results"} and listing["count"] == 12
    assert [n["name"] for n in api.get("/v1/nodes", {"state": "quarantined"}).json()["results"]] == ["node-001"]
    assert api.get("/v1/nodes", {"pod": "p2"}).json()["count"] == 4
    assert api.get("/v1/nodes", {"rack": "r01", "state": "enrolled"}).json()["count"] == 7
    bad = api.get("/v1/nodes", {"state": "on_fire"})
    assert bad.status_code == 400 and "on_fire" in bad.json()["detail"]


def test_the_list_costs_the_same_queries_whatever_the_fleet_size(api, fleet):
    with CaptureQueriesContext(connection) as queries:
        api.get("/v1/nodes", {"limit": 3})
    few = len(queries)
    with CaptureQueriesContext(connection) as queries:
        api.get("/v1/nodes", {"limit": 12})
    assert len(queries) == few


def test_an_unknown_node_is_404(api, db):
    answer = api.get("/v1/nodes/node-999")
    assert answer.status_code == 404 and "detail" in answer.json()


def test_huge_limits_and_offsets_are_bounded_not_errors(api, fleet):
    # found by schemathesis: a limit past a bigint was a 500
    assert api.get("/v1/nodes", {"limit": 10**30}).json()["count"] == 12
    assert api.get("/v1/nodes", {"offset": 10**30}).json()["results"] == []


def test_repeated_filters_are_ored_and_a_name_no_node_has_matches_nothing(api, fleet):
    drive(fleet[0], "hardware_fault", reason="XID 79")
    assert api.get("/v1/nodes", {"state": ["quarantined", "enrolled"]}).json()["count"] == 12
    assert api.get("/v1/nodes", {"state": ["quarantined", "available"]}).json()["count"] == 1
    assert api.get("/v1/nodes", {"pod": ["p1", "p2"]}).json()["count"] == 12
    assert api.get("/v1/nodes", {"rack": ["r02", "r99"]}).json()["count"] == 4
    assert api.get("/v1/nodes", {"pod": ["p9"]}).json()["count"] == 0
    # "null" is a name here, not django-filter's "is empty"
    assert api.get("/v1/nodes", {"pod": "null"}).json()["count"] == 0


def test_an_unknown_state_is_a_400_naming_every_unknown_state_and_those_there_are(api, fleet):
    bad = api.get("/v1/nodes", {"state": ["wiping", "on_fire", "100%s", "on_fire"]})
    assert bad.status_code == 400
    assert bad.json()["detail"] == (
        "state: unknown state 100%s, on_fire; "
        "one of enrolled, inspecting, available, provisioning, active, wiping, quarantined, maintenance"
    )


def test_the_schema_lists_the_filters_as_repeatable_parameters(api, db):
    operation = api.get("/v1/schema", HTTP_ACCEPT="application/json").json()["paths"]["/v1/nodes"]["get"]
    parameters = {p["name"]: p for p in operation["parameters"]}
    for name in ("state", "pod", "rack"):
        assert parameters[name]["in"] == "query" and parameters[name]["schema"]["type"] == "array"
        assert parameters[name]["explode"] is True and parameters[name]["style"] == "form"
    assert "quarantined" in parameters["state"]["schema"]["items"]["enum"]
