"""`gpufleet keys` and `gpufleet members` against the live control plane: a key made, used, listed
by its prefix (never shown again) and revoked (then refused, 401, through the CLI); the key read
from GPUFLEET_KEY or from the config file's `key`; members listed, their roles changed, removed, signed out,
and people invited. Any member's key lists keys and members; an admin's makes and revokes keys
and manages members (tests.support.api.member_key makes both); the organisation key that
`manage.py create_tenant` prints acts as an admin but makes no keys."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from reservations.models import ApiKey, Membership
from tests.client.conftest import Tenant, with_key
from tests.support.api import member_key
from tests.support.factories import tenant_token

KEY = re.compile(r"^gf_[0-9a-f]{8}_[A-Za-z0-9_-]{43}$")


@pytest.fixture
def alice(live_server, tmp_path) -> Tenant:
    """acme's admin, with a read-write key of her own."""
    return with_key(tmp_path / "alice", live_server.url, member_key("acme", "alice", "admin"))


@pytest.fixture
def bob(live_server, tmp_path) -> Tenant:
    """A member of acme (no admin), with a read-write key of his own."""
    return with_key(tmp_path / "bob", live_server.url, member_key("acme", "bob", "member"))


def created_key(completed) -> str:
    """The key `keys create` printed, alone on its last line."""
    assert completed.returncode == 0, completed.stderr
    key = completed.stdout.splitlines()[-1]
    assert KEY.match(key), completed.stdout
    return key


def rows(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines()]


# -- keys ---------------------------------------------------------------------------------------


def test_create_use_list_and_revoke_a_key(alice, live_server, tmp_path):
    created = alice.run("keys", "create", "ci")
    key = created_key(created)
    api_key = ApiKey.objects.get(name="ci")
    shown = dict(line.split(None, 1) for line in created.stdout.splitlines()[:-1])
    assert shown == {
        "id": str(api_key.pk),
        "name": "ci",
        "prefix": api_key.prefix,
        "scope": "read-write",
        "organisation": "no",
        "expires": "never",
    }
    assert key.startswith(api_key.prefix + "_")
    assert "the key is shown only now" in created.stderr and key not in created.stderr

    # The new key works: it acts as alice, an admin, so it lists the keys too.
    ci = with_key(tmp_path / "ci", live_server.url, key)
    listed = ci.run("keys", "list")
    assert listed.returncode == 0, listed.stderr
    header, *body = rows(listed.stdout)
    assert header == ["ID", "PREFIX", "NAME", "SCOPE", "FOR", "CREATED", "EXPIRES", "LAST", "USED"]
    (mine,) = [row for row in body if row[0] == str(api_key.pk)]
    assert mine[:5] == [str(api_key.pk), api_key.prefix, "ci", "read-write", "alice"]
    assert mine[7] == "never"  # after CREATED's date and time
    assert len(body) == ApiKey.objects.filter(revoked_at__isnull=True, tenant__name="acme").count()
    assert key not in listed.stdout and key.split("_", 2)[2] not in listed.stdout
    assert alice.run("keys").stdout == listed.stdout  # `keys` alone lists them too

    revoked = alice.run("keys", "revoke", str(api_key.pk))
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout == f"key {api_key.pk} revoked: every request with it is refused from now on\n"
    assert str(api_key.pk) not in [row[0] for row in rows(alice.run("keys", "list").stdout)[1:]]

    refused = ci.run("keys", "list")
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.splitlines()[0] == "gpufleet: this key was revoked (401)"
    assert "the server did not accept the API key: set GPUFLEET_KEY" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert ci.run("quota").returncode == 1  # refused everywhere, not only on /v1/keys

    assert alice.run("keys", "revoke", str(api_key.pk)).returncode == 3  # revoked already: not found


