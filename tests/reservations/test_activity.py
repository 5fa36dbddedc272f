"""Every change through the API, the tenant page and the admin names the person and the key (its prefix, never
the key): the organisation's activity (keys, members, invitations, webhooks, SSH keys), its
reservations' history and the nodes' audit rows; a worker's rows name no one."""

from __future__ import annotations

import ipaddress

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.contrib.auth import get_user_model
from django.test import Client

from fleet.models import AuditEvent
from reservations.models import Activity, ReservationEvent
from tests.support.api import key_client, member_key, post
from tests.support.factories import drive, tenant_token

pytestmark = pytest.mark.django_db


def activity(client) -> list[dict]:
    return client.get("/v1/activity").json()["results"]


def test_the_organisations_activity_names_who_changed_what_with_which_key():
    alice_key = member_key("acme", "alice", "admin")
    alice = key_client(alice_key)
    made = post(alice, "/v1/keys", {"name": "ci"}).json()
    assert alice.delete(f"/v1/keys/{made['id']}").status_code == 204
    public_key = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    ssh_key = post(alice, "/v1/ssh-keys", {"name": "laptop", "public_key": public_key}).json()
    assert alice.delete(f"/v1/ssh-keys/{ssh_key['id']}").status_code == 204
    post(alice, "/v1/invitations", {"email": "nina@example.com", "role": "viewer"})
    member_key("acme", "bob", "member")
    bob = next(m for m in alice.get("/v1/members").json()["results"] if m["username"] == "bob")
    alice.patch(f"/v1/members/{bob['id']}", {"role": "viewer"}, format="json")
    alice.delete(f"/v1/members/{bob['id']}")

    rows = activity(key_client(member_key("acme", "vera", "viewer")))  # any member reads it
    by_alice = [row for row in rows if row["key"] == alice_key[:11]]
    assert [row["event"] for row in reversed(by_alice)] == [
        "key_created",
        "key_revoked",
        "ssh_key_added",
        "ssh_key_deleted",
        "member_invited",
        "member_role_changed",
        "member_removed",
    ]
    assert all(row["user"] == "alice" for row in by_alice)
    assert by_alice[-1]["detail"]["prefix"] == made["prefix"]
    assert set(rows[0]) == {"id", "at", "event", "user", "key", "detail"}
    dumped = str(list(Activity.objects.values()))
    assert made["key"] not in dumped and alice_key not in dumped


def test_an_organisation_key_names_its_prefix_and_no_person(available_fleet):
    key = tenant_token("acme")
    created = post(key_client(key), "/v1/reservations", {"node_count": 1}).json()
    (event,) = ReservationEvent.objects.filter(reservation_id=created["id"], event="created")
    assert (event.user, event.key) == ("", key[:11])


def test_a_members_reservation_names_them_in_its_history_and_on_the_nodes_audit(available_fleet):
    key = member_key("acme", "mo", "member")
    created = post(key_client(key), "/v1/reservations", {"node_count": 1}).json()
    history = ReservationEvent.objects.filter(reservation_id=created["id"])
    assert {(e.event, e.user, e.key) for e in history} >= {("created", "mo", key[:11])}
    (node,) = created["nodes"]
    placed = AuditEvent.objects.filter(node__name=node, event="provision_requested").get()
    assert (placed.user, placed.key) == ("mo", key[:11])


def test_the_tenant_page_names_the_signed_in_person_and_no_key(available_fleet):
    member_key("acme", "mo", "member")
    browser = Client()
    browser.force_login(get_user_model().objects.get(username="mo"))
    assert browser.post("/my/reservations", {"node_count": 1}).status_code in (200, 302)
    (event,) = ReservationEvent.objects.filter(event="created")
    assert (event.user, event.key) == ("mo", "")
    assert b'data-activity="key_created"' in browser.get("/my/reservations").content


def test_an_operator_deleting_a_webhook_in_the_admin_is_named_in_the_organisations_activity(admin_client, settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = (ipaddress.ip_network("192.0.2.0/24"),)  # a documentation network
    alice = key_client(member_key("acme", "alice", "admin"))
    hook = post(alice, "/v1/webhooks", {"url": "http://192.0.2.1/hook", "events": ["reservation.active"]}).json()
    gone = admin_client.post(f"/admin/reservations/webhook/{hook['id']}/delete/", {"post": "yes"})
    assert gone.status_code == 302
    (deleted,) = Activity.objects.filter(event="webhook_deleted")
    assert (deleted.user, deleted.key, deleted.detail) == ("admin", "", {"webhook": hook["id"]})


def test_rows_written_outside_a_request_name_no_one(fleet):
    drive(fleet[0], "operator_quarantine")
    row = AuditEvent.objects.filter(node=fleet[0]).latest("id")
    assert (row.user, row.key) == ("", "")
