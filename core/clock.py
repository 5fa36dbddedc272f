"""The one clock services and reconcilers read "now" from: the database's, the clock that wrote
the timestamps they compare it with (every db_default=Now(), every update to Now()).

A pass that takes `now` uses the database's clock when it is given none (in its queries' own
statements where it can, `in_query`); a test gives it a later one instead of sleeping
(docs/development.md, "One clock").
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.db.models.functions import Now


def now() -> datetime:
    """The database's time at this statement."""
    # statement_timestamp(), not now(): inside a transaction now() stands still at its start,
    # before the rows that transaction wrote since; Django's Now() is statement_timestamp() too.
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        row = cursor.fetchone()
    assert row is not None, "a SELECT of one value returns one row"
    at: datetime = row[0]
    return at


def in_query(now: datetime | None) -> datetime | Now:
    """What a query compares with: `now`, or (None) the database's Now(), read in that same
    statement rather than in a round trip of its own first."""
    return Now() if now is None else now
