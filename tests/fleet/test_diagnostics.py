"""Diagnostics in the fleet: what a run's results say (pure), the pass a node keeps, and the runs on
idle nodes: which nodes are due one, the cap, the looks due, and how a run ends."""

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.db.models.functions import Now
from django.utils import timezone

from fleet import diagnostics, selectors, services
from fleet.models import AuditEvent, IdleDiagnosticRun, IdleDiagnosticStatus, Node
from tests.support.factories import drive

Status = IdleDiagnosticStatus


def result(test: str, gpu: int, passed: bool = True, detail: str = "") -> dict:
    return {"test": test, "gpu": gpu, "passed": passed, "detail": detail}


# What a run's results say


def test_a_run_whose_every_test_passed_failed_nothing():
    assert diagnostics.failed_tests([result("software", 0), result("pcie", 1)]) == []


def test_the_verdict_names_the_first_failed_test_and_gpu_and_counts_the_others():
    failed = diagnostics.failed_tests(
        [
            result("software", 0),
            result("memory_bandwidth", 3, False, "memory_bandwidth failed on GPU 3"),
            result("pcie", 5, False, "replays"),
        ]
    )
    assert [(f.test, f.gpu) for f in failed] == [("memory_bandwidth", 3), ("pcie", 5)]
    assert (
        diagnostics.verdict(failed) == "memory_bandwidth on GPU 3: memory_bandwidth failed on GPU 3 (and 1 more failed)"
    )
    assert diagnostics.verdict(failed[1:]) == "pcie on GPU 5: replays"


@pytest.mark.parametrize(
    "results",
    [
        None,
        "passed",
        {"test": "software"},
        [None],
        [{"test": "software", "gpu": 0}],
        [result("pcie", 1) | {"passed": 1}],
    ],
    ids=["none", "a string", "a dict", "not a dict", "no passed", "passed not true"],
)
def test_results_that_do_not_say_passed_fail_closed(results):
    assert diagnostics.failed_tests(results)


# The pass a node keeps