def test_keys_create_prints_the_key_only_on_creation(alice):
    expires = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)
    created = alice.run(
        "keys", "create", "nightly", "--scope", "read", "--expires", expires.isoformat(), "--organisation"
    )
    key = created_key(created)
    api_key = ApiKey.objects.get(name="nightly")
    assert (api_key.scope, api_key.organisation_key, api_key.expires_at) == ("read", True, expires)
    assert "scope         read" in created.stdout and "organisation  yes" in created.stdout
    assert f"expires       {expires:%Y-%m-%d %H:%M:%S}Z" in created.stdout

    # Never again: neither the table nor the server's JSON holds it.
    for listing in (alice.run("keys", "list"), alice.run("keys", "list", "--json")):
        assert listing.returncode == 0, listing.stderr
        assert key not in listing.stdout and key.split("_", 2)[2] not in listing.stdout
        assert api_key.prefix in listing.stdout
    page = json.loads(alice.run("keys", "--json").stdout)
    assert all("key" not in row for row in page["results"])
    nightly = next(row for row in page["results"] if row["id"] == api_key.pk)
    assert nightly["organisation_key"] is True and nightly["created_by"] == "alice"

    # --json on creation: the server's answer, the key in it, once.
    answer = alice.run("keys", "create", "deploy", "--json")
    assert answer.returncode == 0, answer.stderr
    document = json.loads(answer.stdout)
    assert KEY.match(document["key"]) and document["name"] == "deploy" and document["scope"] == "read-write"
    assert document["prefix"] == ApiKey.objects.get(name="deploy").prefix
    assert document["key"] not in alice.run("keys", "list", "--json").stdout


