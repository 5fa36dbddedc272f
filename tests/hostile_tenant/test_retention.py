"""A tenant that makes rows (webhook deliveries, reports that become remediations, failed logins)
cannot make the database grow for ever: the retention sweep deletes what each growing table keeps
no longer, in batches, and never what is still in use; the append-only audit tables keep everything."""

from datetime import timedelta
from itertools import count

import pytest
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.conf import settings
from django.contrib.sessions.models import Session
from django.db.models.functions import Now
from django.test import override_settings
from django.utils import timezone

from attestation.models import AttestationResult
from fleet.models import AuditEvent, IdleDiagnosticRun, IdleDiagnosticStatus, Node, NodeCredential, PowerAction
from remediation.models import IncidentEvent, IncidentStep, Remediation, RemediationStatus, RemediationStep
from reservations.models import Webhook, WebhookDelivery, WebhookEvent
from tests.support.factories import enrol_default_fleet, signed_result
from workflows import retention, tasks

pytestmark = pytest.mark.django_db

YEARS_AGO = timedelta(days=3 * 365)
fingerprints = count()


@pytest.fixture
def nodes(db) -> list[Node]:
    return enrol_default_fleet(2)


def aged(row, field: str, age: timedelta):
    type(row).objects.filter(pk=row.pk).update(**{field: Now() - age})
    return row


def survivors(model) -> set[int]:
    return set(model.objects.values_list("pk", flat=True))


def test_sent_and_failed_deliveries_go_after_their_days_and_pending_ones_stay(alice):
    hook = Webhook.objects.create(tenant=alice, url="https://example.com/h", events=["reservation.active"], secret="s")

    def delivery(state, **fields):
        return WebhookDelivery.objects.create(
            webhook=hook,
            message_id=f"msg_{next(fingerprints)}",
            event=WebhookEvent.values[0],
            payload={},
            state=state,
            **fields,
        )

    old_sent = aged(delivery("delivered", delivered_at=timezone.now()), "created_at", YEARS_AGO)
    old_failed = aged(delivery("failed"), "created_at", YEARS_AGO)
    old_pending = aged(delivery("pending"), "created_at", YEARS_AGO)
    recent_sent = delivery("delivered", delivered_at=timezone.now())
    deleted = tasks.delete_old_rows()
    assert deleted["webhook_deliveries"] == 2
    assert survivors(WebhookDelivery) == {old_pending.pk, recent_sent.pk}
    assert old_sent.pk not in survivors(WebhookDelivery) and old_failed.pk not in survivors(WebhookDelivery)


def remediation(node, status, **fields):
    made = Remediation.objects.create(
        fingerprint=f"f{next(fingerprints)}",
        starts_at="2024-01-01T00:00:00Z",
        alert="GPUFatalXid",
        alert_status="firing",
        node=node,
        action="reset",
        reason="test",
        status=status,
        **fields,
    )
    IncidentEvent.objects.create(remediation=made, step=IncidentStep.ALERT_FIRING, at=timezone.now())
    return made


def test_ended_remediations_go_with_their_timelines_and_climbing_or_counted_ones_stay(nodes):
    now = timezone.now()
    ended = aged(remediation(nodes[0], RemediationStatus.NO_ACTION), "at", YEARS_AGO)
    repaired = aged(
        remediation(
            nodes[0],
            RemediationStatus.REPAIRED,
            step=RemediationStep.GPU_RESET,
            counted_from=now - YEARS_AGO,
            counted_until=now - YEARS_AGO,
        ),
        "at",
        YEARS_AGO,
    )
    climbing = aged(
        remediation(
            nodes[1],
            RemediationStatus.PENDING,
            step=RemediationStep.REBOOT,
            recheck_due_at=now,
            counted_from=now - YEARS_AGO,
        ),
        "at",
        YEARS_AGO,
    )
    counted = aged(
        remediation(
            nodes[1],
            RemediationStatus.APPLIED,
            step=RemediationStep.QUARANTINE,
            counted_from=now - YEARS_AGO,
            counted_until=now - timedelta(seconds=1),
        ),
        "at",
        YEARS_AGO,
    )
    recent = aged(remediation(nodes[0], RemediationStatus.NO_ACTION), "at", timedelta(days=6))
    assert tasks.delete_old_rows()["remediations"] == 2
    assert survivors(Remediation) == {climbing.pk, counted.pk, recent.pk}
    assert set(IncidentEvent.objects.values_list("remediation", flat=True)) == survivors(Remediation)
    assert ended.pk not in survivors(Remediation) and repaired.pk not in survivors(Remediation)


@override_settings(RETAIN_REMEDIATIONS_DAYS=1)
def test_a_short_setting_never_forgets_what_the_repeat_offender_rule_still_counts(nodes):
    counted = aged(remediation(nodes[0], RemediationStatus.NO_ACTION), "at", timedelta(days=6))
    aged(remediation(nodes[0], RemediationStatus.NO_ACTION), "at", timedelta(days=8))
    assert tasks.delete_old_rows()["remediations"] == 1
    assert survivors(Remediation) == {counted.pk}


def test_each_nodes_latest_attestation_result_stays_however_old(nodes):
    first, second = (aged(signed_result(nodes[0]), "at", YEARS_AGO + timedelta(days=d)) for d in (1, 0))
    only = aged(signed_result(nodes[1]), "at", YEARS_AGO)
    recent = signed_result(nodes[1])
    assert tasks.delete_old_rows()["attestation_results"] == 2
    assert survivors(AttestationResult) == {second.pk, recent.pk}
    assert first.pk not in survivors(AttestationResult) and only.pk not in survivors(AttestationResult)


