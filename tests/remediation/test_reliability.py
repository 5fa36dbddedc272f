"""remediation.reliability: when an incident ends, MTTR, MTBI and the counts per day. Plain pytest, no Django."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from remediation.reliability import (
    DayCounts,
    IncidentTimes,
    ModelMTBI,
    NodeMTBI,
    RepairTimes,
    mtbi_per_gpu_model,
    mtbi_per_node,
    per_day,
    repair_times,
)

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"
MINUTE = timedelta(minutes=1)


def incident(node="node-001", model=H100, *, at=T0, **times) -> IncidentTimes:
    return IncidentTimes(node=node, gpu_model=model, fault_at=at, **times)


def repaired_after(minutes: int, node="node-001", *, at=T0) -> IncidentTimes:
    return incident(node, at=at, repaired_at=at + minutes * MINUTE)


# -- when an incident ends -----------------------------------------------------------------


def test_a_repair_ends_when_the_node_is_healthy_again():
    assert repaired_after(7).time_to_repair == 7 * MINUTE


def test_a_repair_under_way_is_open():
    assert incident().ended_at is None and incident().time_to_repair is None


def test_a_quarantine_of_an_idle_node_ends_with_the_quarantine():
    assert incident(quarantined_at=T0 + MINUTE).time_to_repair == MINUTE


def test_a_quarantine_under_a_tenant_ends_when_the_replacement_is_up_and_is_open_until_then():
    waiting = incident(quarantined_at=T0 + MINUTE, reservation=5)
    assert waiting.ended_at is None
    replaced = incident(quarantined_at=T0 + MINUTE, reservation=5, replacement_up_at=T0 + 25 * MINUTE)
    assert replaced.time_to_repair == 25 * MINUTE


def test_a_repair_that_made_the_node_healthy_ends_it_whatever_the_reservation():
    assert incident(reservation=5, repaired_at=T0 + 3 * MINUTE).time_to_repair == 3 * MINUTE


# -- MTTR ----------------------------------------------------------------------------------


def test_no_incident_has_no_repair_time():
    assert repair_times([]) == RepairTimes(ended=0, open=0, mean=None, median=None)


def test_open_incidents_are_counted_but_have_no_time():
    assert repair_times([incident(), incident(quarantined_at=T0, reservation=1)]) == RepairTimes(
        ended=0, open=2, mean=None, median=None
    )


def test_mean_and_median_over_the_incidents_that_ended():
    found = repair_times([repaired_after(1), repaired_after(2), repaired_after(30), incident()])
    assert found == RepairTimes(ended=3, open=1, mean=11 * MINUTE, median=2 * MINUTE)


def test_the_median_of_an_even_count_is_the_mean_of_the_middle_two():
    assert repair_times([repaired_after(minutes) for minutes in (1, 2, 4, 40)]).median == 3 * MINUTE


# -- MTBI ----------------------------------------------------------------------------------


def test_a_node_needs_two_incidents_for_a_time_between_them():
    assert mtbi_per_node([incident("node-001"), incident("node-002")]) == []
    assert mtbi_per_node([]) == []


def test_mtbi_per_node_is_the_mean_gap_between_consecutive_faults_most_frequent_first():
    days = timedelta(days=1)
    found = mtbi_per_node(
        [
            incident("node-001", at=T0),
            incident("node-001", at=T0 + 6 * days),  # open incidents are incidents too
            incident("node-001", at=T0 + 2 * days, quarantined_at=T0 + 2 * days),
            repaired_after(5, "node-002", at=T0),
            repaired_after(5, "node-002", at=T0 + days),
        ]
    )
    assert found == [NodeMTBI("node-002", 2, days), NodeMTBI("node-001", 3, 3 * days)]


def test_mtbi_per_gpu_model_is_node_time_over_incidents():
    window = timedelta(days=30)
    found = mtbi_per_gpu_model(
        [incident(model=H100), incident(model=H100), incident(model="B200"), incident(model="")],
        {H100: 10, "B200": 4, "A100": 8},
        window,
    )
    assert found == [
        ModelMTBI("B200", nodes=4, incidents=1, node_time_between_incidents=timedelta(days=120)),
        ModelMTBI(H100, nodes=10, incidents=2, node_time_between_incidents=timedelta(days=150)),
    ]


def test_no_incident_gives_no_mtbi_per_gpu_model():
    assert mtbi_per_gpu_model([], {H100: 10}, timedelta(days=30)) == []


# -- per day -------------------------------------------------------------------------------


def test_per_day_has_every_day_quiet_ones_included_in_the_order_of_the_outcomes():
    first = date(2026, 11, 1)
    rows = [
        (date(2026, 11, 2), "repaired", 2),
        (date(2026, 11, 2), "applied", 1),
        (date(2026, 11, 3), "no_action", 9),  # not an outcome asked for
        (date(2026, 10, 31), "applied", 4),  # before the first day
    ]
    found = per_day(rows, ["applied", "repaired"], first, 3)
    assert found == [
        DayCounts(date(2026, 11, 1), (0, 0)),
        DayCounts(date(2026, 11, 2), (1, 2)),
        DayCounts(date(2026, 11, 3), (0, 0)),
    ]
    assert [day.total for day in found] == [0, 3, 0]


@pytest.mark.parametrize("days", [1, 14])
def test_per_day_without_rows_is_zeros(days):
    found = per_day([], ["applied"], date(2026, 11, 1), days)
    assert len(found) == days and all(day.counts == (0,) for day in found)