def test_a_key_in_the_config_file_is_used(alice, live_server, tmp_path):
    config = tmp_path / "xdg" / "gpufleet" / "config.toml"
    config.parent.mkdir(parents=True)
    key, nobodys = alice.env["GPUFLEET_KEY"], f"gf_00000000_{'x' * 43}"
    config.write_text(f'url = "{live_server.url}"\nkey = "{key}"\n')
    person = with_key(tmp_path / "configured", live_server.url, None)
    del person.env["GPUFLEET_URL"]  # the file's url, too
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    listed = person.run("keys", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert rows(listed.stdout)[0][:2] == ["ID", "PREFIX"]

    # `key` wins over the older `token` in the file, GPUFLEET_KEY over GPUFLEET_TOKEN, and the
    # environment over the file.
    config.write_text(f'url = "{live_server.url}"\ntoken = "{nobodys}"\nkey = "{key}"\n')
    assert person.run("keys", "list", env=env).returncode == 0
    assert person.run("keys", "list", env={**env, "GPUFLEET_TOKEN": nobodys, "GPUFLEET_KEY": key}).returncode == 0
    wrong = person.run("keys", "list", env={**env, "GPUFLEET_KEY": nobodys})
    assert wrong.returncode == 1 and wrong.stderr.startswith("gpufleet: invalid key (401)")

    # the older name alone still works
    config.write_text(f'url = "{live_server.url}"\ntoken = "{key}"\n')
    assert person.run("keys", "list", env=env).returncode == 0

    config.write_text("key = 42\n")
    bad = person.run("keys", "list", env=env)
    assert bad.returncode == 2 and bad.stderr == f"gpufleet: {config}: key must be a string\n"


def test_no_key_says_where_to_put_one(anonymous):
    completed = anonymous.run("keys", "list")
    assert completed.returncode == 2
    assert completed.stderr.startswith('gpufleet: no API key: set GPUFLEET_KEY, or put key = "gf_..." in ')
    assert anonymous.env["XDG_CONFIG_HOME"] + "/gpufleet/config.toml" in completed.stderr


def test_only_an_admin_makes_and_revokes_keys(alice, bob, live_server, tmp_path):
    created_key(alice.run("keys", "create", "ci"))
    api_key = ApiKey.objects.get(name="ci")

    organisation = with_key(tmp_path / "organisation", live_server.url, tenant_token("acme"))
    # A member neither makes nor revokes keys; the organisation key (an admin's rights) makes none.
    refused = [(bob, ("keys", "create", "mine")), (bob, ("keys", "revoke", str(api_key.pk)))]
    refused.append((organisation, ("keys", "create", "mine")))
    for person, command in refused:
        assert person.run("keys", "list").returncode == 0  # reading is any member's
        completed = person.run(*command)
        assert completed.returncode == 1, (command, completed.stdout)
        assert completed.stderr.startswith("gpufleet: ") and "(403)" in completed.stderr, completed.stderr
    assert not ApiKey.objects.filter(name="mine").exists()

    # another organisation's key is not found
    gina = with_key(tmp_path / "gina", live_server.url, member_key("globex", "gina", "admin"))
    assert gina.run("keys", "revoke", str(api_key.pk)).returncode == 3
    assert ApiKey.objects.get(pk=api_key.pk).revoked_at is None


def test_a_key_that_expires_in_the_past_is_refused(alice):
    completed = alice.run("keys", "create", "old", "--expires", "2020-01-01T00:00Z")
    assert completed.returncode == 1
    assert completed.stderr.startswith("gpufleet: ") and "expires_at" in completed.stderr
    assert "(400)" in completed.stderr
    assert not ApiKey.objects.filter(name="old").exists()

    bad = alice.run("keys", "create", "x", "--scope", "write")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


# -- members ------------------------------------------------------------------------------------


def members_of(person: Tenant) -> dict[str, dict]:
    """The organisation's members by username, from `members list --json`."""
    completed = person.run("members", "list", "--json")
    assert completed.returncode == 0, completed.stderr
    return {member["username"]: member for member in json.loads(completed.stdout)["results"]}


def test_list_members_change_a_role_and_remove_a_member(alice, bob):
    members = members_of(alice)
    assert {name: m["role"] for name, m in members.items()} == {"alice": "admin", "bob": "member"}
    bob_id = members["bob"]["id"]

    listed = alice.run("members", "list")
    assert listed.returncode == 0, listed.stderr
    header, *body = rows(listed.stdout)
    assert header == ["ID", "USERNAME", "EMAIL", "ROLE"]
    assert [str(bob_id), "bob"] in [row[:2] for row in body]
    assert alice.run("members").stdout == listed.stdout  # `members` alone lists them too
    assert bob.run("members", "list").returncode == 0  # any member reads the list

    changed = alice.run("members", "role", str(bob_id), "viewer")
    assert changed.returncode == 0, changed.stderr
    assert changed.stdout == f"member {bob_id} (bob) is now viewer\n"
    assert members_of(alice)["bob"]["role"] == "viewer"
    as_json = json.loads(alice.run("members", "role", str(bob_id), "member", "--json").stdout)
    assert as_json == {**members["bob"], "role": "member"}

    # a member manages no one
    refused = bob.run("members", "role", str(members["alice"]["id"]), "viewer")
    assert refused.returncode == 1 and "(403)" in refused.stderr
    assert bob.run("members", "remove", str(members["alice"]["id"])).returncode == 1

    removed = alice.run("members", "remove", str(bob_id))
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.startswith(f"member {bob_id} removed")
    assert "bob" not in members_of(alice)
    gone = bob.run("members", "list")  # his key acts for no one now
    assert gone.returncode == 1 and "(401)" in gone.stderr

    assert alice.run("members", "remove", str(bob_id)).returncode == 3
    assert alice.run("members", "role", str(bob_id), "admin").returncode == 3
    assert alice.run("members", "role", str(bob_id), "owner").returncode == 2  # not a role


def test_sign_a_member_out(alice, bob):
    bob_id = members_of(alice)["bob"]["id"]
    signed_out = alice.run("members", "sign-out", str(bob_id))
    assert signed_out.returncode == 0, signed_out.stderr
    assert signed_out.stdout.startswith(f"member {bob_id} signed out")
    assert Membership.objects.get(pk=bob_id).signed_out_at is not None
    assert bob.run("members", "sign-out", str(bob_id)).returncode == 1  # a member's key is no admin's
    assert alice.run("members", "sign-out", "999999").returncode == 3


def test_the_last_admin_stays(alice):
    me = members_of(alice)["alice"]["id"]
    for command in (("members", "role", str(me), "member"), ("members", "remove", str(me))):
        completed = alice.run(*command)
        assert completed.returncode == 1 and "(409)" in completed.stderr, completed.stderr
    assert members_of(alice)["alice"]["role"] == "admin"


def test_invite_prints_the_url_and_its_expiry(alice, bob):
    invited = alice.run("members", "invite", "carol@example.com", "--role", "viewer")
    assert invited.returncode == 0, invited.stderr
    shown = dict(line.split(None, 1) for line in invited.stdout.splitlines())
    assert set(shown) == {"url", "expires"}
    assert shown["url"].startswith(alice.env["GPUFLEET_URL"] + "/")
    expires = datetime.strptime(shown["expires"], "%Y-%m-%d %H:%M:%SZ").replace(tzinfo=UTC)
    assert datetime.now(UTC) < expires
    assert "carol@example.com" in invited.stderr and "viewer" in invited.stderr

    answer = alice.run("members", "invite", "dan@example.com", "--json")  # a member by default
    assert answer.returncode == 0, answer.stderr
    document = json.loads(answer.stdout)
    assert set(document) == {"url", "expires_at"} and document["url"] != shown["url"]

    assert alice.run("members", "invite", "not-an-email").returncode == 1
    refused = bob.run("members", "invite", "eve@example.com")
    assert refused.returncode == 1 and "(403)" in refused.stderr
    assert alice.run("members", "invite", "eve@example.com", "--role", "owner").returncode == 2
