"""Work whose due time is kept in the database rather than in a countdown message.

Redis loses countdown messages when it restarts, and a worker holding one when the broker
restarts dies (kombu's Redis transport). So a reconciler claims the rows that are due and makes
each due again a period later before it sends their messages: a message lost with Redis, or
dropped on expiry in a backlog, is simply sent again, and work that has ended is not due any more.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import Model, QuerySet
from django.db.models.functions import Now


def take_due(rows: QuerySet[Model], *, due_field: str, again_in: timedelta, limit: int) -> list[int]:
    """The ids of up to `limit` of `rows` whose `due_field` has passed, oldest due first, each
    made due again `again_in` later in the same transaction; rows another process is claiming
    are skipped, not waited for."""
    with transaction.atomic():
        due = list(
            rows.filter(**{f"{due_field}__lte": Now()})
            .order_by(due_field)
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)[:limit]
        )
        rows.model._default_manager.filter(pk__in=due).update(**{due_field: Now() + again_in})
    return due
