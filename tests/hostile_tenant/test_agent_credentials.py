"""A tenant with root on its node reads every secret the node was given, releases it, and keeps
them: none opens anything once the node serves the next tenant. Agent credentials are minted per
boot of the service image and per tenancy, reach the node on its config drive only, are stored as
digests, and die with their boot or tenancy; bmcsim derives none from a node's name."""

from __future__ import annotations

import binascii
import hashlib

import pytest
import requests
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from fleet import agent_credentials, selectors, services
from fleet.models import AuditEvent, AuditOnlyEvent, CredentialHolder, Node, NodeCredential
from reservations.models import Reservation
from tests.support.agent_credentials import boot_service_image, secrets_of, tenancy_drive
from tests.support.bmcsim import start_bmcsim
from tests.support.factories import drive

pytestmark = pytest.mark.django_db(transaction=True)


def xid_report(node: Node, token: str):
    body = {"gpu": 0, "xid": 48, "occurrence": 1, "seen_at": timezone.now().isoformat().replace("+00:00", "Z")}
    return APIClient().post(f"/v1/agents/{node.name}/xids", body, format="json", HTTP_AUTHORIZATION=f"Bearer {token}")


def serve(node: Node, reservation: Reservation) -> tuple[str, dict[str, str]]:
    """Provision the node for the reservation as the workflow does: the tenancy's drive, the
    service image's boot ended by the tenant's; what the tenant then reads on its drive."""
    node = drive(node, "provision_requested", reservation=reservation)
    token, given = tenancy_drive(node)
    services.end_service_boot(node_id=node.pk)
    drive(node, "provision_succeeded")
    return token, given


def wipe_and_inspect(node: Node) -> None:
    """Release, and the wipe and inspection that follow, each on a service boot of its own."""
    drive(node, "released")
    boot_service_image(Node.objects.get(pk=node.pk))  # the wipe's
    drive(node, "wipe_succeeded")
    boot_service_image(Node.objects.get(pk=node.pk))  # the inspection's
    drive(node, "inspection_passed", "attestation_passed")


@pytest.fixture
def handed_over(available_node, alice, bob):
    """Alice's tenancy of the node, everything she read on it, and Bob's tenancy after hers."""
    boot_service_image(available_node)
    alices_drive, alices = serve(available_node, Reservation.objects.create(tenant=alice, node_count=1))
    wipe_and_inspect(available_node)
    _, bobs = serve(available_node, Reservation.objects.create(tenant=bob, node_count=1))
    return available_node, alices_drive, alices, bobs


def test_an_xid_report_with_the_last_tenants_token_is_refused_and_audited(handed_over):
    node, _, alices, bobs = handed_over
    answer = xid_report(node, alices["report_token"])
    assert answer.status_code == 401 and answer.json() == {"detail": "a valid bearer token is required"}
    (refused,) = AuditEvent.objects.filter(node=node, event=AuditOnlyEvent.CREDENTIAL_REFUSED)
    assert refused.detail["holder"] == CredentialHolder.TENANCY and refused.detail["revoked_at"]
    assert "revoked" in refused.reason and alices["report_token"] not in str(refused.detail) + refused.reason
    assert xid_report(node, bobs["report_token"]).status_code == 202  # Bob's node, with Bob's credential


def test_a_kept_token_presented_again_and_again_is_audited_once_an_hour(handed_over):
    """The refusals come before the reports' rate limit: a tenant must not grow the audit log,
    which is kept for ever, by presenting its old token in a loop."""
    node, _, alices, _ = handed_over
    for _ in range(20):
        assert xid_report(node, alices["report_token"]).status_code == 401
    assert AuditEvent.objects.filter(node=node, event=AuditOnlyEvent.CREDENTIAL_REFUSED).count() == 1


def test_the_last_tenants_config_drive_is_gone_and_the_control_plane_calls_with_bobs(handed_over):
    node, alices_drive, alices, bobs = handed_over
    assert Client().get(f"/v1/config-drives/{alices_drive}").status_code == 404
    assert selectors.agent_token(node_id=node.pk) == bobs["agent_token"] != alices["agent_token"]
    assert bobs["report_token"] != alices["report_token"]


def test_an_earlier_service_boots_credential_dies_at_the_next_boot_and_at_the_tenants(available_node, alice):
    first_drive, first = boot_service_image(available_node)
    _, second = boot_service_image(available_node)
    assert Client().get(f"/v1/config-drives/{first_drive}").status_code == 404
    assert xid_report(available_node, first["report_token"]).status_code == 401
    assert selectors.agent_token(node_id=available_node.pk) == second["agent_token"]
    _, tenants = serve(available_node, Reservation.objects.create(tenant=alice, node_count=1))
    assert xid_report(available_node, second["report_token"]).status_code == 401  # the tenant's image runs now
    assert selectors.agent_token(node_id=available_node.pk) == tenants["agent_token"]
    assert AuditEvent.objects.filter(node=available_node, event=AuditOnlyEvent.CREDENTIAL_REFUSED).count() == 2


