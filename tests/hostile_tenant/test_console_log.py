"""A node's console log is read by whoever holds the node next: its tenant is shown only what was
printed since its tenancy began, and the wipe clears the log where the BMC can (bmcsim can)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from fleet.models import Node
from reservations import services as reservations
from reservations.models import Reservation, Tenant
from tests.support.api import tenant_client
from tests.support.bmcsim import Bmcsim, start_bmcsim
from tests.support.fabrics import point_managers_at, sync
from tests.support.factories import drive, make_available
from tests.support.time_passing import lease_runs_out
from workflows import node_workflows

EARLIER_TENANTS_LINE = "bmcsim: NMI (Nmi)"  # what the earlier tenancy left on the console


@pytest.fixture(scope="module")
def bmcsim(tmp_path_factory) -> Iterator[Bmcsim]:
    sim = start_bmcsim(tmp_path_factory.mktemp("bmcsim") / "data", nodes=2)
    yield sim
    sim.stop()


def the_only_available(bmcsim: Bmcsim, name: str) -> Node:
    """bmcsim's fleet enrolled, and `name` alone available: every reservation is placed on it."""
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    (node,) = make_available([Node.objects.get(name=name)])
    return node


def serving(tenant: str, node: Node) -> Reservation:
    """The tenant's reservation, placed on `node` and active there."""
    reservation = reservations.create_reservation(tenant=Tenant.objects.create(name=tenant), node_count=1, actor="test")
    drive(Node.objects.get(pk=node.pk, reservation=reservation), "provision_succeeded")
    return reservation


def console(tenant: str, reservation: Reservation, node: Node) -> str:
    answer = tenant_client(tenant).get(f"/v1/reservations/{reservation.pk}/nodes/{node.name}/console")
    assert answer.status_code == 200, answer.content
    return answer.content.decode()


def entries(bmcsim: Bmcsim, node: Node) -> list[str]:
    log = bmcsim.get(f"/redfish/v1/Systems/{node.system_id}/LogServices/Console/Entries").json()
    return [entry["Message"] for entry in log["Members"]]


def test_the_next_tenant_never_sees_what_the_last_ones_os_printed(bmcsim, db):
    node = the_only_available(bmcsim, "node-001")
    first = serving("acme", node)
    bmcsim.reset(node.system_id, "Nmi")
    assert EARLIER_TENANTS_LINE in console("acme", first, node)

    # Released and put back into service without a wipe that clears the log, as where the BMC cannot.
    reservations.release_reservation(reservation_id=first.pk, actor="tenant:acme")
    drive(Node.objects.get(pk=node.pk), "wipe_succeeded", "inspection_passed", "attestation_passed")
    second = serving("globex", node)
    bmcsim.reset(node.system_id, "ForceRestart")

    assert EARLIER_TENANTS_LINE in entries(bmcsim, node)  # the BMC keeps it
    shown = console("globex", second, node)
    assert "bmcsim: reset (ForceRestart)" in shown and f"{node.name} login:" in shown
    assert EARLIER_TENANTS_LINE not in shown


def test_the_wipe_clears_the_console_log_on_bmcsim(bmcsim, transactional_db, live_server, settings):
    settings.CONFIG_DRIVE_BASE_URL = live_server.url  # where the BMC fetches the wipe boot's drive
    point_managers_at(settings, bmcsim.url)
    node = the_only_available(bmcsim, "node-002")
    reservation = serving("acme", node)
    bmcsim.reset(node.system_id, "Nmi")
    reservations.release_reservation(reservation_id=reservation.pk, actor="tenant:acme")

    for _ in range(50):  # each run goes as far as the hardware lets it; bmcsim takes no time
        if Node.objects.get(pk=node.pk).state != "wiping":
            break
        node_workflows.run_workflow(node_id=node.pk, worker="test")
        sync()  # as a worker does when the wipe waits on the fabrics
        lease_runs_out(node, after=timedelta(hours=1))
    assert Node.objects.get(pk=node.pk).state != "wiping"
    assert EARLIER_TENANTS_LINE not in entries(bmcsim, node)
    assert node.audit_events.filter(event="wipe_succeeded", detail__console_log="cleared").count() == 1
