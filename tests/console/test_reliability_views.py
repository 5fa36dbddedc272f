"""Automatic remediation's reliability figures on the real PostgreSQL: the selectors, the gauges of
GET /metrics/fleet, and the remediations page's figures and chart."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from console.pages import figures, selectors
from core.topology import GPU_MODEL
from fleet.models import Node
from remediation.models import IncidentEvent, Remediation
from reservations.models import ReservationEvent, Tenant
from tests.support.factories import enrol_default_fleet, make_available, xid_under_a_tenant

MINUTE = timedelta(minutes=1)
DAY = timedelta(days=1)
# Prometheus's credential for the scrapes (core/prometheus_auth.py): it reads no session.
PROMETHEUS = {"Authorization": f"Bearer {settings.GPUFLEET_PROMETHEUS_TOKEN}"}
# What a signed-in operator's page reads before its own queries: its session and its user.
SIGNED_IN = 2


@pytest.fixture
def client(admin_client):
    """An operator signed in: the private listener's pages are for signed-in viewers only."""
    return admin_client


def record(node: Node, status: str, step: str, *, fault_at, reservation=None, mode="enforce", **steps):
    """A remediation received 30 s after its fault, with its timeline: step name -> time; one that
    acted counts against the blast-radius cap from its receipt until its verdict."""
    received = fault_at + timedelta(seconds=30)
    acted = mode == "enforce" and status in ("pending", "repaired", "applied")
    verdict = max(steps.get("repaired") or steps.get("quarantined") or received, received)
    remediation = Remediation.objects.create(
        fingerprint=f"{Remediation.objects.count():016x}",
        starts_at=fault_at.isoformat(),
        alert="GPUFatalXid",
        alert_status="firing",
        labels={"node": node.name},
        node=node,
        gpu=3,
        action="gpu_hang",
        reason="test",
        status=status,
        step=step,
        at=received,
        reservation=reservation,
        mode=mode,
        recheck_due_at=fault_at if status == "pending" else None,
        counted_from=received if acted else None,
        counted_until=verdict if acted and status != "pending" else None,
    )
    timeline = {"alert_firing": fault_at, "webhook_received": received, **steps}
    IncidentEvent.objects.bulk_create(
        IncidentEvent(remediation=remediation, step=name, at=at) for name, at in timeline.items()
    )
    return remediation


@pytest.fixture
def history(fleet, alices_reservation):
    """Five incidents in the last 30 days on three nodes (three ended: 20, 1 and 30 minutes; two
    open), one before them, and records that are no incident."""
    now = timezone.now()
    one, two, three = fleet[:3]
    record(one, "repaired", "gpu_reset", fault_at=now - 10 * DAY, repaired=now - 10 * DAY + 20 * MINUTE)
    record(one, "applied", "quarantine", fault_at=now - 5 * DAY, quarantined=now - 5 * DAY + MINUTE)
    # Quarantined under a tenant: it ends when the replacement is up.
    fault = now - 3 * DAY
    record(two, "applied", "quarantine", fault_at=fault, quarantined=fault + MINUTE, reservation=alices_reservation)
    for event, at in [
        ("active", fault - DAY),
        ("replacement_placed", fault + 2 * MINUTE),
        ("active", fault + 30 * MINUTE),
    ]:
        ReservationEvent.objects.create(reservation=alices_reservation, event=event, at=at, actor="test")
    record(two, "pending", "gpu_reset", fault_at=now - DAY)  # a repair under way
    # Quarantined under the same reservation a day later: no replacement came up since.
    record(
        three,
        "applied",
        "quarantine",
        fault_at=now - 2 * DAY,
        quarantined=now - 2 * DAY,
        reservation=alices_reservation,
    )
    # No incident: suppressed, calling for nothing, a shadow rule's, and before the window.
    record(three, "suppressed", "quarantine", fault_at=now - 2 * DAY, suppressed=now - 2 * DAY)
    record(three, "no_action", "", fault_at=now - 4 * DAY)
    record(three, "no_action", "gpu_reset", fault_at=now - 4 * DAY, mode="shadow", shadow=now - 4 * DAY)
    record(three, "repaired", "gpu_reset", fault_at=now - 40 * DAY, repaired=now - 40 * DAY + MINUTE)
    return fleet


