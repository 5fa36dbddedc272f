"""What the benches share (a module whose name starts with _ is no bench): their commands, and the
database each builds its fleet in, its own, made afresh and dropped after.

A bench's database is named GPUFLEET_BENCH_DATABASE (gpufleet_bench unless set) and the bench's
name, so that two checkouts on one server, or the test suite beside a developer's run, bench
apart. It is migrated from nothing, unless GPUFLEET_BENCH_TEMPLATE names a database migrated
already to copy: PostgreSQL copies one in about a second, where migrating takes twenty (the test
suite names its own migrated template).
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import REPO_ROOT

PG = "postgres://postgres@127.0.0.1:5432"


def run(*args, env=None, **kwargs) -> subprocess.CompletedProcess:
    """The command run in the repository root, its output captured; what it wrote to stderr
    passed on if it fails, so that the bench's own failure says why."""
    try:
        return subprocess.run(args, cwd=REPO_ROOT, env=env, check=True, capture_output=True, text=True, **kwargs)
    except subprocess.CalledProcessError as failed:
        sys.stderr.write(failed.stderr)
        raise


def bench_database(bench: str) -> str:
    """The name of the database of the bench named `bench`."""
    return f"{os.environ.get('GPUFLEET_BENCH_DATABASE', 'gpufleet_bench')}_{bench}"


def database_url(name: str) -> str:
    return f"{PG}/{name}"


def psql(statement: str, database: str = "postgres") -> None:
    run("psql", database_url(database), "-qc", statement)


def drop_database(name: str) -> None:
    psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fresh_database(name: str) -> None:
    """The database `name`, empty and migrated, whatever was there before."""
    drop_database(name)
    if template := os.environ.get("GPUFLEET_BENCH_TEMPLATE"):
        psql(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return
    env = {**os.environ, "DATABASE_URL": database_url(name), "DJANGO_SETTINGS_MODULE": "gpufleet.settings"}
    run(sys.executable, "manage.py", "ensure_database", env=env)
    run(sys.executable, "manage.py", "migrate", "-v0", env=env)
