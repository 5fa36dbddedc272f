"""Each test process's database, copied from one migrated at most once per set of migrations.

Migrating an empty database takes about twenty seconds, and every pytest-xdist process needs
a database of its own. The first process to need one migrates a template named after a digest
of every migration; it and every later process (in this run and the runs after it, until a
migration changes) copy that template, which PostgreSQL does in about a second.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connection

from tests.support import REPO_ROOT


def migrations_digest() -> str:
    """What the migrated schema depends on: every migration file and the installed apps."""
    digest = hashlib.sha256(repr(settings.INSTALLED_APPS).encode())
    for path in sorted(REPO_ROOT.glob("*/migrations/*.py")):
        digest.update(str(path.relative_to(REPO_ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@contextmanager
def _template_lock(base: str) -> Iterator[None]:
    """The lock of the templates named after `base` (this run's test database): the processes of a
    run wait for the one migrating, however long it takes; runs on other databases do not."""
    key = int.from_bytes(hashlib.sha256(f"gpufleet test template {base}".encode()).digest()[:8], "big") >> 1
    with connection._nodb_cursor() as cursor:
        # The settings' lock and statement timeouts (for the control plane's requests) would cut the
        # wait for a migration, which takes twenty seconds and more on a busy machine.
        cursor.execute("SET lock_timeout = 0")
        cursor.execute("SET statement_timeout = 0")
        cursor.execute("SELECT pg_advisory_lock(%s)", [key])
        try:
            yield
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [key])


def _databases_named_like(prefix: str) -> list[str]:
    with connection._nodb_cursor() as cursor:
        cursor.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [prefix + "%"])
        return [name for (name,) in cursor.fetchall()]


def _drop_outdated_templates(prefix: str, current: str) -> None:
    for name in _databases_named_like(prefix):
        if name != current:
            with connection._nodb_cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')


def copy_of_migrated_database(process: str) -> str:
    """Point the connection at a fresh copy of the migrated template, made now for `process`
    (the xdist worker, or "main"); returns the name the connection used before."""
    base = settings.DATABASES["default"]["TEST"]["NAME"].removesuffix(f"_{process}")
    template = f"{base}_migrated_{migrations_digest()}"
    before = connection.settings_dict["NAME"]
    with _template_lock(base):
        if template not in _databases_named_like(template):
            _drop_outdated_templates(f"{base}_migrated_", template)
            connection.settings_dict["TEST"]["NAME"] = template
            connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
        connection.close()
        connection.settings_dict["NAME"] = template
        connection.creation.clone_test_db(suffix=process, verbosity=0, autoclobber=True)
    connection.settings_dict.update(connection.creation.get_test_db_clone_settings(process))
    settings.DATABASES["default"]["NAME"] = connection.settings_dict["NAME"]
    with connection._nodb_cursor() as cursor:
        # A test database need not survive a crash of the server: commits (those of the tests that
        # commit, and of the processes they start) need not wait for the disk.
        cursor.execute(f'ALTER DATABASE "{connection.settings_dict["NAME"]}" SET synchronous_commit TO off')
    return before


def drop_copy(name_before: str) -> None:
    connection.creation.destroy_test_db(name_before, verbosity=0)
