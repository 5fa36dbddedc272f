"""A GPU reset the rules call for is due in the database and the reconciler has a worker look at
it then (start it, see how it went), and again if the message is lost; repeat offenders are
quarantined; an alert's firing and resolved notifications are recorded apart."""

import base64
import json
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from core import clock
from fleet.models import AuditEvent, Node
from remediation import rules, services
from remediation.models import Remediation
from tests.support.factories import alert, payload
from workflows import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def repairs_queued(broker) -> list[int]:
    """The remediation of each repair_gpu message in the queue, sorted."""
    messages = [json.loads(m) for m in broker.lrange("celery", 0, -1)]
    repairs = (m for m in messages if m["headers"]["task"] == "workflows.tasks.repair_gpu")
    return sorted(json.loads(base64.b64decode(m["body"]))[0][0] for m in repairs)


def reset_gpu_alert(node: Node, n: int = 0) -> dict:
    return alert(node.name, xid=109, name="GPUResetRequiredXid", n=n)


def receive(*alerts) -> list[Remediation]:
    parsed = rules.parse_webhook(payload(*alerts))
    accepted = [entry for entry in parsed if isinstance(entry, rules.Alert)]
    assert accepted == parsed, "an alert was refused"
    return services.receive_alerts(accepted)


def time_passes_until_the_repair_is_due() -> None:
    Remediation.objects.filter(status="pending").update(recheck_due_at=Now() - timedelta(seconds=1))


def test_a_reset_decision_is_pending_and_due_at_once_in_the_database(broker, available_fleet):
    (pending,) = receive(reset_gpu_alert(available_fleet[0]))
    pending.refresh_from_db()
    assert (pending.status, pending.step) == ("pending", "gpu_reset")
    assert pending.recheck_due_at is not None and pending.recheck_due_at <= pending.at + timedelta(seconds=1)
    assert repairs_queued(broker) == []  # no countdown message for Redis to lose
    assert tasks.reconcile_remediations() == {"repairs_looked_at": 1}
    assert repairs_queued(broker) == [pending.pk]


def test_a_repair_lost_with_a_redis_flush_is_sent_again_by_the_reconciler(broker, available_fleet, settings):
    settings.REMEDIATION_RECHECK_SECONDS = 30
    node = available_fleet[0]
    (pending,) = receive(reset_gpu_alert(node))
    assert tasks.reconcile_remediations() == {"repairs_looked_at": 1}
    assert tasks.reconcile_remediations() == {"repairs_looked_at": 0}  # sent once

    broker.flushdb()  # Redis restarted before a worker took the message
    time_passes_until_the_repair_is_due()  # a recheck period later
    assert tasks.reconcile_remediations() == {"repairs_looked_at": 1}
    assert repairs_queued(broker) == [pending.pk]

    # What a worker does with the message: this node's agent does not answer, so the reset did not
    # help, and the ladder's next rung is due at once (the node serves no tenant to warn).
    assert tasks.repair_gpu(pending.pk) == "pending"
    remediation = Remediation.objects.get(pk=pending.pk)
    assert remediation.step == "reboot" and "the agent could not reset it" in remediation.reason
    assert remediation.recheck_due_at is not None and remediation.recheck_due_at <= timezone.now()
    assert services.step_finished(remediation_id=pending.pk, healthy=False).step == "quarantine"
    assert Node.objects.get(pk=node.pk).state == "quarantined"
    time_passes_until_the_repair_is_due()
    assert tasks.reconcile_remediations() == {"repairs_looked_at": 0}
    assert services.step_finished(remediation_id=pending.pk, healthy=True).status == "applied"  # done once


def test_a_reset_is_overdue_once_the_now_it_is_given_is_past_its_timeout(available_fleet, settings):
    settings.REMEDIATION_RESET_TIMEOUT_SECONDS = 60
    (pending,) = receive(reset_gpu_alert(available_fleet[0]))
    started_at = clock.now()
    assert services.step_started(remediation_id=pending.pk, now=started_at)
    remediation = Remediation.objects.get(pk=pending.pk)
    assert remediation.step_started_at == remediation.timeline.get(step="gpu_reset").at == started_at
    assert not services.step_overdue(remediation)  # by the database's clock it has only just begun
    assert not services.step_overdue(remediation, now=started_at + timedelta(seconds=60))
    assert services.step_overdue(remediation, now=started_at + timedelta(seconds=61))  # no minute slept


def test_the_third_remediation_of_a_node_in_a_week_quarantines_it_as_a_repeat_offender(available_fleet, settings):
    settings.REMEDIATION_POD_CAP = 4  # each of the three incidents counts against the pod's cap
    node = available_fleet[0]
    for n in range(2):
        (remediation,) = receive(reset_gpu_alert(node, n=n))
        assert services.step_finished(remediation_id=remediation.pk, healthy=True).status == "repaired"
    (third,) = receive(reset_gpu_alert(node, n=2))  # its reset would succeed too
    assert (third.status, third.step) == ("applied", "quarantine")
    node.refresh_from_db()
    assert node.state == "quarantined"
    assert node.quarantine_reason.startswith("hardware_fault: repeat_offender: remediation 3 in 7 days")
    other = available_fleet[1]
    (first,) = receive(reset_gpu_alert(other, n=3))
    assert first.status == "pending"  # another node's count is its own


def test_a_resolved_notification_received_first_does_not_swallow_the_firing_one(available_fleet, settings):
    settings.GPUFLEET_WEBHOOK_TOKEN = "test-webhook-token"
    node = available_fleet[0]
    firing = alert(node.name)
    resolved = {**firing, "status": "resolved", "endsAt": "2026-11-29T17:05:00.123456789Z"}

    def send(one: dict):
        body = json.dumps(payload(one, status=one["status"]))
        answer = APIClient().post(
            "/v1/alerts/alertmanager",
            body,
            content_type="application/json",
            HTTP_AUTHORIZATION="Bearer test-webhook-token",
        )
        assert answer.status_code == 200, answer.content

    send(resolved)  # Alertmanager's notifications can arrive out of order
    assert Node.objects.get(pk=node.pk).state == "available"
    send(firing)
    assert Node.objects.get(pk=node.pk).state == "quarantined"
    send(firing)
    send(resolved)  # repeats of either are answered, not redone
    recorded = dict(Remediation.objects.values_list("alert_status", "status"))
    assert recorded == {"resolved": "no_action", "firing": "applied"}
    assert Remediation.objects.count() == 2
    assert AuditEvent.objects.filter(node=node, event="hardware_fault").count() == 1


def test_the_sweep_for_due_repairs_is_served_by_its_partial_index(available_fleet):
    with CaptureQueriesContext(connection) as queries:
        tasks.reconcile_remediations()
    (sweep,) = [q["sql"] for q in queries if "FOR UPDATE SKIP LOCKED" in q["sql"]]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # an empty table would be scanned anyway
        cursor.execute(f"EXPLAIN {sweep}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "remediation_recheck_due_idx" in plan, plan
