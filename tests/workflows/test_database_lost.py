"""A worker whose database goes away mid-step (its primary killed, a standby promoted) leaves
nothing of the step half-done, waits for the database to answer again, and starts the node's
workflow over under the lease it holds, as a takeover does: no wait for the lease to run out.
tests/e2e/test_postgres_failover.py does it across a real failover."""

from __future__ import annotations

import pytest

from fleet.leases import WAITING_ON_HARDWARE
from fleet.models import AuditEvent, Node
from tests.support.connections import another_connection, end_this_connection
from tests.support.factories import drive
from tests.support.fake_hardware import FakeAgent, FakeBMC
from workflows import node_workflows
from workflows.clients import Clients


class AgentWhoseFirstRunLosesTheDatabase(FakeAgent):
    """Diagnostics that pass at once; while the first run starts, the worker's database goes away."""

    def __init__(self, node: Node):
        super().__init__(node)
        self.started: list[int] = []

    def start_diagnostics(self, level: int) -> dict:
        self.started.append(level)
        if len(self.started) == 1:
            end_this_connection()
        return {"state": "running", "level": level, "started_at": float(len(self.started)), "results": []}

    def diagnostics(self) -> dict:
        run = {"state": "succeeded", "level": self.started[-1], "started_at": float(len(self.started))}
        return {**run, "results": [{"test": "software", "gpu": g["index"], "passed": True} for g in self.gpus]}


@pytest.mark.django_db(transaction=True)
def test_a_step_that_loses_its_database_starts_the_workflow_over_once_it_is_back(node):
    drive(node, "inspection_started")
    agent = AgentWhoseFirstRunLosesTheDatabase(node)
    clients = Clients(bmc=lambda node: FakeBMC([]), agent=lambda node: agent)
    token = Node.objects.get(pk=node.pk).fencing_token

    outcome = node_workflows.run_workflow(node_id=node.pk, worker="test", clients=clients)

    assert outcome == "database lost at wait_for_diagnostics, paused at attest"  # attestation is not configured here
    assert agent.started == [1, 1]
    steps = AuditEvent.objects.filter(node=node, event="step_changed").order_by("id").values_list("reason", "detail")
    first_visit = ["boot_service_image", "wait_for_agent", "check_firmware", "check_inventory", "start_diagnostics"]
    # The step change the lost connection was writing is not there: it is written again, once, after the start over.
    assert [reason for reason, _ in steps] == [*first_visit, *first_visit, "wait_for_diagnostics", "attest"]
    assert {detail["token"] for _, detail in steps} == {token + 1}, "one lease throughout"
    node.refresh_from_db()
    # Paused at attest: parked, held by no worker, until attestation is looked at again.
    assert (node.state, node.diagnostic_level, node.lease_owner) == ("inspecting", 1, WAITING_ON_HARDWARE)


class AgentWhoseRunIsTakenOverWhileTheDatabaseIsGone(AgentWhoseFirstRunLosesTheDatabase):
    """As above, and while the worker has no database a successor claims the node (its lease ran
    out: the worker had stalled, and the server ended its connection)."""

    def __init__(self, node: Node):
        super().__init__(node)
        self.node_id = node.pk

    def start_diagnostics(self, level: int) -> dict:
        if not self.started:
            with another_connection() as other:
                other.execute(
                    "UPDATE fleet_node SET fencing_token = fencing_token + 1, lease_owner = 'successor',"
                    " lease_expires_at = now() + interval '1 minute' WHERE id = %s",
                    [self.node_id],
                )
        return super().start_diagnostics(level)


@pytest.mark.django_db(transaction=True)
def test_a_step_that_loses_its_database_and_then_its_lease_is_audited_as_discarded(node):
    drive(node, "inspection_started")
    agent = AgentWhoseRunIsTakenOverWhileTheDatabaseIsGone(node)
    clients = Clients(bmc=lambda node: FakeBMC([]), agent=lambda node: agent)

    outcome = node_workflows.run_workflow(node_id=node.pk, worker="test", clients=clients)

    assert outcome == "database lost at wait_for_diagnostics"
    (discarded,) = AuditEvent.objects.filter(node=node, event="result_discarded")
    assert (discarded.actor, discarded.detail["attempted"]) == ("worker:test", "step wait_for_diagnostics")
    assert Node.objects.get(pk=node.pk).lease_owner == "successor"
