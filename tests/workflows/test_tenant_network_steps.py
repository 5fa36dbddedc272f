"""A node's networks through its life, without the fabrics: joined only while it serves, taken off
in the transition that ends its service and held out of placement (its reason on the node API)
until a read-back confirms it, and a wipe that waits for that without its deadline running."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from fleet import leases
from fleet.models import AuditEvent, NetworkAttachment, Node
from fleet.services import network_attachments, tenant_networks
from fleet.services.network_attachments import Readback, record_readback
from fleet.workflow_steps import StepName
from reservations.selectors import nodes_cut_off
from tests.support.factories import drive
from tests.support.fake_hardware import FakeAgent, FakeBMC
from workflows.clients import Clients
from workflows.node_workflows import run_workflow
from workflows.node_workflows.engine import deadline_runs_since


@pytest.fixture
def serving(available_node, alices_reservation) -> Node:
    node = drive(available_node, "provision_requested", reservation=alices_reservation)
    wanted = tenant_networks.ensure_tenant_networks(reservation_id=alices_reservation.pk, node_id=node.pk)
    assert network_attachments.want_tenant_networks(node_id=node.pk, networks=wanted.networks) == 3
    return node


def read_back(node: Node, *, found: dict[str, str] | None = None) -> None:
    """What a sync records after reading the node's ports back: each where it should be, or `found`."""
    readbacks = []
    for attachment in NetworkAttachment.objects.filter(node=node).select_related("wanted"):
        should = attachment.wanted.value if attachment.wanted else ("10" if attachment.fabric == "ethernet" else "")
        now = (found or {}).get(attachment.fabric, should)
        readbacks.append(Readback(attachment.pk, attachment.changed_at, found=now, confirmed=now == should))
        record_readback(fabric=attachment.fabric, readbacks=readbacks[-1:])


@pytest.fixture
def operator(admin_user) -> APIClient:
    client = APIClient()
    client.force_login(admin_user)
    return client


def test_only_a_serving_node_is_put_on_its_reservations_networks(available_node, alices_reservation):
    wanted = tenant_networks.ensure_tenant_networks(reservation_id=alices_reservation.pk, node_id=available_node.pk)
    assert network_attachments.want_tenant_networks(node_id=available_node.pk, networks=wanted.networks) == 0
    assert not NetworkAttachment.objects.filter(node=available_node, wanted__isnull=False).exists()


def test_wanting_the_same_networks_again_keeps_what_was_confirmed(serving, alices_reservation):
    read_back(serving)
    assert network_attachments.networks_confirmed(node_id=serving.pk)
    wanted = tenant_networks.ensure_tenant_networks(reservation_id=alices_reservation.pk, node_id=serving.pk)
    assert network_attachments.want_tenant_networks(node_id=serving.pk, networks=wanted.networks) == 0
    assert network_attachments.networks_confirmed(node_id=serving.pk)


def test_a_read_back_of_a_wanted_since_changed_confirms_nothing(serving):
    attachment = NetworkAttachment.objects.select_related("wanted").get(node=serving, fabric="ethernet")
    assert attachment.wanted is not None
    stale = Readback(attachment.pk, attachment.changed_at, found=attachment.wanted.value, confirmed=True)
    drive(Node.objects.get(pk=serving.pk), "released")  # taken off while the sync was out reading
    record_readback(fabric="ethernet", readbacks=[stale])
    assert not NetworkAttachment.objects.get(pk=attachment.pk).confirmed


