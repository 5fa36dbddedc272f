"""The operators' admin: filters, GPUs inline, no secrets shown, state changes only through actions."""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME

from fleet.models import AuditEvent, Node

CHANGELIST = "/admin/fleet/node/"


def act(client, action: str, nodes, **extra):
    return client.post(
        CHANGELIST, {"action": action, ACTION_CHECKBOX_NAME: [n.pk for n in nodes], **extra}, follow=True
    )


def test_nodes_are_filterable_by_state_pod_and_rack(admin_client, fleet):
    answer = admin_client.get(CHANGELIST, {"state": "enrolled", "rack__pod__id__exact": fleet[0].rack.pod_id})
    assert answer.status_code == 200
    assert b"node-001" in answer.content
    rack2 = fleet[-1].rack
    answer = admin_client.get(CHANGELIST, {"rack__id__exact": rack2.pk})
    assert fleet[-1].name.encode() in answer.content and b"node-001<" not in answer.content
    assert b"node-001" not in admin_client.get(CHANGELIST, {"state": "active"}).content


def test_node_page_shows_gpus_and_never_the_bmc_password(admin_client, node):
    answer = admin_client.get(f"{CHANGELIST}{node.pk}/change/")
    assert answer.status_code == 200
    assert node.gpus.first().uuid.encode() in answer.content
    assert node.bmc_password.encode() not in answer.content
    assert node.bmc_password.encode() not in admin_client.get(CHANGELIST).content


def test_state_is_not_editable_in_the_form(admin_client, node):
    form = admin_client.get(f"{CHANGELIST}{node.pk}/change/").context["adminform"].form
    assert "state" not in form.fields and "tenant" not in form.fields and "bmc_password" not in form.fields


def test_quarantine_asks_a_reason_then_goes_through_the_service(admin_client, fleet):
    chosen = fleet[:2]
    answer = act(admin_client, "quarantine", chosen)
    assert b"Quarantine nodes" in answer.content and b"reason" in answer.content
    assert not Node.objects.filter(state="quarantined").exists()

    answer = act(admin_client, "quarantine", chosen, apply="Quarantine", reason="")
    assert b"This field is required" in answer.content
    assert not Node.objects.filter(state="quarantined").exists()

    act(admin_client, "quarantine", chosen, apply="Quarantine", reason="smoke from PSU")
    for node in chosen:
        node.refresh_from_db()
        assert (node.state, node.quarantine_reason) == ("quarantined", "operator_quarantine: smoke from PSU")
        row = AuditEvent.objects.filter(node=node).order_by("-id").first()
        assert row is not None
        assert (row.event, row.actor, row.reason) == ("operator_quarantine", "operator:admin", "smoke from PSU")


def test_return_to_service_goes_through_wiping(admin_client, node):
    act(admin_client, "quarantine", [node], apply="Quarantine", reason="bad fan")
    answer = act(admin_client, "return_to_service", [node])
    node.refresh_from_db()
    assert (node.state, node.quarantine_reason) == ("wiping", "")
    assert b"Applied operator_return to node-001" in answer.content


def test_an_illegal_action_is_refused_with_a_message(admin_client, node):
    answer = act(admin_client, "return_to_service", [node])
    assert b"is not allowed in state" in answer.content
    node.refresh_from_db()
    assert node.state == "enrolled"


def test_maintenance(admin_client, node):
    act(admin_client, "put_into_maintenance", [node])
    node.refresh_from_db()
    assert node.state == "maintenance"


@pytest.mark.parametrize("path", ["add/", "{pk}/delete/"])
def test_nodes_are_neither_added_nor_deleted_by_hand(admin_client, node, path):
    assert admin_client.get(CHANGELIST + path.format(pk=node.pk)).status_code == 403


def test_audit_log_is_read_only(admin_client, node):
    row = AuditEvent.objects.filter(node=node).first()
    assert row is not None
    base = "/admin/fleet/auditevent/"
    assert admin_client.get(base).status_code == 200
    assert admin_client.get(f"{base}{row.pk}/change/").status_code == 200  # view only
    assert admin_client.post(f"{base}{row.pk}/change/", {"reason": "x"}).status_code == 403
    assert admin_client.get(f"{base}{row.pk}/delete/").status_code == 403
    assert admin_client.get(f"{base}add/").status_code == 403
