"""Diagnostics driven through a node's agent (a fake one here, whose runs end as each test says):
the short level at every inspection and the burn-in after quarantine or maintenance; long runs on
idle nodes, looked at by workers, preempted by placement before anything else is done to the node."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest

from fleet import selectors, services
from fleet.leases import Lease
from fleet.models import AuditEvent, IdleDiagnosticRun, Node
from reservations import services as reservations
from reservations.models import Reservation
from tests.support.factories import drive
from tests.support.fake_hardware import FakeAgent, FakeBMC
from tests.support.time_passing import lease_runs_out
from workflows import idle_diagnostics, node_workflows, tasks
from workflows.agent import AgentCannot, AgentError
from workflows.clients import Clients

# The tests a fake run reports, per level it includes (agent.sim has DCGM's whole list).
TESTS = {1: ("software",), 3: ("targeted_stress",)}


class DiagnosingAgent(FakeAgent):
    """A node's agent whose diagnostics run for `polls` looks, then fail the (test, GPU) pairs in
    `failing` and pass the rest; `cannot`: a server without DCGM (501)."""

    def __init__(self, node: Node, log: list[str], *, polls: int = 0, failing=(), cannot: bool = False):
        super().__init__(node)
        self.log = log
        self.polls, self.failing, self.cannot = polls, set(failing), cannot
        self.run: dict = {"state": "idle", "level": None, "started_at": None, "results": []}
        self.started: list[int] = []
        self.on_start = None  # what happens elsewhere while the agent starts a run

    def start_diagnostics(self, level: int) -> dict:
        if self.cannot:
            raise AgentCannot("node: agent diagnostics: diagnostics on a real server need DCGM")
        if self.run["state"] == "running":
            raise AgentError("node: agent diagnostics: 409 already running")
        self.started.append(level)
        self.run = {"state": "running", "level": level, "started_at": 1.7e9 + len(self.started) / 8, "results": []}
        self.left = self.polls
        if self.on_start:
            self.on_start()
        return dict(self.run)

    def diagnostics(self) -> dict:
        if self.run["state"] == "running":
            if self.left:
                self.left -= 1
            else:
                self.finish()
        return dict(self.run)

    def finish(self) -> None:
        tests = [t for level, ts in TESTS.items() if level <= self.run["level"] for t in ts]
        results = [
            {"test": t, "gpu": g["index"], "passed": (t, g["index"]) not in self.failing, "detail": ""}
            for t in tests
            for g in self.gpus
        ]
        for r in results:
            r["detail"] = "" if r["passed"] else f"{r['test']} failed on GPU {r['gpu']}"
        self.run = {**self.run, "state": "succeeded", "results": results}

    def evidence(self, nonce: bytes) -> dict:
        self.log.append("evidence")
        return {}

    def cancel_diagnostics(self) -> dict:
        self.log.append("cancel_diagnostics")
        if self.run["state"] == "running":
            self.run = {**self.run, "state": "cancelled"}
        return dict(self.run)


class Hardware:
    """The fake agent (and BMC) a test builds, `hardware(node, **agent_options)`, which the
    workflows below are handed (`hardware.clients`)."""

    clients: Clients  # the last node's, once one is built

    def __init__(self) -> None:
        self.log: list[str] = []

    def __call__(self, node: Node, **options) -> DiagnosingAgent:
        agent = DiagnosingAgent(node, self.log, **options)
        self.clients = Clients(bmc=lambda node: FakeBMC(self.log), agent=lambda node: agent)
        return agent


@pytest.fixture
def hardware() -> Hardware:
    return Hardware()


def run_workflow(node: Node, hardware: Hardware) -> str:
    return node_workflows.run_workflow(node_id=node.pk, worker="test", clients=hardware.clients)


def steps(node: Node, state: str = "inspecting") -> list[str]:
    rows = AuditEvent.objects.filter(node=node, event="step_changed", from_state=state)
    return list(rows.order_by("id").values_list("reason", flat=True))


# At inspection


def test_every_inspection_runs_the_short_level_before_attestation_and_records_the_pass(node, hardware):
    agent = hardware(node)
    drive(node, "inspection_started")
    assert run_workflow(node, hardware) == "paused at attest"  # attestation is not configured here
    assert "evidence" not in hardware.log  # ... which is known before any evidence is asked for
    node.refresh_from_db()
    assert agent.started == [1]
    assert (node.diagnostic_level, node.diagnostic_passed_at is not None) == (1, True)
    assert steps(node) == [
        "boot_service_image",
        "wait_for_agent",
        "check_firmware",  # no baseline here: nothing to check
        "check_inventory",
        "start_diagnostics",
        "wait_for_diagnostics",
        "attest",
    ]


@pytest.mark.parametrize(
    ("way_out", "level"),
    [("operator_quarantine", 3), ("operator_maintenance", 3), ("hardware_fault", 3), (None, 1)],
    ids=["quarantine", "maintenance", "fault", "after-a-tenant"],
)
def test_a_node_back_from_quarantine_or_maintenance_is_burnt_in_at_the_long_level(
    available_node, alices_reservation, hardware, way_out, level
):
    if way_out is None:
        drive(available_node, "provision_requested", "provision_succeeded", "released", reservation=alices_reservation)
    else:
        drive(available_node, way_out, "operator_return")
    drive(available_node, "wipe_succeeded")
    agent = hardware(available_node)
    assert run_workflow(available_node, hardware) == "paused at attest"
    assert agent.started == [level]
    assert Node.objects.get(pk=available_node.pk).diagnostic_level == level


def test_a_failed_test_quarantines_the_node_naming_the_test_and_the_gpu(node, hardware):
    hardware(node, failing=[("software", 3), ("software", 5)])
    drive(node, "inspection_started")
    assert run_workflow(node, hardware) == "diagnostic_failed"
    node.refresh_from_db()
    assert node.state == "quarantined"
    assert (
        node.quarantine_reason == "diagnostic_failed: software on GPU 3: software failed on GPU 3 (and 1 more failed)"
    )
    assert node.diagnostic_passed_at is None
    assert not AuditEvent.objects.filter(node=node, event="attestation_passed").exists()


def test_a_long_wait_is_parked_and_resumed_on_the_same_run(node, hardware, settings):
    settings.WORKFLOW_HOLD_SECONDS = 0  # every wait that does not end at once parks the node
    settings.WORKFLOW_RECHECK_MAX_SECONDS = 0.01
    agent = hardware(node, polls=2)
    drive(node, "inspection_started")
    assert run_workflow(node, hardware) == "waiting at wait_for_diagnostics"
    hold = timedelta(seconds=settings.WORKFLOW_RECHECK_MAX_SECONDS)
    lease_runs_out(node, after=hold)  # the hold expires: the reconciler would send the node again
    assert run_workflow(node, hardware) == "waiting at wait_for_diagnostics"
    lease_runs_out(node, after=hold)
    assert run_workflow(node, hardware) == "paused at attest"
    assert agent.started == [1]  # the one run, never started again
    assert steps(node).count("wait_for_diagnostics") == 1


def test_the_diagnostics_wait_is_bounded_by_its_timeout(node, hardware, settings):
    settings.DIAGNOSTICS_TIMEOUT = 0
    hardware(node, polls=1000)
    drive(node, "inspection_started")
    assert run_workflow(node, hardware) == "inspection_failed"
    reason = Node.objects.get(pk=node.pk).quarantine_reason
    assert reason.startswith("inspection_failed: wait_for_diagnostics: timed out after 0s waiting for the level 1")


def test_a_node_whose_agent_cannot_run_diagnostics_is_inspected_without_them(node, hardware):
    hardware(node, cannot=True)
    drive(node, "inspection_started")
    assert run_workflow(node, hardware) == "paused at attest"
    assert Node.objects.get(pk=node.pk).diagnostic_passed_at is None


# On idle nodes


def looks_queued(broker) -> list[int]:
    messages = [json.loads(m) for m in broker.lrange("celery", 0, -1)]
    looks = (m for m in messages if m["headers"]["task"] == "workflows.tasks.look_at_idle_diagnostics")
    return sorted(json.loads(base64.b64decode(m["body"]))[0][0] for m in looks)


def test_the_reconciler_opens_runs_up_to_the_cap_and_sends_the_looks_due(available_fleet, broker, settings):
    settings.IDLE_DIAGNOSTICS_AT_ONCE = 2
    assert tasks.reconcile_idle_diagnostics() == {"opened": 2, "looked_at": 2}
    runs = sorted(IdleDiagnosticRun.objects.values_list("pk", flat=True))
    assert looks_queued(broker) == runs
    assert tasks.reconcile_idle_diagnostics() == {"opened": 0, "looked_at": 0}  # next look a poll period later


def open_run(node: Node) -> IdleDiagnosticRun:
    (run_id,) = services.open_idle_diagnostics(at_once=1)
    run = IdleDiagnosticRun.objects.get(pk=run_id)
    assert run.node_id == node.pk
    return run


def look(run: IdleDiagnosticRun, hardware: Hardware) -> str:
    return idle_diagnostics.look_at_run(run.pk, clients=hardware.clients)


def test_an_idle_run_is_started_looked_at_and_its_pass_recorded(available_node, hardware):
    agent = hardware(available_node, polls=1)
    run = open_run(available_node)
    assert [look(run, hardware), look(run, hardware), look(run, hardware)] == ["running", "running", "passed"]
    assert agent.started == [3]
    assert Node.objects.get(pk=available_node.pk).diagnostic_level == 3
    assert selectors.due_for_idle_diagnostics(limit=10) == []  # a recent long pass


def test_a_failing_idle_run_quarantines_the_node(available_node, hardware):
    hardware(available_node, failing=[("targeted_stress", 2)])
    run = open_run(available_node)
    assert [look(run, hardware), look(run, hardware)] == ["running", "failed"]
    node = Node.objects.get(pk=available_node.pk)
    assert node.state == "quarantined"
    assert node.quarantine_reason == "diagnostic_failed: targeted_stress on GPU 2: targeted_stress failed on GPU 2"


def reserve(node: Node, alice) -> Reservation:
    """Placement takes the node (the only available one) for a reservation that starts now."""
    reservation = reservations.create_reservation(tenant=alice, node_count=1, actor="test")
    assert Node.objects.get(pk=node.pk).reservation_id == reservation.pk
    return reservation


def test_placement_takes_a_node_under_diagnostics_and_provisioning_cancels_them_first(available_node, alice, hardware):
    agent = hardware(available_node, polls=1000)
    run = open_run(available_node)
    assert look(run, hardware) == "running"
    reserve(available_node, alice)  # still placeable while its diagnostics run
    # Booted and checked; what is left is the fabrics' read-back (tests/workflows/test_fabric_sync.py).
    assert run_workflow(available_node, hardware) == "waiting at wait_for_tenant_networks"
    run.refresh_from_db()
    assert (run.status, run.detail) == ("preempted", "placement wants the node; the agent's run: cancelled")
    assert agent.run["state"] == "cancelled"
    assert hardware.log.index("cancel_diagnostics") < hardware.log.index("reset")  # before the tenant's boot
    assert steps(available_node, "provisioning")[0] == "stop_idle_diagnostics"


def test_a_run_that_had_failed_before_placement_came_still_quarantines_the_node(available_node, alice, hardware):
    agent = hardware(available_node, failing=[("targeted_stress", 4)])
    run = open_run(available_node)
    assert look(run, hardware) == "running"
    agent.finish()  # it ended failing; no worker has looked since
    reservation = reserve(available_node, alice)
    assert run_workflow(available_node, hardware) == "lease lost"  # taken from it
    node = Node.objects.get(pk=available_node.pk)
    assert node.state == "quarantined" and node.quarantine_reason.startswith("diagnostic_failed: targeted_stress")
    assert "reset" not in hardware.log  # the tenant's image was never booted on it
    assert Reservation.objects.get(pk=reservation.pk).state == "degraded"  # and a replacement is sought


def test_a_look_that_finds_the_node_taken_by_an_operator_cancels_the_run(available_node, hardware):
    agent = hardware(available_node, polls=1000)
    run = open_run(available_node)
    assert look(run, hardware) == "running"
    drive(available_node, "operator_maintenance")
    assert look(run, hardware) == "preempted"
    assert agent.run["state"] == "cancelled"
    assert IdleDiagnosticRun.objects.get(pk=run.pk).detail == "the node went maintenance; the agent's run: cancelled"


def test_a_late_look_leaves_alone_the_diagnostics_of_the_inspection_that_followed(available_node, hardware):
    agent = hardware(available_node, polls=1000)
    run = open_run(available_node)
    assert look(run, hardware) == "running"
    drive(available_node, "operator_maintenance", "operator_return", "wipe_succeeded")  # the looks fell behind
    agent.run = {**agent.run, "started_at": agent.run["started_at"] + 600}  # the inspection's run
    assert look(run, hardware) == "preempted"
    assert "cancel_diagnostics" not in hardware.log and agent.run["state"] == "running"
    assert IdleDiagnosticRun.objects.get(pk=run.pk).detail == "the node went inspecting, which rebooted it"


def test_a_run_preempted_while_the_agent_was_starting_it_is_stopped(available_node, alice, hardware):
    agent = hardware(available_node, polls=1000)
    run = open_run(available_node)

    def placement_comes_and_provisioning_stops_the_run():
        reserve(available_node, alice)
        lease = Lease(node_id=available_node.pk, owner="test", token=1)  # stop_idle_diagnostics never reads it
        node_workflows.stop_idle_diagnostics(node_workflows.Run(available_node, lease, "test", FakeBMC([]), agent))

    agent.on_start = placement_comes_and_provisioning_stops_the_run
    assert look(run, hardware) == "preempted"
    assert agent.run["state"] == "cancelled"  # what the look had just started


@pytest.mark.parametrize(
    ("agent_options", "detail"),
    [
        ({"cannot": True}, "node: agent diagnostics: diagnostics on a real server need DCGM"),
        ({"polls": 1000}, "still running after 0s: cancelled"),
    ],
    ids=["no-dcgm", "overdue"],
)
def test_a_run_without_a_verdict_is_interrupted_and_the_node_asked_again_later(
    available_node, hardware, settings, agent_options, detail
):
    hardware(available_node, **agent_options)
    run = open_run(available_node)
    if "polls" in agent_options:
        assert look(run, hardware) == "running"
        settings.DIAGNOSTICS_TIMEOUT = 0
    assert look(run, hardware) == "interrupted"
    assert IdleDiagnosticRun.objects.get(pk=run.pk).detail == detail
    assert selectors.due_for_idle_diagnostics(limit=10) == []
    settings.IDLE_DIAGNOSTICS_RETRY_SECONDS = 0
    assert selectors.due_for_idle_diagnostics(limit=10) == [available_node.pk]
