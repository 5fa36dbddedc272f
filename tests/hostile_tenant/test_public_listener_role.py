"""The public listener has nothing to steal: code run in it finds no secret in its settings, and its
database role reads only what the public routes serve and writes nothing.

An attacker who runs code in the internet-facing process holds what the process holds: its
settings, its database login, its files. Each is checked as that attacker would use it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import psycopg
import pytest
import requests
from django.core.management import call_command
from django.db import connection
from psycopg import sql

from attestation import ear, services
from attestation.models import AttestationResult
from attestation.verifier import Verdict
from fleet.models import Node
from gpufleet.public_database import PUBLIC_COLUMNS
from tests.support import REPO_ROOT
from tests.support.processes import start_gunicorn
from tests.test_public_names_no_one import named_history, sweep  # noqa: F401  (named_history is a fixture)

PUBLIC = "gpufleet.urls_public"
# What a code-execution bug in the public listener must not find: each a column the role may not read.
SECRET_COLUMNS = [
    ("fleet_node", "bmc_password"),
    ("fleet_node", "bmc_username"),
    ("fleet_node", "redfish_url"),
    ("fleet_node", "agent_url"),
    ("auth_user", "password"),
    ("auth_user", "email"),
    ("django_session", "session_data"),
    ("reservations_apikey", "digest"),
    ("reservations_invitation", "digest"),
    ("reservations_webhook", "secret"),
    ("fleet_configdrive", "token"),
]


@pytest.fixture
def public_role(transactional_db) -> str:
    """The public role of this test database (a role of its own: roles are the server's, shared by
    every test run on it), granted as `make database` grants it; its database URL."""
    db = connection.settings_dict
    role = f"{db['NAME']}_public"
    call_command("grant_public_role", role=role, stdout=open(os.devnull, "w"))  # noqa: SIM115
    return f"postgresql://{role}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def as_public_role(public_role):
    """A connection as the public role, its transactions' read-only default turned off: the grants
    must refuse, not only that default."""
    with psycopg.connect(public_role, autocommit=True) as role:
        role.execute("SET default_transaction_read_only = off")
        yield role


def refused(role: psycopg.Connection, statement: sql.Composed | sql.SQL) -> bool:
    """Whether PostgreSQL refuses the role the statement for want of a privilege."""
    try:
        role.execute(statement)
    except psycopg.errors.InsufficientPrivilege:
        return True
    return False


def columns_of(table: str) -> list[str]:
    with connection.cursor() as cursor:
        return [column.name for column in connection.introspection.get_table_description(cursor, table)]


def test_the_role_is_refused_every_write_to_every_table(as_public_role):
    tables = connection.introspection.table_names()
    assert len(tables) > 40
    allowed = []
    for table in tables:
        name, first = sql.Identifier(table), sql.Identifier(columns_of(table)[0])
        for statement in [
            sql.SQL("INSERT INTO {} DEFAULT VALUES").format(name),
            sql.SQL("UPDATE {} SET {} = {}").format(name, first, first),
            sql.SQL("DELETE FROM {}").format(name),
            sql.SQL("TRUNCATE {}").format(name),
            sql.SQL("SELECT 1 FROM {} FOR UPDATE").format(name),
        ]:
            if not refused(as_public_role, statement):
                allowed.append(statement.as_string())
    with connection.cursor() as cursor:
        sequences = [info["name"] for table in tables for info in connection.introspection.get_sequences(cursor, table)]
        cursor.execute("SELECT relname FROM pg_class WHERE relkind = 'S'")
        sequences += [name for (name,) in cursor.fetchall()]
    assert "reservations_capacity_version_seq" in sequences
    for sequence in set(sequences):
        for statement in [
            sql.SQL("SELECT nextval({})").format(sql.Literal(sequence)),
            sql.SQL("SELECT setval({}, 1)").format(sql.Literal(sequence)),
        ]:
            if not refused(as_public_role, statement):
                allowed.append(statement.as_string())
    assert not allowed, "\n".join(allowed)


def test_the_role_is_refused_every_secret_column(as_public_role):
    for table, column in SECRET_COLUMNS:
        assert column in columns_of(table), f"{table}.{column} no longer exists: name the secret where it now is"
        assert column not in PUBLIC_COLUMNS.get(table, ()), f"{table}.{column} is granted to the public role"
    readable = []
    for table in connection.introspection.table_names():
        for column in columns_of(table):
            statement = sql.SQL("SELECT {} FROM {}").format(sql.Identifier(column), sql.Identifier(table))
            if column not in PUBLIC_COLUMNS.get(table, ()) and not refused(as_public_role, statement):
                readable.append(f"{table}.{column}")
    assert not readable, f"the public role reads what no public route serves: {readable}"


def test_the_role_reads_every_column_the_public_routes_serve(public_role):
    with psycopg.connect(public_role) as role:
        for table, columns in PUBLIC_COLUMNS.items():
            role.execute(
                sql.SQL("SELECT {} FROM {}").format(
                    sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(table)
                )
            )


def test_granting_again_takes_back_what_the_role_was_given(public_role, as_public_role):
    role = public_role.split("://")[1].split("@")[0]
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("GRANT ALL ON fleet_node TO {}").format(sql.Identifier(role)).as_string(cursor.connection)
        )
    assert not refused(as_public_role, sql.SQL("SELECT bmc_password FROM fleet_node"))
    call_command("grant_public_role", role=role, stdout=open(os.devnull, "w"))  # noqa: SIM115
    assert refused(as_public_role, sql.SQL("SELECT bmc_password FROM fleet_node"))
    assert refused(as_public_role, sql.SQL("DELETE FROM fleet_node"))


def attested_by_the_control_plane() -> str:
    """A node's latest result, signed with the control plane's own key; the node's name."""
    node = Node.objects.order_by("name").first()
    assert node is not None
    kid, key = services.signing_keys()[0]
    verdict = Verdict(affirming=True, failures=(), measurements={})
    now = datetime.now(UTC)
    token = ear.sign_result(
        verdict=verdict, node=node.name, nonce=b"\x02" * 32, verifier_id="test", private_key=key, kid=kid, now=now
    )
    AttestationResult.objects.create(
        node=node, nonce="02" * 32, affirming=True, failures=[], measurements={}, policy="default", kid=kid, token=token
    )
    return node.name


