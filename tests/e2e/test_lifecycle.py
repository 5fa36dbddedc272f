"""The whole lifecycle with real workers, bmcsim and attestation: a tenant's full cycle, healing
after a GPU fault, and the implant incident, each ending in a signed result anyone can verify."""

import json
from io import StringIO

from django.core.management import call_command
from rest_framework.test import APIClient

from fleet.models import AuditEvent, Node, Pod
from fleet.services import transition
from reservations import services as reservations
from reservations.models import Tenant
from tests.support.invariants import check_all
from tests.support.processes import wait_for
from tests.support.stack import verify_offline
from tests.support.tenancy import state_of


def seed(bmcsim) -> list[Node]:
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    return list(Node.objects.order_by("name"))


def start(control_plane) -> None:
    control_plane.configure_attestation()
    control_plane.start_worker("w1")
    control_plane.start_worker("w2")
    control_plane.start_beat()


def all_in(nodes, state: str) -> bool:
    return Node.objects.filter(pk__in=[n.pk for n in nodes], state=state).count() == len(nodes)


def test_twenty_nodes_go_round_the_whole_lifecycle(bmcsim, control_plane):
    nodes = seed(bmcsim)
    start(control_plane)
    wait_for("every node attested and available", lambda: all_in(nodes, "available"), timeout=180)

    tenant = Tenant.objects.create(name="acme")
    big = reservations.create_reservation(tenant=tenant, node_count=16, pod=Pod.objects.get(name="p1"), actor="test")
    small = reservations.create_reservation(tenant=tenant, node_count=4, pod=Pod.objects.get(name="p2"), actor="test")
    held = list(Node.objects.filter(tenant=tenant))
    assert len(held) == 20
    wait_for("both reservations active", lambda: state_of(big) == state_of(small) == "active", timeout=180)
    assert all_in(held, "active")

    for reservation in (big, small):
        reservations.release_reservation(reservation_id=reservation.pk, actor="test")
    wait_for("every node wiped, attested and available again", lambda: all_in(held, "available"), timeout=240)
    for node in held:
        path = list(
            AuditEvent.objects.filter(node=node)
            .exclude(from_state="")
            .exclude(event__in=["step_changed", "networks_confirmed", "fabric_drift_repaired"])
            .order_by("id")
            .values_list("event", flat=True)
        )
        assert path[-6:] == [
            "provision_requested",
            "provision_succeeded",
            "released",
            "wipe_succeeded",
            "inspection_passed",
            "attestation_passed",
        ], (node.name, path)
    actors = set(AuditEvent.objects.filter(event="wipe_succeeded").values_list("actor", flat=True))
    assert len(actors) == 2
    assert check_all() == []  # the whole history, as manage.py check_invariants reads it


def test_a_gpu_fault_under_a_tenant_is_healed_in_the_same_pod(bmcsim, control_plane):
    nodes = seed(bmcsim)
    start(control_plane)
    wait_for("every node available", lambda: all_in(nodes, "available"), timeout=180)
    tenant = Tenant.objects.create(name="acme")
    reservation = reservations.create_reservation(
        tenant=tenant, node_count=4, pod=Pod.objects.get(name="p2"), actor="test"
    )
    wait_for("the reservation active", lambda: state_of(reservation) == "active", timeout=120)

    lost = Node.objects.filter(reservation=reservation).order_by("name").first()
    assert lost is not None
    transition(node_id=lost.pk, event="hardware_fault", actor="test", reason="XID 79 on GPU 3")
    assert state_of(reservation) == "degraded"
    wait_for("a replacement up and the reservation active", lambda: state_of(reservation) == "active", timeout=120)
    serving = Node.objects.filter(reservation=reservation)
    assert serving.count() == 4 and lost not in serving
    assert {n.rack.pod.name for n in serving} == {"p2"}
    assert Node.objects.get(pk=lost.pk).state == "quarantined"


def test_the_implant_incident_ends_quarantined_with_a_contraindicated_signed_result(bmcsim, control_plane, tmp_path):
    nodes = seed(bmcsim)
    start(control_plane)
    wait_for("every node available", lambda: all_in(nodes, "available"), timeout=180)
    tenant = Tenant.objects.create(name="mallory")
    reservation = reservations.create_reservation(tenant=tenant, node_count=1, actor="test")
    node = Node.objects.get(reservation=reservation)
    wait_for("the tenant's node active", lambda: state_of(reservation) == "active", timeout=120)

    # The tenant tampers with the kernel image, then leaves.
    assert bmcsim.post("/bmcsim/v1/faults", json={"node": node.name, "kind": "implant"}).status_code in (200, 201)
    reservations.release_reservation(reservation_id=reservation.pk, actor="tenant:mallory")
    wait_for("quarantine", lambda: Node.objects.get(pk=node.pk).state == "quarantined", timeout=120)

    node.refresh_from_db()
    assert node.quarantine_reason.startswith("attestation_failed: unknown_component_digest kernel")
    events = list(
        AuditEvent.objects.filter(node=node)
        .exclude(event__in=["step_changed", "networks_confirmed", "fabric_drift_repaired"])
        .order_by("id")
        .values_list("event", flat=True)
    )
    # Straight from the tenant to quarantine: nobody else could have had it in between.
    assert events[-4:] == ["released", "wipe_succeeded", "inspection_passed", "attestation_failed"]

    answer = APIClient().get(f"/v1/nodes/{node.name}/attestation").json()
    status = answer["claims"]["submods"][node.name]["ear.status"]
    assert status == "contraindicated"
    assert [f["component"] for f in answer["claims"]["failures"]] == ["kernel"]

    verified = verify_offline(answer["token"], tmp_path)
    assert verified.returncode == 3, verified.stderr  # genuine, and contraindicated
    assert json.loads(verified.stdout)["submods"][node.name]["ear.status"] == "contraindicated"
    head, body, signature = answer["token"].split(".")
    tampered = verify_offline(f"{head}.{body}.{signature[:-4]}AAAA", tmp_path)
    assert tampered.returncode != 0