def test_one_nodes_live_token_is_refused_on_another_nodes_route(available_fleet):
    node, other = available_fleet[:2]
    _, given = boot_service_image(node)
    boot_service_image(other)
    assert xid_report(other, given["report_token"]).status_code == 401
    (refused,) = AuditEvent.objects.filter(event=AuditOnlyEvent.CREDENTIAL_REFUSED)
    assert refused.node_id == node.pk and refused.detail["presented_for"] == other.name


def test_a_reinstall_gives_the_tenancy_new_credentials(available_node, alice):
    old_drive, old = serve(available_node, Reservation.objects.create(tenant=alice, node_count=1))
    services.request_reinstall(node_id=available_node.pk, image=None, actor="tenant:alice")
    assert Client().get(f"/v1/config-drives/{old_drive}").status_code == 404
    _, new = tenancy_drive(Node.objects.get(pk=available_node.pk))
    assert xid_report(available_node, old["report_token"]).status_code == 401
    assert xid_report(available_node, new["report_token"]).status_code == 202


def every_table_as_text() -> str:
    """Every row of every table of the database, as JSON text (bytea as hex)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
        tables = [name for (name,) in cursor.fetchall()]
        rows = []
        for table in tables:
            cursor.execute(f'SELECT row_to_json(t)::text FROM "{table}" t')
            rows += [row for (row,) in cursor.fetchall()]
    return "\n".join(rows)


def test_the_database_keeps_a_digest_of_each_credential_and_no_secret(handed_over):
    node, _, alices, bobs = handed_over
    dump = every_table_as_text()
    for secret in (*alices.values(), *bobs.values()):
        if secret == node.name:
            continue
        assert secret not in dump and binascii.hexlify(secret.encode()).decode() not in dump
    assert agent_credentials.digest(bobs["report_token"]) in dump
    assert NodeCredential.objects.filter(node=node, revoked_at=None).count() == 1  # Bob's tenancy; no boot runs


def test_no_credential_is_derived_from_the_node_name(available_fleet):
    """Two nodes booted alike get unrelated secrets, and the same node booted twice too."""
    a, b = available_fleet[:2]
    given = [boot_service_image(a)[1], boot_service_image(b)[1], boot_service_image(a)[1]]
    tokens = [g[key] for g in given for key in ("agent_token", "report_token")]
    assert len(set(tokens)) == len(tokens)
    assert all(a.name not in token and b.name not in token for token in tokens)


# -- bmcsim's agent takes the credentials of the drive its node booted with, and none without one --


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    sim = start_bmcsim(tmp_path_factory.mktemp("agent-credentials") / "data", nodes=2)
    yield sim
    sim.stop()


def token_from_the_name(node: str) -> str:
    """What bmcsim's agents took before: a digest of the node's name, which anyone could compute."""
    return hashlib.sha256(f"agent-token/{node}".encode()).hexdigest()[:32]


@pytest.mark.django_db(transaction=False)
def test_bmcsims_agent_without_a_drive_refuses_everything(sim):
    computed = token_from_the_name("node-001")
    assert all("agent_token" not in node for node in sim.get("/bmcsim/v1/inventory").json()["nodes"])
    for path in ("inventory", "gpu-wipe", "diagnostics"):
        for authorization in ({}, {"Authorization": "Bearer "}, {"Authorization": f"Bearer {computed}"}):
            answer = requests.get(f"{sim.url}/agent/node-001/{path}", headers=authorization, timeout=10)
            assert answer.status_code == 401 and answer.json()["detail"]


@pytest.mark.django_db(transaction=False)
def test_bmcsims_agent_takes_the_credentials_of_the_drive_it_booted_with(sim):
    alices = sim.boot_with_config_drive("node-002")
    what_alice_read = secrets_of(sim.node_media("node-002")["Floppy"]["documents"])
    assert what_alice_read["agent_token"] == alices["agent_token"]
    bobs = sim.boot_with_config_drive("node-002")  # the next boot, with the next holder's drive

    def inventory(token: str) -> int:
        headers = {"Authorization": f"Bearer {token}"}
        return requests.get(f"{sim.url}/agent/node-002/inventory", headers=headers, timeout=10).status_code

    assert inventory(alices["agent_token"]) == 401
    assert inventory(alices["report_token"]) == 401  # a report token opens nothing on the agent
    assert inventory(bobs["agent_token"]) == 200
    sim.reset("node-002", "ForceOff")
    assert (inventory(alices["agent_token"]), inventory(bobs["agent_token"])) == (401, 503)  # off: unavailable
