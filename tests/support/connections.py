"""This thread's database connection seen from another: ended by the server as a primary's death or
a shutdown ends it, or changed behind its back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from django.db import connection


@contextmanager
def another_connection() -> Iterator[psycopg.Connection]:
    """A connection of its own to this thread's database, in autocommit."""
    own = connection.settings_dict
    with psycopg.connect(
        host=own["HOST"], port=own["PORT"], user=own["USER"], dbname=own["NAME"], autocommit=True
    ) as other:
        yield other


def end_this_connection() -> None:
    """This thread's connection ended by its server, which psycopg learns at its next statement."""
    pid = connection.connection.info.backend_pid
    with another_connection() as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
