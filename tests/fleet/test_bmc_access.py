"""A node's BMC access: changed only with its password re-entered, audited without the password,
and only ever pointing into the BMC networks (admin, enrolment, and fleet.bmc_access itself)."""

import dataclasses
import json
from io import StringIO
from ipaddress import ip_network

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command

from core.topology import default_layout
from fleet.bmc_access import BMCAddressRefused, check_bmc_url
from fleet.inventory import records_from_layout
from fleet.models import AuditEvent, Node
from fleet.services import change_bmc_access, enrol_nodes
from tests.support.factories import drive
from tests.support.invariants import check_all

pytestmark = pytest.mark.django_db

REAL_PASSWORD = "the-bmcs-real-password-5c1e"
TYPED_PASSWORD = "what-the-operator-typed-9d07"
ELSEWHERE = "http://203.0.113.7:8443"  # TEST-NET-3: outside every default BMC network


@pytest.fixture
def bmc_node(node) -> Node:
    Node.objects.filter(pk=node.pk).update(bmc_password=REAL_PASSWORD)
    node.refresh_from_db()
    return node


@pytest.fixture
def operator(client):
    """A staff user who may change nodes, as the audit's attacker could."""
    user = get_user_model().objects.create_user("mallory", password="mallory-password-1", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=["view_node", "change_node"]))
    client.force_login(user)
    return client


def change_page(node) -> str:
    return f"/admin/fleet/node/{node.pk}/change/"


def submit(client, node, **changes):
    """Post the node's change form as the page offers it, with `changes` typed in."""
    page = client.get(change_page(node))
    form = page.context["adminform"].form
    data = {name: form.initial.get(name) or "" for name in form.fields}
    for inline in page.context["inline_admin_formsets"]:
        formset = inline.formset
        data.update({formset.management_form.add_prefix(k): v for k, v in formset.management_form.initial.items()})
        for entry in formset.forms:
            data.update({entry.add_prefix(k): getattr(v, "pk", v) for k, v in entry.initial.items()})
    return client.post(change_page(node), {**data, **changes})


def bmc_changes(node):
    return AuditEvent.objects.filter(node=node, event="bmc_changed")


def test_an_operator_who_may_change_nodes_cannot_change_the_bmc_address_without_its_password(operator, bmc_node):
    answer = submit(operator, bmc_node, redfish_url="http://10.9.9.9:8000")
    assert answer.status_code == 200
    assert "Enter the BMC&#x27;s password to change redfish_url" in answer.content.decode()
    node = Node.objects.get(pk=bmc_node.pk)
    assert (node.redfish_url, node.bmc_password) == (bmc_node.redfish_url, REAL_PASSWORD)
    assert not bmc_changes(node).exists()


@pytest.mark.parametrize("field", ["system_id", "bmc_username", "agent_url"])
def test_the_rest_of_the_bmc_access_needs_the_password_too(operator, bmc_node, field):
    value = "http://10.9.9.9/agent/x" if field == "agent_url" else "changed"
    answer = submit(operator, bmc_node, **{field: value})
    assert f"to change {field}" in answer.content.decode()
    assert getattr(Node.objects.get(pk=bmc_node.pk), field) == getattr(bmc_node, field)


def test_the_password_field_is_never_filled_in(operator, bmc_node):
    page = operator.get(change_page(bmc_node)).content.decode()
    assert REAL_PASSWORD not in page
    assert '<input type="password" name="reentered_password"' in page
    assert 'name="reentered_password" value=' not in page


