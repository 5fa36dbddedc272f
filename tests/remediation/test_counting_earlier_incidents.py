"""Migration remediation 0007 counts the incidents recorded before the cap kept their spans: from
their decision until their verdict, open while they climb, and nothing the cap never counted."""

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("remediation", "0006_bmc_event_log_cursor")]
AFTER = [("remediation", "0007_blast_radius_incidents")]


@pytest.fixture
def latest_schema_after():
    """Every app migrated to its latest again after the test, whatever later migrations there are:
    the tests after it expect today's schema."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_earlier_incidents_count_from_their_decision_to_their_verdict(fleet, latest_schema_after):
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    remediation, event = old.get_model("remediation", "Remediation"), old.get_model("remediation", "IncidentEvent")
    decided = timezone.now() - timedelta(minutes=5)

    def record(n: int, status: str, **fields):
        row = remediation.objects.create(
            fingerprint=f"{n:016x}", starts_at="t", alert="GPUFatalXid", alert_status="firing", node_id=fleet[n].pk,
            action="gpu_lost", reason="r", status=status, at=decided, **fields,
        )  # fmt: skip
        return row.pk

    climbing = record(0, "pending", step="reboot", recheck_due_at=decided)
    repaired = record(1, "repaired", step="reboot")
    event.objects.create(remediation_id=repaired, step="repaired", at=decided + timedelta(seconds=90))
    quarantined = record(2, "applied", step="quarantine")
    event.objects.create(remediation_id=quarantined, step="quarantined", at=decided + timedelta(seconds=1))
    uncounted = [
        record(3, "suppressed", step="quarantine"),
        record(4, "applied", step="quarantine", decided_by="operator:admin"),
        record(5, "no_action", mode="shadow"),
    ]

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps.get_model("remediation", "Remediation")
    spans = dict(
        (pk, (start, end)) for pk, start, end in new.objects.values_list("pk", "counted_from", "counted_until")
    )
    assert spans[climbing] == (decided, None)
    assert spans[repaired] == (decided, decided + timedelta(seconds=90))
    assert spans[quarantined] == (decided, decided + timedelta(seconds=1))
    assert [spans[pk] for pk in uncounted] == [(None, None)] * 3