class Listener:
    """The test client's get, against a running listener."""

    def __init__(self, url: str):
        self.url = url
        self.session = requests.Session()

    def get(self, path: str, headers: dict | None = None) -> requests.Response:
        return self.session.get(self.url + path, headers=headers, timeout=30)


@pytest.mark.e2e
@pytest.mark.usefixtures("named_history")
def test_the_public_listener_serves_every_route_on_its_role_naming_no_one(public_role, tmp_path):
    """tests/test_public_names_no_one.py's sweep, against gunicorn on the public role, with nothing
    of the control plane's in its environment: every route answers, and names no one."""
    jwks = tmp_path / "public-jwks.json"
    call_command("export_signing_keys", str(jwks), stdout=open(os.devnull, "w"))  # noqa: SIM115
    env = {name: value for name, value in os.environ.items() if not name.startswith(("GPUFLEET_", "DATABASE"))}
    env |= {"PUBLIC_DATABASE_URL": public_role, "GPUFLEET_PUBLIC_JWKS_FILE": str(jwks)}
    server, url = start_gunicorn("public", "gpufleet.wsgi_public", env, tmp_path)
    try:
        shown, leaks = sweep(Listener(url))
        assert shown > 60
        assert not leaks, "\n".join(sorted(leaks))
        attested = attested_by_the_control_plane()
        assert Listener(url).get(f"/v1/nodes/{attested}/attestation").json()["verified"] is True
        assert Listener(url).get("/healthz").json() == {"status": "ok", "database": "ok"}
    finally:
        server.stop()
    assert "Traceback" not in server.output(), server.output()[-4000:]


