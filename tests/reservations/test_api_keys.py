"""An organisation's API keys: shown once, kept only as a digest, scoped, expiring, revocable one by
one, acting with at most their maker's role while the maker remains a member; today's tokens keep
working, hashed."""

from __future__ import annotations

import hashlib
import re
import subprocess
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import F
from django.utils import timezone

from reservations.models import ApiKey, Membership, Tenant
from tests.support.api import key_client, member_key, post
from tests.support.factories import tenant_token

pytestmark = pytest.mark.django_db


def test_a_key_is_shown_once_with_its_prefix_and_listed_by_prefix_alone():
    admin = key_client(member_key("acme", "alice", "admin"))
    made = post(admin, "/v1/keys", {"name": "ci", "scope": "read"})
    assert made.status_code == 201, made.content
    body = made.json()
    assert set(body) >= {"id", "name", "scope", "prefix", "created_by", "last_used_at", "expires_at", "key"}
    assert body["key"].startswith(body["prefix"] + "_") and body["prefix"].startswith("gf_")
    assert (body["scope"], body["created_by"]) == ("read", "alice")
    listed = admin.get("/v1/keys").json()["results"]
    assert body["id"] in [k["id"] for k in listed] and all("key" not in k for k in listed)
    assert body["key"] not in admin.get("/v1/keys").content.decode()
    assert key_client(body["key"]).get("/v1/reservations").status_code == 200


@pytest.mark.parametrize("header", ["Bearer {}", "Token {}", "bearer {}"])
def test_a_key_is_accepted_after_bearer_or_token(header):
    key = member_key("acme", "alice", "member")
    client = key_client("unused")
    client.credentials(HTTP_AUTHORIZATION=header.format(key))
    assert client.get("/v1/reservations").status_code == 200


@pytest.mark.parametrize(
    "presented",
    ["gf_00000000_" + "A" * 43, "not-a-key", "gf_", "0" * 40, "Bearer", "gf_zzzzzzzz_" + "A" * 43],
)
def test_what_is_no_live_key_is_401_with_a_json_detail(presented):
    member_key("acme", "alice", "member")
    answer = key_client(presented).get("/v1/reservations")
    assert answer.status_code == 401 and "detail" in answer.json()
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_key_with_a_right_prefix_and_a_wrong_secret_is_refused():
    key = member_key("acme", "alice", "member")
    forged = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    assert key_client(forged).get("/v1/reservations").status_code == 401


def test_a_read_key_reads_and_may_not_write_whatever_its_makers_role():
    reader = key_client(member_key("acme", "alice", "admin", scope="read"))
    assert reader.get("/v1/reservations").status_code == 200
    refused = post(reader, "/v1/reservations", {"node_count": 1})
    assert refused.status_code == 403 and "viewer" in refused.json()["detail"]
    assert post(reader, "/v1/keys", {"name": "more"}).status_code == 403


def test_roles_member_uses_nodes_admin_manages_keys_viewer_reads(available_fleet):
    viewer = key_client(member_key("acme", "vera", "viewer"))
    member = key_client(member_key("acme", "mo", "member"))
    admin = key_client(member_key("acme", "alice", "admin"))
    assert viewer.get("/v1/keys").status_code == 200
    assert post(viewer, "/v1/reservations", {"node_count": 1}).status_code == 403
    assert post(member, "/v1/reservations", {"node_count": 1}).status_code == 201
    assert post(member, "/v1/keys", {"name": "mine"}).status_code == 403
    assert post(member, "/v1/ssh-keys", {"name": "k", "public_key": "ssh-ed25519 AAAA"}).status_code == 403
    assert post(admin, "/v1/keys", {"name": "mine"}).status_code == 201


def test_a_removed_members_keys_stop_working_and_an_organisation_key_made_by_them_does_not():
    alice = key_client(member_key("acme", "alice", "admin"))
    own = post(alice, "/v1/keys", {"name": "alice's laptop"}).json()["key"]
    organisation = post(alice, "/v1/keys", {"name": "terraform", "organisation_key": True}).json()["key"]
    Membership.objects.filter(user__username="alice").delete()
    assert key_client(own).get("/v1/reservations").status_code == 401
    assert key_client(organisation).get("/v1/reservations").status_code == 200
    # An organisation key acts as an admin, but a key is made by a person.
    assert post(key_client(organisation), "/v1/keys", {"name": "more"}).status_code == 403
    assert key_client(organisation).get("/v1/members").status_code == 200


def test_a_demoted_makers_key_acts_with_the_makers_new_role():
    key = key_client(member_key("acme", "alice", "admin"))
    Membership.objects.filter(user__username="alice").update(role="viewer")
    assert post(key, "/v1/keys", {"name": "more"}).status_code == 403
    assert key.get("/v1/keys").status_code == 200