def test_ended_idle_diagnostics_runs_go_and_running_ones_stay(nodes):
    def run(node, status, ended_at):
        return IdleDiagnosticRun.objects.create(node=node, level=3, status=status, ended_at=ended_at)

    old = timezone.now() - YEARS_AGO
    passed = run(nodes[0], IdleDiagnosticStatus.PASSED, old)
    running = aged(run(nodes[0], IdleDiagnosticStatus.RUNNING, None), "created_at", YEARS_AGO)
    recent = run(nodes[1], IdleDiagnosticStatus.INTERRUPTED, timezone.now())
    assert tasks.delete_old_rows()["idle_diagnostic_runs"] == 1
    assert survivors(IdleDiagnosticRun) == {running.pk, recent.pk}
    assert passed.pk not in survivors(IdleDiagnosticRun)


def test_finished_power_actions_go_and_open_ones_stay(nodes, alices_reservation):
    def action(node, state, finished_at):
        return PowerAction.objects.create(
            node=node,
            reservation=alices_reservation,
            action="reboot",
            requested_by="tenant:alice",
            state=state,
            due_at=None if finished_at else timezone.now(),
            finished_at=finished_at,
        )

    old = timezone.now() - YEARS_AGO
    done = action(nodes[0], "done", old)
    waiting = aged(action(nodes[0], "due", None), "requested_at", YEARS_AGO)
    recent = action(nodes[1], "failed", timezone.now())
    assert tasks.delete_old_rows()["power_actions"] == 1
    assert survivors(PowerAction) == {waiting.pk, recent.pk}
    assert done.pk not in survivors(PowerAction)


def test_revoked_node_credentials_go_after_their_days_and_live_ones_stay(nodes):
    def credential(node, n: int, revoked_at):
        return NodeCredential.objects.create(
            node=node, holder="boot", nonce=f"nonce-{n}", report_token_sha256=f"{n:064x}", revoked_at=revoked_at
        )

    old = aged(credential(nodes[0], 1, None), "created_at", YEARS_AGO)
    NodeCredential.objects.filter(pk=old.pk).update(revoked_at=Now() - YEARS_AGO)
    live = aged(credential(nodes[0], 2, None), "created_at", YEARS_AGO)
    recent = credential(nodes[1], 3, None)
    NodeCredential.objects.filter(pk=recent.pk).update(revoked_at=Now())
    assert tasks.delete_old_rows()["node_credentials"] == 1
    assert survivors(NodeCredential) == {live.pk, recent.pk}


def login_row(model, username: str, age: timedelta, **fields):
    row = model.objects.create(
        username=username,
        ip_address="198.51.100.7",
        user_agent="x",
        http_accept="*/*",
        path_info="/admin/login/",
        **fields,
    )
    return aged(row, "attempt_time", age)


def test_expired_sessions_and_old_login_rows_go_and_a_lockout_cooling_off_stays(db):
    now = timezone.now()
    Session.objects.create(session_key="expired", session_data="", expire_date=now - timedelta(seconds=1))
    Session.objects.create(session_key="live", session_data="", expire_date=now + timedelta(days=1))
    attempt = {"get_data": "", "post_data": "", "failures_since_start": 5}
    login_row(AccessAttempt, "old", YEARS_AGO, **attempt)
    cooling_off = login_row(AccessAttempt, "locked", timedelta(seconds=1), **attempt)
    login_row(AccessLog, "old", YEARS_AGO)
    kept_log = login_row(AccessLog, "new", timedelta(days=1))
    login_row(AccessFailureLog, "old", YEARS_AGO)
    deleted = tasks.delete_old_rows()
    assert (deleted["sessions"], deleted["login_attempts"], deleted["login_logs"], deleted["login_failure_logs"]) == (
        1,
        1,
        1,
        1,
    )
    assert list(Session.objects.values_list("session_key", flat=True)) == ["live"]
    assert survivors(AccessAttempt) == {cooling_off.pk}
    assert survivors(AccessLog) == {kept_log.pk}
    assert not AccessFailureLog.objects.exists()


def test_a_backlog_goes_in_batches_and_the_audit_tables_keep_everything(nodes):
    for _ in range(5):
        aged(remediation(nodes[0], RemediationStatus.NO_ACTION), "at", YEARS_AGO)
        aged(signed_result(nodes[1]), "at", YEARS_AGO)
    audit_before = AuditEvent.objects.count()
    assert audit_before > 0, "enrolment wrote audit events"
    deleted = retention.delete_old_rows(batch_size=2)
    assert deleted["remediations"] == 5 and deleted["attestation_results"] == 4  # the node's latest stays
    assert AuditEvent.objects.count() == audit_before


def test_the_sweep_runs_hourly_on_the_workers_queue_within_time_limits():
    entry = settings.CELERY_BEAT_SCHEDULE["delete-old-rows"]
    assert entry["task"] == tasks.delete_old_rows.name
    assert entry["schedule"] == 3600
    assert tasks.delete_old_rows.name not in settings.CELERY_TASK_ROUTES, "not the reconcilers' queue"
    limits = settings.CELERY_TASK_ANNOTATIONS[tasks.delete_old_rows.name]
    assert 0 < limits["soft_time_limit"] < limits["time_limit"]