def samples(client) -> dict:
    answer = client.get("/metrics/fleet", headers=PROMETHEUS)
    assert answer.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(answer.content.decode())
        for s in family.samples
    }


def queries(client, url: str, headers: dict[str, str] | None = None) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url, headers=headers).status_code == 200
    return len(captured)


# -- the selector --------------------------------------------------------------------------


def test_the_figures_over_the_last_30_days(history):
    figures = selectors.remediation_reliability()
    assert (figures.repair.ended, figures.repair.open) == (3, 2)
    assert (figures.repair.mean, figures.repair.median) == (17 * MINUTE, 20 * MINUTE)
    assert [(entry.node, entry.incidents, entry.mean_gap) for entry in figures.mtbi_per_node] == [
        ("node-002", 2, 2 * DAY),
        ("node-001", 2, 5 * DAY),
    ]
    assert [(m.gpu_model, m.nodes, m.incidents, m.node_time_between_incidents) for m in figures.mtbi_per_gpu_model] == [
        (GPU_MODEL, 12, 5, 12 * 30 * DAY / 5)
    ]
    assert figures.by_step_and_status == {
        ("gpu_reset", "repaired"): 1,
        ("gpu_reset", "pending"): 1,
        ("quarantine", "applied"): 3,
        ("quarantine", "suppressed"): 1,
        ("", "no_action"): 1,
    }


def test_a_real_quarantine_under_a_tenant_ends_when_its_replacement_is_active(client, transactional_db):
    make_available(enrol_default_fleet())
    applied, reservation, _ = xid_under_a_tenant(Tenant.objects.create(name="acme"))
    fault = applied.timeline.get(step="alert_firing").at
    active = reservation.events.filter(event="active").latest("at", "id").at
    figures = selectors.remediation_reliability()
    assert (figures.repair.ended, figures.repair.mean) == (1, active - fault)


def test_no_remediation_gives_no_figures(fleet):
    figures = selectors.remediation_reliability()
    assert (figures.repair.ended, figures.repair.open, figures.repair.mean) == (0, 0, None)
    assert figures.mtbi_per_gpu_model == figures.mtbi_per_node == []
    assert figures.by_step_and_status == {}


# -- /metrics/fleet ------------------------------------------------------------------------


def test_the_gauges_of_mttr_mtbi_and_remediations_by_rung_and_outcome(client, history):
    found = samples(client)
    assert found[("gpufleet_remediation_mttr_seconds", ())] == 17 * 60
    assert found[("gpufleet_remediation_median_time_to_repair_seconds", ())] == 20 * 60
    assert found[("gpufleet_remediation_mtbi_seconds", (("gpu_model", GPU_MODEL),))] == 12 * 30 * 86400 / 5
    by_step = {labels: value for (name, labels), value in found.items() if name == "gpufleet_remediations_by_step"}
    assert by_step == {
        (("status", "repaired"), ("step", "gpu_reset")): 1,
        (("status", "pending"), ("step", "gpu_reset")): 1,
        (("status", "applied"), ("step", "quarantine")): 3,
        (("status", "suppressed"), ("step", "quarantine")): 1,
        (("status", "no_action"), ("step", "none")): 1,
    }


def test_without_incidents_the_averages_are_absent_not_zero(client, fleet):
    names = {name for name, _ in samples(client)}
    assert not names & {
        "gpufleet_remediation_mttr_seconds",
        "gpufleet_remediation_median_time_to_repair_seconds",
        "gpufleet_remediation_mtbi_seconds",
    }
    assert ("gpufleet_nodes", (("pod", "p1"), ("state", "enrolled"))) in samples(client)