def test_a_pass_has_its_time_and_a_known_level(node):
    for fields in ({"diagnostic_passed_at": timezone.now()}, {"diagnostic_level": 3}):
        with pytest.raises(IntegrityError), transaction.atomic():
            Node.objects.filter(pk=node.pk).update(**fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        Node.objects.filter(pk=node.pk).update(diagnostic_passed_at=timezone.now(), diagnostic_level=5)
    services.record_diagnostics_pass(node_id=node.pk, level=3)
    node.refresh_from_db()
    assert node.diagnostic_level == 3 and node.diagnostic_passed_at is not None


def passed(node: Node, level: int, days_ago: float = 0) -> None:
    Node.objects.filter(pk=node.pk).update(
        diagnostic_level=level, diagnostic_passed_at=timezone.now() - timedelta(days=days_ago)
    )


def test_only_a_recent_long_pass_counts_as_recent(available_fleet, settings):
    settings.DIAGNOSTICS_RECENT_DAYS = 7
    long_ago, short, recent = available_fleet[:3]
    passed(long_ago, diagnostics.LONG, days_ago=8)
    passed(short, diagnostics.SHORT)  # the inspection after a tenant: the long run is older than the tenant
    passed(recent, diagnostics.LONG, days_ago=6)
    assert list(selectors.recently_passed_long_diagnostics()) == [recent]


# Runs on idle nodes


def test_idle_runs_go_to_available_nodes_without_a_recent_long_pass_longest_untested_first(available_fleet, fleet):
    first, second, tested, maintained = available_fleet[:4]
    passed(first, diagnostics.LONG, days_ago=30)
    passed(second, diagnostics.SHORT, days_ago=1)
    passed(tested, diagnostics.LONG)
    drive(maintained, "operator_maintenance")
    never_tested = [n.pk for n in available_fleet[4:]]
    assert selectors.due_for_idle_diagnostics(limit=20) == [*never_tested, first.pk, second.pk]


def test_at_most_the_cap_run_at_once_one_per_node_each_long(available_fleet):
    opened = services.open_idle_diagnostics(at_once=3)
    runs = IdleDiagnosticRun.objects.filter(pk__in=opened)
    assert len(opened) == 3 and {r.level for r in runs} == {diagnostics.LONG}
    assert services.open_idle_diagnostics(at_once=3) == []
    assert len(services.open_idle_diagnostics(at_once=5)) == 2
    with pytest.raises(IntegrityError), transaction.atomic():
        IdleDiagnosticRun.objects.create(node=runs[0].node, level=3)  # a second run on one node


def test_a_node_whose_run_ended_without_a_pass_waits_before_the_next(available_node, settings):
    settings.IDLE_DIAGNOSTICS_RETRY_SECONDS = 3600
    (run_id,) = services.open_idle_diagnostics(at_once=1)
    services.end_idle_diagnostics(run_id=run_id, status=Status.INTERRUPTED, actor="test", detail="lost")
    assert services.open_idle_diagnostics(at_once=1) == []
    IdleDiagnosticRun.objects.filter(pk=run_id).update(ended_at=Now() - timedelta(hours=2))
    assert len(services.open_idle_diagnostics(at_once=1)) == 1


def test_a_look_is_due_at_once_and_again_a_poll_period_later(available_node, settings):
    settings.IDLE_DIAGNOSTICS_POLL_SECONDS = 30
    (run_id,) = services.open_idle_diagnostics(at_once=1)
    assert services.take_due_idle_diagnostics(limit=10) == [run_id]
    assert services.take_due_idle_diagnostics(limit=10) == []  # a lost message is sent again 30 s later
    IdleDiagnosticRun.objects.filter(pk=run_id).update(look_due_at=Now())
    assert services.take_due_idle_diagnostics(limit=10) == [run_id]


def test_a_run_is_started_once_and_ended_once(available_node):
    (run_id,) = services.open_idle_diagnostics(at_once=1)
    started = timezone.now()
    assert services.idle_diagnostics_started(run_id=run_id, started_at=started)
    assert not services.idle_diagnostics_started(run_id=run_id, started_at=started)
    assert services.end_idle_diagnostics(run_id=run_id, status=Status.PREEMPTED, actor="test") == "preempted"
    assert services.end_idle_diagnostics(run_id=run_id, status=Status.PASSED, actor="test") == "preempted"
    available_node.refresh_from_db()
    assert available_node.diagnostic_passed_at is None
    with pytest.raises(IntegrityError), transaction.atomic():
        IdleDiagnosticRun.objects.filter(pk=run_id).update(status=Status.RUNNING)  # running, yet ended


def test_a_passed_run_is_recorded_on_its_node(available_node):
    (run_id,) = services.open_idle_diagnostics(at_once=1)
    assert services.end_idle_diagnostics(run_id=run_id, status=Status.PASSED, actor="test") == "passed"
    available_node.refresh_from_db()
    assert available_node.diagnostic_level == diagnostics.LONG
    assert list(selectors.recently_passed_long_diagnostics()) == [available_node]


@pytest.mark.parametrize("where", ["available", "provisioning"])
def test_a_failed_run_quarantines_its_node_diagnostic_failed(available_node, alices_reservation, where):
    (run_id,) = services.open_idle_diagnostics(at_once=1)
    if where == "provisioning":  # placement took the node as the run finished
        drive(available_node, "provision_requested", reservation=alices_reservation)
    verdict = "targeted_stress on GPU 2: targeted_stress failed on GPU 2"
    assert services.end_idle_diagnostics(run_id=run_id, status=Status.FAILED, actor="test", detail=verdict) == "failed"
    node = Node.objects.get(pk=available_node.pk)
    assert (node.state, node.quarantine_reason) == ("quarantined", f"diagnostic_failed: {verdict}")
    audit = AuditEvent.objects.get(node=node, event="diagnostic_failed")
    assert audit.from_state == where and audit.detail == {"idle_diagnostic_run": run_id, "level": 3}


def test_a_failed_run_leaves_a_node_an_operator_took_where_it_is(available_node):
    (run_id,) = services.open_idle_diagnostics(at_once=1)
    drive(available_node, "operator_maintenance")
    assert services.end_idle_diagnostics(run_id=run_id, status=Status.FAILED, actor="test", detail="x") == "failed"
    assert Node.objects.get(pk=available_node.pk).state == "maintenance"