def test_with_the_password_the_change_is_audited_and_no_password_is_written_anywhere(operator, bmc_node):
    answer = submit(operator, bmc_node, redfish_url="http://10.9.9.9:8000", reentered_password=TYPED_PASSWORD)
    assert answer.status_code == 302
    node = Node.objects.get(pk=bmc_node.pk)
    assert (node.redfish_url, node.bmc_password) == ("http://10.9.9.9:8000", TYPED_PASSWORD)
    (row,) = bmc_changes(node)
    assert (row.actor, row.from_state, row.to_state) == ("operator:mallory", node.state, node.state)
    assert row.detail == {
        "redfish_url": {"from": bmc_node.redfish_url, "to": "http://10.9.9.9:8000"},
        "bmc_password": "changed",
    }
    written = json.dumps([list(AuditEvent.objects.values()), list(LogEntry.objects.values())], default=str)
    assert REAL_PASSWORD not in written and TYPED_PASSWORD not in written


def test_moving_the_agent_needs_the_bmc_password_and_asks_no_agent_token(operator, bmc_node):
    """The agent's credentials are minted per boot and per tenancy: nobody types one in."""
    page = operator.get(change_page(bmc_node)).content.decode()
    assert "agent_token" not in page
    moved = "http://127.0.0.1:9411"
    answer = submit(operator, bmc_node, agent_url=moved)
    assert "Enter the BMC&#x27;s password to change agent_url." in answer.content.decode()
    assert Node.objects.get(pk=bmc_node.pk).agent_url == bmc_node.agent_url
    assert submit(operator, bmc_node, agent_url=moved, reentered_password=TYPED_PASSWORD).status_code == 302
    node = Node.objects.get(pk=bmc_node.pk)
    assert node.agent_url == moved
    (row,) = bmc_changes(node)
    assert row.detail["agent_url"]["to"] == moved


def test_the_rest_of_the_node_still_changes_without_the_password(operator, bmc_node):
    assert submit(operator, bmc_node, serial="SN-REPLACED-BOARD").status_code == 302
    node = Node.objects.get(pk=bmc_node.pk)
    assert (node.serial, node.bmc_password) == ("SN-REPLACED-BOARD", REAL_PASSWORD)
    assert not bmc_changes(node).exists()


def test_a_bmc_address_outside_the_bmc_networks_is_refused_in_the_admin(operator, bmc_node):
    for field, value in (("redfish_url", ELSEWHERE), ("agent_url", f"{ELSEWHERE}/agent/x")):
        answer = submit(operator, bmc_node, **{field: value, "reentered_password": TYPED_PASSWORD})
        assert answer.status_code == 200
        assert "outside the BMC networks" in answer.content.decode()
    node = Node.objects.get(pk=bmc_node.pk)
    assert (node.redfish_url, node.agent_url, node.bmc_password) == (
        bmc_node.redfish_url,
        bmc_node.agent_url,
        REAL_PASSWORD,
    )
    assert not bmc_changes(node).exists()


