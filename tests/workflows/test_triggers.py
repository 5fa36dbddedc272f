"""At most one waiting workflow message per node, marked in the tests' own Redis broker."""

import base64
import json

import pytest
from django.conf import settings

from fleet.models import Node
from tests.support.factories import drive, enrol_default_fleet
from workflows import tasks
from workflows import triggers as workflow_triggers


def waiting_messages(broker) -> list[int]:
    """The node of each run_workflow message in the queue, sorted (a wipe's first step also asks
    for a fabric sync there)."""
    messages = (json.loads(m) for m in broker.lrange("celery", 0, -1))
    bodies = (
        json.loads(base64.b64decode(m["body"])) for m in messages if m["headers"]["task"] == tasks.run_workflow.name
    )
    return sorted(args[0] for args, _kwargs, _embed in bodies)


def test_a_node_gets_a_second_message_only_once_the_first_was_picked_up(broker):
    assert workflow_triggers.mark_waiting([1, 2]) == [1, 2]
    assert workflow_triggers.mark_waiting([2, 3]) == [3]
    workflow_triggers.unmark(2)
    assert workflow_triggers.mark_waiting([2, 1]) == [2]
    assert 0 < broker.ttl(f"{workflow_triggers.PREFIX}1") <= settings.WORKFLOW_MESSAGE_EXPIRES


@pytest.mark.django_db(transaction=True)
def test_the_reconciler_sends_nothing_for_a_node_whose_message_still_waits(broker, settings):
    settings.RECONCILE_SECONDS = 0  # every wiping node is overdue at once
    nodes = [drive(node, "operator_quarantine", "operator_return") for node in enrol_default_fleet(3)]
    assert waiting_messages(broker) == [n.pk for n in nodes]  # sent on commit of each transition
    assert tasks.reconcile_nodes()["enqueued"] == 0
    assert waiting_messages(broker) == [n.pk for n in nodes]

    broker.delete("celery")  # lost with a Redis restart, marks included
    broker.delete(*(f"{workflow_triggers.PREFIX}{n.pk}" for n in nodes))
    assert tasks.reconcile_nodes()["enqueued"] == 3
    assert waiting_messages(broker) == [n.pk for n in nodes]
    assert Node.objects.filter(state="wiping").count() == 3
