"""DATABASE_URL and PUBLIC_DATABASE_URL (gpufleet.settings_shared.database): one host, or several
as libpq takes them (host1:port1,host2:port2), for a control plane that follows its primary from
one server to another; a URL it cannot use stops the process with one line."""

import pytest
from django.db import connection
from django.db.utils import ConnectionHandler

from gpufleet.settings_shared import database
from tests.support.ports import free_port

TIMEOUTS = "-c statement_timeout=30000 -c lock_timeout=10000 -c idle_in_transaction_session_timeout=60000"


def entry(monkeypatch, url: str, **options) -> dict:
    monkeypatch.setenv("GF_DB", url)
    return dict(database("GF_DB", "postgres://unused@127.0.0.1/unused", **options))


def refusal(monkeypatch, url: str) -> str:
    monkeypatch.setenv("GF_DB", url)
    with pytest.raises(SystemExit) as stopped:
        database("GF_DB", "postgres://unused@127.0.0.1/unused")
    return str(stopped.value.code)


def test_one_host_is_read_as_dj_database_url_reads_it(monkeypatch):
    assert entry(monkeypatch, "postgres://postgres@127.0.0.1:5432/gpufleet") == {
        "ENGINE": "django.db.backends.postgresql",
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": "127.0.0.1",
        "PORT": 5432,
        "NAME": "gpufleet",
        "OPTIONS": {"connect_timeout": 5, "options": TIMEOUTS},
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        "DISABLE_SERVER_SIDE_CURSORS": False,
    }


def test_several_hosts_become_libpqs_comma_lists_and_the_query_its_options(monkeypatch):
    read = entry(
        monkeypatch,
        "postgresql://gpufleet:p%40ss@db-1.example:5432,db-2.example:5433/gpufleet?target_session_attrs=read-write",
    )
    assert (read["HOST"], read["PORT"]) == ("db-1.example,db-2.example", "5432,5433")
    assert (read["USER"], read["PASSWORD"], read["NAME"]) == ("gpufleet", "p@ss", "gpufleet")
    assert read["OPTIONS"] == {"target_session_attrs": "read-write", "connect_timeout": 5, "options": TIMEOUTS}
    assert (read["CONN_MAX_AGE"], read["CONN_HEALTH_CHECKS"]) == (60, True)


def test_a_host_without_a_port_has_libpqs_default_and_an_ipv6_host_loses_its_brackets(monkeypatch):
    read = entry(monkeypatch, "postgres://u@[::1]:5433,db-2,db-3:5434/gpufleet")
    assert (read["HOST"], read["PORT"]) == ("::1,db-2,db-3", "5433,,5434")


def test_the_public_listeners_engine_and_read_only_option_are_kept(monkeypatch):
    read = entry(
        monkeypatch,
        "postgres://gpufleet_public@h1:5432,h2:5432/gpufleet",
        engine="gpufleet.public_database",
        server_options="-c default_transaction_read_only=on",
    )
    assert read["ENGINE"] == "gpufleet.public_database"
    assert read["OPTIONS"]["options"] == f"{TIMEOUTS} -c default_transaction_read_only=on"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("postgres://u:secret@h1:5432,h2:port/gpufleet", "Port could not be cast to integer value as 'port'"),
        ("postgres://u:secret@h1:5432,h2:70000/gpufleet", "Port out of range 0-65535"),
        ("postgres://u:secret@h1:5432,,h2/gpufleet", "an empty host in the list of hosts"),
        ("postgres://u:secret@h1:port/gpufleet", "This string is not a valid url"),
        ("mysql://u:secret@h1/gpufleet", "the scheme 'mysql' is not postgres or postgresql"),
    ],
)  # fmt: skip
def test_a_url_that_cannot_be_used_stops_with_one_line_that_shows_no_password(monkeypatch, url, why):
    message = refusal(monkeypatch, url)
    shown = url.replace(":secret@", ":***@")
    assert message.startswith(f"gpu-fleet: GF_DB={shown!r}: expected a PostgreSQL URL, postgresql://user@host:port/")
    assert f"({why}" in message
    assert "secret" not in message and "\n" not in message


def test_django_connects_to_the_first_host_that_answers(monkeypatch, db):
    """A host where nothing listens, then this test run's server: psycopg takes the comma lists
    from Django as they are, goes past the first host and keeps the second."""
    own = connection.settings_dict
    url = f"postgres://{own['USER']}@127.0.0.1:{free_port()},{own['HOST']}:{own['PORT']}/{own['NAME']}"
    handler = ConnectionHandler({"default": entry(monkeypatch, f"{url}?target_session_attrs=read-write")})
    failover = handler["default"]
    try:
        with failover.cursor() as cursor:
            cursor.execute("SELECT current_database(), inet_server_port()")
            assert cursor.fetchone() == (own["NAME"], int(own["PORT"]))
    finally:
        failover.close()