def test_a_view_only_operator_sees_the_bmc_address_but_no_password_field(client, bmc_node):
    user = get_user_model().objects.create_user("viewer", password="viewer-password-1", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_node"))
    client.force_login(user)
    page = client.get(change_page(bmc_node)).content.decode()
    assert bmc_node.redfish_url in page and "reentered_password" not in page and REAL_PASSWORD not in page


def test_bmc_changes_keep_the_audit_log_whole(bmc_node):
    """A bmc_changed row stays in the node's state, so check_invariants sees no gap."""
    for state_events in ([], ["inspection_started"], ["inspection_passed", "attestation_passed"]):
        node = drive(bmc_node, *state_events)
        change_bmc_access(
            node_id=node.pk,
            actor="test",
            redfish_url=node.redfish_url,
            system_id=node.system_id,
            bmc_username=node.bmc_username,
            bmc_password=f"{TYPED_PASSWORD}-{node.state}",
            agent_url=node.agent_url,
        )
    assert bmc_changes(bmc_node).count() == 3
    assert check_all() == []


def test_the_service_refuses_an_address_outside_the_bmc_networks(bmc_node):
    with pytest.raises(BMCAddressRefused, match=r"^203\.0\.113\.7 is outside the BMC networks"):
        change_bmc_access(
            node_id=bmc_node.pk,
            actor="test",
            redfish_url=ELSEWHERE,
            system_id=bmc_node.system_id,
            bmc_username=bmc_node.bmc_username,
            bmc_password=TYPED_PASSWORD,
            agent_url=bmc_node.agent_url,
        )
    assert Node.objects.get(pk=bmc_node.pk).redfish_url == bmc_node.redfish_url


def inventory_records(**overrides):
    return [
        dataclasses.replace(record, **overrides)
        for record in records_from_layout(default_layout(3), "http://127.0.0.1:8100")
    ]


@pytest.mark.parametrize(
    "overrides",
    [{"redfish_url": ELSEWHERE}, {"agent_url": f"{ELSEWHERE}/agent/node-001"}, {"redfish_url": "file:///etc/passwd"}],
    ids=["bmc", "agent", "scheme"],
)
def test_enrolment_refuses_a_bmc_outside_the_bmc_networks_and_enrols_nothing(overrides):
    with pytest.raises(BMCAddressRefused, match="node node-001: "):
        enrol_nodes(records=inventory_records(**overrides), actor="test")
    assert not Node.objects.exists()


def test_seed_fleet_refuses_a_fleet_pointed_outside_the_bmc_networks():
    with pytest.raises(CommandError, match=r"nothing enrolled: node node-001: 198\.51\.100\.20 is outside the BMC"):
        call_command(
            "seed_fleet", "--topology", "default", "--bmcsim-url", "http://198.51.100.20:8100", stdout=StringIO()
        )
    assert not Node.objects.exists()


def test_a_new_bmc_access_from_the_inventory_is_audited_without_the_password():
    enrol_nodes(records=inventory_records(), actor="test")
    result = enrol_nodes(records=inventory_records(bmc_username="root", bmc_password=TYPED_PASSWORD), actor="test")
    assert result.updated == 3
    rows = AuditEvent.objects.filter(event="bmc_changed")
    assert rows.count() == 3
    first = rows.first()
    assert first is not None
    assert first.detail == {"bmc_username": {"from": "admin", "to": "root"}, "bmc_password": "changed"}
    assert TYPED_PASSWORD not in json.dumps(list(rows.values()), default=str)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8100",
        "https://10.20.30.40/redfish/v1",
        "http://172.16.0.9",
        "http://192.168.1.20:8000/agent/node-001",
        "http://[::1]:8100",
        "http://[fd00::20]",
        "http://[::ffff:10.0.0.1]",
        "http://localhost:8100",
    ],
)
def test_the_default_bmc_networks_are_loopback_and_private(url):
    check_bmc_url(url)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://203.0.113.7", "outside the BMC networks"),
        ("http://[2001:db8::1]", "outside the BMC networks"),
        ("http://[::ffff:203.0.113.7]", "resolved to 203.0.113.7"),
        ("http://169.254.169.254/latest/meta-data", "outside the BMC networks"),  # a cloud's metadata service
        ("http://0.0.0.0:8100", "outside the BMC networks"),
        ("ftp://10.0.0.1", "scheme 'ftp' refused"),
        ("10.0.0.1:8100", "refused"),
        ("http://", "names no host"),
        ("http://root:calvin@10.0.0.1", "credentials in the URL refused"),
        ("http://10.0.0.1:99999", "not a usable URL"),
        ("http://no-such-bmc.invalid", "does not resolve"),
    ],
)
def test_anything_else_is_refused(url, why):
    with pytest.raises(BMCAddressRefused, match=why):
        check_bmc_url(url)


def test_a_host_name_counts_by_the_addresses_it_resolves_to(settings):
    settings.BMC_NETWORKS = (ip_network("10.0.0.0/8"),)
    with pytest.raises(BMCAddressRefused, match=r"localhost \(resolved to 127\.0\.0\.1\) is outside"):
        check_bmc_url("http://localhost:8100")
    settings.BMC_NETWORKS = (ip_network("10.0.0.0/8"), ip_network("127.0.0.0/8"))
    check_bmc_url("http://localhost:8100")
