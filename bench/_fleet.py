"""Many nodes moved at once for a bench's setup (a module whose name starts with _ is no bench).

fleet.services.transition moves one node at a time, with the work its new state starts: tens of
minutes for the thousands a bench lays out, and none of what benches measure. Here a move is two
statements through the models, so that every column a migration adds takes its default.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import QuerySet
from django.db.models.functions import Now

from fleet.models import AuditEvent, Node


def move_nodes(nodes: QuerySet[Node], event: str, to_state: str, **sets) -> None:
    """Move every node of `nodes` to `to_state`, setting `sets` beside it, each with the audit row
    of `event` in the same transaction, as the database's trigger demands."""
    with transaction.atomic():
        moving = list(nodes.values_list("pk", "state"))
        AuditEvent.objects.bulk_create(
            (
                AuditEvent(
                    node_id=pk, actor="bench", event=event, from_state=state, to_state=to_state, reason="bench setup"
                )
                for pk, state in moving
            ),
            batch_size=2000,
        )
        Node.objects.filter(pk__in=[pk for pk, _ in moving]).update(state=to_state, state_since=Now(), **sets)


def make_all_available() -> None:
    """Every enrolled node inspected and attested, as if the workers had passed it."""
    move_nodes(Node.objects.filter(state="enrolled"), "inspection_started", "inspecting")
    move_nodes(Node.objects.filter(state="inspecting"), "attestation_passed", "available")
