"""A fabric drift put back is an incident: found by a read-back, put back, with the window it was
open, on the incidents page and its replay; told from the fabric_drift_repaired rows written here."""

import re
from datetime import timedelta

import pytest

from console.pages import selectors
from console.pages.disclosure import Disclosure, PublicDisclosure
from core import clock
from fleet.models import AuditEvent, AuditOnlyEvent, Node


@pytest.fixture
def client(admin_client):
    return admin_client


def drift_repaired(node: Node, *, found_before: timedelta | None, since_before: timedelta | None = None) -> AuditEvent:
    """The syncer's row: the node's port found on acme's VLAN 1001 and put back on its own 1002,
    `found_before` it was written (None: by its own read-back), after a read-back `since_before`
    that found the port right (None: not recorded)."""
    repaired_at = clock.now()
    detail: dict = {"fabric": "ethernet", "ports": [{"port": "swp3", "found": "1001"}], "put_back_on": "1002"}
    if found_before is not None:
        detail["found_at"] = (repaired_at - found_before).isoformat()
    if since_before is not None:
        detail["since"] = (repaired_at - since_before).isoformat()
    return AuditEvent.objects.create(
        node=node,
        at=repaired_at,
        actor="system:fabric-sync",
        event=AuditOnlyEvent.FABRIC_DRIFT_REPAIRED,
        reason="ethernet: swp3 found on 1001",
        detail=detail,
    )


def tiles(html: str) -> dict[str, str]:
    return dict(re.findall(r'data-node="([^"]+)" data-state="([^"]+)"', html))


def incident_html(client, key: str) -> str:
    html = client.get("/incidents").content.decode()
    incident = html[html.index(f'data-incident="{key}"') :]
    return incident[: incident.index("</article>")]


def test_a_drift_put_back_is_found_then_put_back_with_its_window(client, active_node):
    row = drift_repaired(active_node, found_before=timedelta(seconds=2.5))

    incident = incident_html(client, f"fabric-{row.pk}")
    assert f"fabric drift on {active_node.name}: ethernet swp3 found on 1001" in incident
    assert ">repaired</strong>" in incident and 'data-window="2.500"' in incident and "window 2.5 s" in incident
    assert re.findall(r'<li class="(done|waiting)" data-step="(\w+)">', incident) == [
        ("done", "found"),
        ("done", "put_back"),
    ]
    assert '<span class="step-detail">on 1002</span>' in incident


def test_a_drift_whose_repair_names_no_finding_time_was_found_by_that_read_back(active_node):
    row = drift_repaired(active_node, found_before=None)

    (found,) = selectors.incidents(disclosure=Disclosure())
    assert found.key == f"fabric-{row.pk}" and found.window == timedelta(0)
    assert [(step.name, step.at) for step in found.steps] == [("found", row.at), ("put_back", row.at)]


def test_a_drift_is_open_from_the_read_back_before_that_found_its_port_right(active_node):
    row = drift_repaired(active_node, found_before=timedelta(seconds=0.5), since_before=timedelta(seconds=30.5))

    (found,) = selectors.incidents(disclosure=Disclosure())
    assert found.window == timedelta(seconds=30.5) and found.steps[0].at == row.at - timedelta(seconds=0.5)


def test_the_replay_steps_from_before_the_drift_to_the_port_put_back(client, active_node):
    row = drift_repaired(active_node, found_before=timedelta(seconds=1))
    url = f"/incidents/fabric-{row.pk}/replay"

    first = client.get(url).content.decode()
    assert "before the incident" in first and "window 1.0 s" in first
    last_step = int(re.findall(r"step \d+ of (\d+)", first)[0])
    last = client.get(f"{url}?step={last_step}").content.decode()
    current = re.search(r'<li aria-current="step" class="current">(.*?)</li>', last, re.S)
    assert current is not None and current.group(1).rstrip().endswith("put back on 1002</a>")
    assert "found ethernet swp3 on 1001" in last
    assert tiles(last)[active_node.name] == "active"  # a drift moves no node's state


def test_an_infiniband_drift_names_each_guid_found_on_another_partition(active_node):
    AuditEvent.objects.create(
        node=active_node,
        actor="system:fabric-sync",
        event=AuditOnlyEvent.FABRIC_DRIFT_REPAIRED,
        reason="infiniband: ...",
        detail={
            "fabric": "infiniband",
            "ports": [{"port": "b8cef60300000001", "found": "0x1001"}, {"port": "b8cef60300000002", "found": ""}],
            "put_back_on": "0x1002",
        },
    )

    (found,) = selectors.incidents(disclosure=PublicDisclosure())
    drifted = "b8cef60300000001 found on 0x1001, b8cef60300000002 found on none"
    assert found.title == f"fabric drift on {active_node.name}: infiniband {drifted}"
    assert [step.detail for step in found.steps][-1] == "on 0x1002"
