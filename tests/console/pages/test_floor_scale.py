"""The fleet floor's cost does not grow with the fleet (issue #38): as many queries at 400 nodes
as at 40, whole or filtered, tiled or collapsed; and the counts it keeps per process move with
every change of a node's state and of the topology."""

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from console.pages.selectors import floor
from fleet.models import Node
from tests.support.factories import drive, enrol_default_fleet

PATHS = ["/", "/?pod=p1", "/?rack=r01", "/?state=quarantined&state=maintenance"]


@pytest.fixture
def operator(django_user_model) -> Client:
    """An operator signed in: the floor is for signed-in viewers on the private listener."""
    client = Client()
    client.force_login(django_user_model.objects.create_user("olga-operator", is_staff=True))
    return client


def queries(client: Client, path: str) -> list[str]:
    client.get(path)  # what is kept per process is read at the first request after a change
    with CaptureQueriesContext(connection) as captured:
        assert client.get(path).status_code == 200
    return [query["sql"] for query in captured]


def legend(html: str, entry: str) -> int:
    found = re.search(rf'data-legend="{entry}">.*?<strong>(\d+)</strong>', html)
    assert found is not None
    return int(found.group(1))


def test_the_floor_runs_as_many_queries_at_400_nodes_as_at_40(operator, db, monkeypatch):
    monkeypatch.setattr(floor, "COLLAPSE_ABOVE", 100)  # 40 nodes on screen are tiles, 400 are bars
    enrol_default_fleet(40)
    drive(Node.objects.get(name="node-007"), "operator_quarantine", reason="fan")
    small = {path: len(queries(operator, path)) for path in PATHS}
    enrol_default_fleet(400)
    drive(Node.objects.get(name="node-300"), "operator_quarantine", reason="fan")

    html = operator.get("/").content.decode()
    assert 'class="racks collapsed"' in html and len(re.findall(r'class="rack-bar" data-rack="', html)) == 50
    assert 'title="r38: 1 quarantined, 7 enrolled"' in html
    assert re.findall(r'data-node="([^"]+)"', html) == ["node-007", "node-300"]  # out of service, listed
    assert {path: len(queries(operator, path)) for path in PATHS} == small


# The scan that counts the fleet's nodes by rack and state.
COUNTING = 'SELECT "fleet_node"."rack_id" AS "rack_id", "fleet_node"."state" AS "state", COUNT('


def floor_counting(client: Client) -> tuple[str, bool]:
    """The floor's HTML, and whether it counted the fleet for it."""
    with CaptureQueriesContext(connection) as captured:
        html = client.get("/").content.decode()
    return html, any(query["sql"].startswith(COUNTING) for query in captured)


@pytest.mark.django_db(transaction=True)
def test_the_counts_kept_per_process_move_with_a_state_and_with_enrolment(operator):
    enrol_default_fleet(16)
    html, counted = floor_counting(operator)
    assert legend(html, "enrolled") == 16 and counted
    html, counted = floor_counting(operator)  # nothing changed: the kept counts
    assert legend(html, "enrolled") == 16 and not counted

    drive(Node.objects.get(name="node-003"), "operator_quarantine", reason="fan")
    html, counted = floor_counting(operator)
    assert (legend(html, "enrolled"), legend(html, "quarantined"), counted) == (15, 1, True)

    enrol_default_fleet(24)  # a third rack
    html, counted = floor_counting(operator)
    assert legend(html, "enrolled") == 23 and 'data-rack="r03"' in html and counted
    assert re.findall(r'data-node="([^"]+)" data-state="quarantined"', html) == ["node-003"]