def test_a_node_that_stops_serving_is_held_out_of_placement_with_its_reason_until_read_back(serving, operator):
    read_back(serving)
    assert network_attachments.hold_reasons() == {}
    node = drive(Node.objects.get(pk=serving.pk), "released")
    assert not NetworkAttachment.objects.filter(node=node, wanted__isnull=False).exists()
    reason = network_attachments.hold_reasons()[node.pk]
    assert reason.startswith("network_cleanup_pending: ethernet: found on ")
    assert nodes_cut_off()[node.pk] == reason  # placement, offers and capacity keep off it
    assert operator.get(f"/v1/nodes/{node.name}").json()["hold_reason"] == reason
    with CaptureQueriesContext(connection) as page:
        listed = operator.get("/v1/nodes").json()["results"]
    assert {n["name"]: n["hold_reason"] for n in listed if n["hold_reason"]} == {node.name: reason}
    assert sum("fleet_networkattachment" in q["sql"] for q in page.captured_queries) == 1  # one read for the page

    read_back(node)
    assert network_attachments.hold_reasons() == {} and node.pk not in nodes_cut_off()


def test_a_problem_is_the_reason_a_node_is_held(serving):
    read_back(serving)
    node = drive(Node.objects.get(pk=serving.pk), "released")
    attachment = NetworkAttachment.objects.get(node=node, fabric="infiniband")
    down = Readback(attachment.pk, attachment.changed_at, found=None, confirmed=False, problem="infiniband: p1: 503")
    record_readback(fabric="infiniband", readbacks=[down])
    assert "infiniband: p1: 503" in network_attachments.hold_reasons()[node.pk]


def test_a_node_never_on_a_tenants_network_is_not_held(fleet):
    assert network_attachments.hold_reasons() == {}
    assert not network_attachments.removal_pending(node_id=fleet[0].pk)


class WipingAgent(FakeAgent):
    def gpu_wipe_state(self) -> str:
        return "running"  # for ever: the run parks at wait_for_gpu_wipe


def test_the_wipe_waits_at_leave_tenant_networks_past_its_deadline_then_counts_it_from_there(serving, settings):
    settings.WIPE_DEADLINE = 0  # any time in wiping is past it
    settings.WORKFLOW_HOLD_SECONDS = 0  # park at once
    read_back(serving)
    node = drive(Node.objects.get(pk=serving.pk), "released")
    clients = Clients(bmc=lambda node: FakeBMC([]), agent=WipingAgent)

    def again() -> str:
        Node.objects.filter(pk=node.pk).update(lease_expires_at=timezone.now())  # the park's hold over
        return run_workflow(node_id=node.pk, worker="w", clients=clients)

    assert run_workflow(node_id=node.pk, worker="w", clients=clients) == "waiting at leave_tenant_networks"
    assert again() == "waiting at leave_tenant_networks"  # no deadline while it waits there
    assert deadline_runs_since(Node.objects.get(pk=node.pk)) is None

    read_back(node)  # the removal read back: the wipe goes on
    settings.WIPE_DEADLINE = 3600
    assert again() == "waiting at join_provisioning_network"  # rebooted, its port back on the provisioning VLAN
    read_back(node)
    assert again() == "waiting at wait_for_gpu_wipe"
    settings.WIPE_DEADLINE = 0  # now past it, counted from the first step after leaving
    assert again().startswith("wipe_failed")
    failed = AuditEvent.objects.filter(node=node, event="wipe_failed").get()
    assert "deadline 0s" in failed.reason


def test_the_wipe_deadline_runs_from_the_first_step_past_leaving(serving):
    read_back(serving)
    node = drive(Node.objects.get(pk=serving.pk), "released")
    lease = leases.claim(owner="w", node_ids=[node.pk])[0]
    leases.set_step(lease, step=StepName.LEAVE_TENANT_NETWORKS, actor="w")
    assert deadline_runs_since(Node.objects.get(pk=node.pk)) is None
    leases.set_step(lease, step=StepName.BOOT_SERVICE_IMAGE, actor="w")
    first_past = AuditEvent.objects.filter(node=node, reason=StepName.BOOT_SERVICE_IMAGE).get().at
    leases.set_step(lease, step=StepName.LEAVE_TENANT_NETWORKS, actor="w")  # a run that started over
    leases.set_step(lease, step=StepName.BOOT_SERVICE_IMAGE, actor="w")
    assert deadline_runs_since(Node.objects.get(pk=node.pk)) == first_past
