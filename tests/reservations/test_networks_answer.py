"""A reservation's answer names its networks on every fabric, whether its nodes were read back on
each and what holds one back, and each machine's private address: in the list too, at no
query per reservation."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from core.topology import ETHERNET, INFINIBAND, NVLINK
from fleet.models import NetworkAttachment, Node, TenantNetwork
from fleet.network_selectors import private_addresses, reservation_networks
from fleet.services.tenant_networks import ensure_tenant_networks
from tests.support.api import post


def reserve(client, **body) -> dict:
    created = post(client, "/v1/reservations", {"node_count": 2, "pod": "p1", **body})
    assert created.status_code == 201, created.content
    return created.json()


def give_networks(reservation: dict) -> None:
    for name in reservation["nodes"]:
        ensure_tenant_networks(reservation_id=reservation["id"], node_id=Node.objects.get(name=name).pk)


def join(reservation: dict, *, confirmed: bool, problem: str = "") -> None:
    """Put its nodes on its networks as the fabric syncer would, read back or not."""
    for network in reservation_rows(reservation):
        NetworkAttachment.objects.filter(node__name__in=reservation["nodes"], fabric=network.fabric).update(
            wanted=network, confirmed=confirmed, checked_at=timezone.now(), problem=problem
        )


def reservation_rows(reservation: dict):
    return TenantNetwork.objects.filter(reservation_id=reservation["id"])


def test_a_reservation_not_given_networks_yet_has_none(acme, available_fleet):
    reserved = reserve(acme)
    answer = acme.get(f"/v1/reservations/{reserved['id']}").json()
    assert answer["networks"] == {ETHERNET: None, INFINIBAND: None, NVLINK: None}
    assert [m["private_address"] for m in answer["machines"]] == [None, None]


def test_the_answer_names_each_fabrics_network_and_each_machines_private_address(acme, available_fleet):
    reserved = reserve(acme)
    give_networks(reserved)
    answer = acme.get(f"/v1/reservations/{reserved['id']}").json()
    assert answer["networks"] == {
        ETHERNET: {
            "kind": "vlan",
            "segment": 1000,
            "vlan": 1000,
            "subnet": "10.128.0.0/24",
            "gateway": "10.128.0.1",
            "confirmed": False,
            "problem": None,
        },
        INFINIBAND: {"pkey": "0x1000", "confirmed": False, "problem": None},
        NVLINK: {"partition": f"gpufleet-r{reserved['id']}", "confirmed": False, "problem": None},
    }
    assert [(m["name"], m["private_address"]) for m in answer["machines"]] == [
        (reserved["nodes"][0], "10.128.0.2"),
        (reserved["nodes"][1], "10.128.0.3"),
    ]
    assert private_addresses(reserved["id"]) == dict(zip(reserved["nodes"], ["10.128.0.2", "10.128.0.3"], strict=True))


def test_a_network_is_confirmed_once_every_node_on_it_was_read_back_on_it(acme, available_fleet):
    reserved = reserve(acme)
    give_networks(reserved)
    join(reserved, confirmed=False, problem="UFM refused: pkey 0x1000 is not writable")
    networks = reservation_networks(reserved["id"])
    assert networks[INFINIBAND] == {
        "pkey": "0x1000",
        "confirmed": False,
        "problem": "UFM refused: pkey 0x1000 is not writable",
    }
    join(reserved, confirmed=True)
    networks = acme.get(f"/v1/reservations/{reserved['id']}").json()["networks"]
    assert all(network["confirmed"] and network["problem"] is None for network in networks.values())


def test_a_reservation_over_two_infiniband_fabrics_lists_every_pkey(acme, available_fleet):
    reserved = reserve(acme, node_count=1)
    give_networks(reserved)
    other_pod = Node.objects.filter(rack__pod__name="p2").first()
    assert other_pod is not None
    ensure_tenant_networks(reservation_id=reserved["id"], node_id=other_pod.pk)
    assert reservation_networks(reserved["id"])[INFINIBAND] == {
        "pkey": "0x1000",
        "pkeys": ["0x1000", "0x1000"],  # one in p1's fabric, one in p2's
        "confirmed": False,
        "problem": None,
    }


def test_the_list_reads_networks_for_a_whole_page_at_once(acme, available_fleet):
    for _ in range(3):
        give_networks(reserve(acme, node_count=1))

    def queries(limit: int) -> int:
        with CaptureQueriesContext(connection) as captured:
            page = acme.get(f"/v1/reservations?limit={limit}").json()["results"]
        assert len(page) == limit and all(r["networks"][ETHERNET] for r in page)
        assert all(m["private_address"] for r in page for m in r["machines"])
        return len(captured)

    assert queries(1) == queries(3)


@pytest.mark.django_db
def test_the_openapi_document_shows_networks_and_private_addresses():
    schema = APIClient().get("/v1/schema", {"format": "json"}).json()["components"]["schemas"]
    assert "networks" in schema["Reservation"]["properties"]
    assert set(schema["Networks"]["properties"]) == {ETHERNET, INFINIBAND, NVLINK}
    assert {"kind", "segment", "subnet", "gateway", "confirmed", "problem"} <= set(
        schema["EthernetNetwork"]["properties"]
    )
    assert schema["Machine"]["properties"]["private_address"]["nullable"] is True