def test_the_scrape_runs_as_many_queries_at_12_nodes_as_at_50(client, history, alice):
    at_12 = queries(client, "/metrics/fleet", PROMETHEUS)
    enrol_default_fleet(50)
    now = timezone.now()
    for node in Node.objects.filter(name__gte="node-020")[:10]:
        record(node, "applied", "quarantine", fault_at=now - DAY, quarantined=now - DAY + MINUTE)
    assert queries(client, "/metrics/fleet", PROMETHEUS) == at_12 <= 8


# -- the remediations page -----------------------------------------------------------------


def test_the_page_says_mttr_and_mtbi(client, history):
    html = client.get("/remediations").content.decode()
    (mttr,) = re.findall(r"<p data-mttr>(.*?)</p>", html, re.S)
    assert "mean <strong>17 min</strong>, median <strong>20 min</strong>, over 3 incidents; 2 still open" in mttr
    assert re.search(rf'data-gpu-model="{GPU_MODEL}"><td>{GPU_MODEL}</td><td>12</td><td>5</td><td>72 d</td>', html)
    nodes = re.findall(r'data-mtbi-node="([^"]+)">.*?<td>(\d+)</td><td>([^<]+)</td>', html)
    assert nodes == [("node-002", "2", "2 d"), ("node-001", "2", "5 d")]


def test_the_chart_has_a_bar_a_day_for_14_days_stacked_by_outcome(client, history):
    html = client.get("/remediations").content.decode()
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert '<title id="per-day-title">' in svg and '<desc id="per-day-desc">' in svg and 'role="img"' in svg
    bars = re.findall(r'<g class="bar" data-day="([\d-]+)" data-total="(\d+)">', svg)
    assert len(bars) == 14
    today = timezone.localdate()
    assert [day for day, _ in bars] == [(today - timedelta(days=13 - i)).isoformat() for i in range(14)]
    # The six remediations the page lists (a suppressed one among them), not those that called for nothing.
    assert sum(int(total) for _, total in bars) == 6
    assert len(re.findall(r'<rect data-outcome="suppressed"', svg)) == 1
    # The same numbers as a table, for whoever cannot see the chart.
    rows = re.findall(r'<tr data-day="([\d-]+)"><th scope="row">[\d-]+</th>((?:<td>\d+</td>)+)</tr>', html)
    assert [day for day, _ in rows] == [day for day, _ in bars]
    assert sum(int(n) for _, cells in rows for n in re.findall(r"\d+", cells)) == 6


def test_a_page_without_remediations_has_an_empty_chart_and_says_so(client, fleet):
    html = client.get("/remediations").content.decode()
    assert "No incident ended; 0 still open." in html
    assert len(re.findall(r'<g class="bar" data-day="[\d-]+" data-total="0">', html)) == 14
    assert "<rect data-outcome" not in html


def test_the_page_runs_as_many_queries_at_12_nodes_as_at_50(client, history):
    at_12 = queries(client, "/remediations")
    enrol_default_fleet(50)
    now = timezone.now()
    for node in Node.objects.filter(name__gte="node-020")[:10]:
        record(node, "repaired", "gpu_reset", fault_at=now - DAY, repaired=now - DAY + MINUTE)
    assert queries(client, "/remediations") == at_12 <= 9 + SIGNED_IN


@pytest.mark.parametrize(
    ("delta", "said"),
    [
        (timedelta(0), "0 s"),
        (timedelta(seconds=59.6), "1 min"),
        (timedelta(minutes=14, seconds=3), "14 min 3 s"),
        (timedelta(days=2, hours=5, minutes=59), "2 d 5 h"),
        (timedelta(days=2, minutes=5), "2 d 5 min"),
    ],
)
def test_durations_in_words_keep_their_two_largest_units(delta, said):
    assert figures.duration(delta) == said