def test_an_expired_key_is_401_and_a_past_expiry_is_refused_naming_expires_at():
    admin = key_client(member_key("acme", "alice", "admin"))
    past = post(admin, "/v1/keys", {"name": "old", "expires_at": "2020-01-01T00:00:00Z"})
    assert past.status_code == 400 and past.json()["detail"].startswith("expires_at")
    soon = (timezone.now() + timedelta(hours=1)).isoformat()
    made = post(admin, "/v1/keys", {"name": "soon", "expires_at": soon}).json()
    assert key_client(made["key"]).get("/v1/reservations").status_code == 200
    ApiKey.objects.filter(pk=made["id"]).update(expires_at=F("created_at") + timedelta(microseconds=1))
    answer = key_client(made["key"]).get("/v1/reservations")
    assert answer.status_code == 401 and "expired" in answer.json()["detail"]


def test_a_key_is_revoked_one_by_one_and_another_organisations_key_is_404():
    admin = key_client(member_key("acme", "alice", "admin"))
    first, second = (post(admin, "/v1/keys", {"name": n}).json() for n in ("one", "two"))
    other = key_client(member_key("globex", "gus", "admin"))
    assert other.delete(f"/v1/keys/{first['id']}").status_code == 404
    assert admin.delete(f"/v1/keys/{first['id']}").status_code == 204
    assert admin.delete(f"/v1/keys/{first['id']}").status_code == 404
    assert key_client(first["key"]).get("/v1/reservations").json()["detail"] == "this key was revoked"
    assert key_client(second["key"]).get("/v1/reservations").status_code == 200
    assert first["id"] not in [k["id"] for k in admin.get("/v1/keys").json()["results"]]


def test_last_used_is_recorded_at_most_once_a_minute():
    key = member_key("acme", "alice", "member")
    row = ApiKey.objects.get(prefix=key[:11])
    assert row.last_used_at is None
    key_client(key).get("/v1/reservations")
    first = ApiKey.objects.get(pk=row.pk).last_used_at
    assert first is not None
    key_client(key).get("/v1/reservations")
    assert ApiKey.objects.get(pk=row.pk).last_used_at == first


def test_unknown_fields_and_scopes_are_400():
    admin = key_client(member_key("acme", "alice", "admin"))
    assert post(admin, "/v1/keys", {"name": "x", "scope": "admin"}).status_code == 400
    assert post(admin, "/v1/keys", {"name": "x", "secret": "mine"}).status_code == 400
    assert post(admin, "/v1/keys", {}).json()["detail"].startswith("name")


def test_a_token_from_before_organisations_keeps_working_hashed(django_db_blocker):
    """Migration 0017: a DRF authtoken row becomes an organisation key of its tenant, kept as a digest."""
    from importlib import import_module

    from django.apps import apps

    tenant = Tenant.objects.create(name="acme", user=get_user_model().objects.create(username="tenant-acme"))
    old = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamptz, user_id int)")
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, now(), %s)", [old, tenant.user_id])
    migration = import_module("reservations.migrations.0017_api_tokens_become_hashed_keys")
    with connection.schema_editor() as editor:
        migration.hash_the_tokens(apps, editor)
    key = ApiKey.objects.get(tenant=tenant)
    assert (key.prefix, key.digest) == ("legacy-01234567", hashlib.sha256(old.encode()).hexdigest())
    assert key_client(old).get("/v1/reservations").status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM authtoken_token")
        assert cursor.fetchone()[0] == 0


def test_no_key_can_be_read_back_from_a_dump_of_the_database(settings, transactional_db):
    """pg_dump sees what is committed: the keys' rows are, their prefixes in the dump, and no key."""
    keys = [tenant_token("acme"), tenant_token("acme"), member_key("globex", "gus", "admin")]
    db = settings.DATABASES["default"]
    dump = subprocess.run(
        [
            *("pg_dump", "--data-only", "-h", db["HOST"] or "127.0.0.1", "-p", str(db["PORT"] or 5432)),
            *("-U", db["USER"] or "postgres", connection.settings_dict["NAME"]),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PGPASSWORD": db["PASSWORD"] or ""},
    ).stdout
    assert "COPY public.reservations_apikey" in dump
    assert all(key[:11] in dump for key in keys)  # gf_ and the id: the rows are there
    assert not any(key in dump or key.split("_", 2)[2] in dump for key in keys)
    # Nothing in it that has a key's shape authenticates.
    for found in set(re.findall(r"gf_[0-9a-f]{8}_[A-Za-z0-9_-]{43}|\b[0-9a-f]{40}\b", dump)):
        assert key_client(found).get("/v1/reservations").status_code == 401, found