# -- the settings ----------------------------------------------------------------------------


def test_the_public_settings_read_no_secret_of_the_control_planes(tmp_path):
    """Imported in a process whose environment holds every secret of the control plane's, the
    public listener's settings (and the whole application it serves) hold none of them."""
    keys = tmp_path / "signing-keys"
    keys.mkdir()
    ear.generate_signing_key(keys / "k.pem")
    pem = (keys / "k.pem").read_text().splitlines()[1]
    secrets = {
        "SECRET_KEY": "sentinel-secret-key-0123456789-0123456789-0123456789",
        "DATABASE_URL": "postgres://owner:sentinel-database-password@127.0.0.1:5432/gpufleet",
        "REDIS_URL": "redis://:sentinel-redis-password@127.0.0.1:6379/0",
        "GPUFLEET_WEBHOOK_TOKEN": "sentinel-webhook-token",
        "GPUFLEET_FABRIC_REDFISH_PASSWORD": "sentinel-fabric-password",
        "GPUFLEET_FABRIC_REDFISH_USERNAME": "sentinel-fabric-user",
        "GPUFLEET_SIGNING_KEY": str(keys),
    }
    script = (
        "import json, sys\n"
        "from django.urls import get_resolver\n"
        "import gpufleet.wsgi_public\n"
        "from django.conf import settings\n"
        "get_resolver().url_patterns\n"  # every view's module imported
        "print(json.dumps({'settings': {n: repr(getattr(settings, n)) for n in dir(settings) if n.isupper()},"
        " 'modules': sorted(sys.modules)}))\n"
    )
    env = {**os.environ, **secrets, "DJANGO_SETTINGS_MODULE": "gpufleet.settings"}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.splitlines()[-1])
    assert "gpufleet.settings" not in loaded["modules"], "the public listener imported the control plane's settings"
    held = "\n".join(f"{name} = {value}" for name, value in loaded["settings"].items())
    for name, value in [*secrets.items(), ("the private key", pem)]:
        assert value not in held, f"the public listener's settings hold {name}"
    for setting in ["GPUFLEET_WEBHOOK_TOKEN", "FABRIC_REDFISH_PASSWORD", "GPUFLEET_SIGNING_KEY", "REDIS_URL"]:
        assert setting not in loaded["settings"], setting


# -- the JWKS from the exported file ---------------------------------------------------------


def test_the_public_listener_serves_the_exported_jwks_without_the_private_keys(client, db, settings, tmp_path):
    settings.ROOT_URLCONF = PUBLIC
    jwks = tmp_path / "public-jwks.json"
    call_command("export_signing_keys", str(jwks), stdout=open(os.devnull, "w"))  # noqa: SIM115
    exported = json.loads(jwks.read_text())
    assert exported["keys"] and not [key for key in exported["keys"] if "d" in key]
    settings.PUBLIC_JWKS_FILE = str(jwks)
    settings.GPUFLEET_SIGNING_KEY = str(tmp_path / "no-private-key-here")
    assert client.get("/v1/attestation/keys").json() == exported
    # A rotation: the file written again is served at once.
    rotated = {"keys": [*exported["keys"], {**exported["keys"][0], "kid": "next"}]}
    jwks.write_text(json.dumps(rotated))
    assert client.get("/v1/attestation/keys").json() == rotated


@pytest.mark.parametrize("content", [None, "not json", '{"keys": [{"kid": "k", "kty": "OKP", "d": "private"}]}'])
def test_a_missing_or_private_jwks_file_is_503_never_served(client, db, settings, tmp_path, content):
    settings.ROOT_URLCONF = PUBLIC
    jwks = tmp_path / "public-jwks.json"
    if content is not None:
        jwks.write_text(content)
    settings.PUBLIC_JWKS_FILE = str(jwks)
    answer = client.get("/v1/attestation/keys")
    assert answer.status_code == 503
    assert set(answer.json()) == {"detail"} and "not published" in answer.json()["detail"]
