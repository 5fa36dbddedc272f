"""A tenant's reboot or power cycle is a row of due work, not a message: a message lost with Redis
is sent again by the reconciler, one delivered twice acts once, one that comes due after the
reservation let the node go acts never, and the forced restart of a reboot the OS ignored comes
from the reconciler once the grace is over."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError
from django.db.models import F

from fleet import services as fleet_services
from fleet.models import AuditEvent, Node, Pod, PowerAction
from reservations import services as reservations
from tests.support.factories import drive
from tests.support.fake_hardware import FakeAgent, FakeBMC
from workflows import node_workflows, tasks
from workflows.clients import Clients


class BMC(FakeBMC):
    """Resets the system when asked, unless a hung OS ignores the graceful request."""

    def __init__(self, log: list[str], *, os_hung: bool = False):
        super().__init__(log)
        self.os_hung = os_hung
        self.last_reset = "2026-12-01T00:00:00+00:00"

    def reset(self, reset_type: str) -> None:
        self.log.append(reset_type)
        if not (self.os_hung and reset_type == "GracefulRestart"):
            self.last_reset = f"2026-12-01T00:00:{len(self.log):02d}+00:00"

    def last_reset_time(self) -> str | None:
        return self.last_reset


def hardware(bmc: BMC) -> Clients:
    return Clients(bmc=lambda node: bmc, agent=FakeAgent)


@pytest.fixture
def active_node(alice, available_fleet) -> Node:
    reservation = reservations.create_reservation(
        tenant=alice, node_count=1, pod=Pod.objects.get(name="p2"), actor="test"
    )
    return drive(Node.objects.get(reservation=reservation), "provision_succeeded")


def ask(node: Node, action: str) -> PowerAction:
    return fleet_services.request_power_action(node_id=node.pk, action=action, actor="tenant:alice")


def time_passes(power: PowerAction, seconds: float) -> None:
    """What waiting `seconds` does to the row the reconciler compares with the database's clock."""
    PowerAction.objects.filter(pk=power.pk).update(due_at=F("due_at") - timedelta(seconds=seconds))


def test_a_power_action_whose_message_is_lost_is_sent_again_and_runs_once(active_node, settings):
    # In this test's transaction the on-commit message is never sent: it is lost, as with Redis.
    power = ask(active_node, "power-cycle")
    assert tasks.reconcile_power_actions() == {"power_actions_sent": 0, "restart_checks_sent": 0}
    time_passes(power, settings.WORKER_SWEEP_EXPIRES)
    assert tasks.reconcile_power_actions() == {"power_actions_sent": 1, "restart_checks_sent": 0}
    assert tasks.reconcile_power_actions()["power_actions_sent"] == 0  # due again only a period later

    bmc = BMC([])
    assert node_workflows.power_action(power_action_id=power.pk, clients=hardware(bmc)) == "power cycled"
    assert bmc.log == ["PowerCycle"]
    power.refresh_from_db()
    assert (power.state, power.due_at, power.result) == ("done", None, "power cycled")


def test_a_message_delivered_twice_acts_once(active_node):
    power = ask(active_node, "power-cycle")
    bmc = BMC([])
    first = node_workflows.power_action(power_action_id=power.pk, clients=hardware(bmc))
    again = node_workflows.power_action(power_action_id=power.pk, clients=hardware(bmc))
    assert (first, again) == ("power cycled", node_workflows.power.NOT_TAKEN)
    assert bmc.log == ["PowerCycle"]


def test_an_action_that_comes_due_after_the_reservation_let_the_node_go_is_never_run(active_node):
    power = ask(active_node, "reboot")
    reservations.release_reservation(reservation_id=active_node.reservation_id, actor="tenant:alice")
    bmc = BMC([])
    assert (
        node_workflows.power_action(power_action_id=power.pk, clients=hardware(bmc)) == node_workflows.power.NOT_TAKEN
    )
    assert bmc.log == []
    power.refresh_from_db()
    assert (power.state, power.result) == ("expired", "the reservation no longer holds the node")


def test_the_reboot_an_os_ignored_is_forced_after_the_grace_by_the_reconciler(active_node, settings):
    settings.TENANT_REBOOT_GRACE_SECONDS = 120
    power = ask(active_node, "reboot")
    bmc = BMC([], os_hung=True)
    assert node_workflows.power_action(power_action_id=power.pk, clients=hardware(bmc)) == "graceful restart asked"
    assert tasks.reconcile_power_actions()["restart_checks_sent"] == 0  # within the grace
    time_passes(power, 120)
    assert tasks.reconcile_power_actions() == {"power_actions_sent": 0, "restart_checks_sent": 1}

    assert node_workflows.force_restart_if_stuck(power_action_id=power.pk, clients=hardware(bmc)) == "forced"
    assert node_workflows.force_restart_if_stuck(power_action_id=power.pk, clients=hardware(bmc)) != "forced"
    assert bmc.log == ["GracefulRestart", "ForceRestart"]
    forced = AuditEvent.objects.filter(node=active_node, event="power_action", actor="system:power").get()
    assert forced.reason == "reboot forced: no restart within 120s"


def test_a_reboot_the_os_carried_out_is_not_forced(active_node):
    power = ask(active_node, "reboot")
    bmc = BMC([])
    node_workflows.power_action(power_action_id=power.pk, clients=hardware(bmc))
    time_passes(power, 10_000)
    assert tasks.reconcile_power_actions()["restart_checks_sent"] == 1
    assert (
        node_workflows.force_restart_if_stuck(power_action_id=power.pk, clients=hardware(bmc)) == "restarted gracefully"
    )
    assert bmc.log == ["GracefulRestart"]


def test_a_request_replaces_one_not_begun_and_waits_for_one_under_way_at_the_bmc(active_node):
    first = ask(active_node, "reboot")
    second = ask(active_node, "power-cycle")
    first.refresh_from_db()
    assert first.state == "superseded"
    PowerAction.objects.filter(pk=second.pk).update(state="asking", due_at=None, taken_at=F("requested_at"))
    with pytest.raises(fleet_services.PowerActionRefused, match="under way at its BMC"):
        ask(active_node, "reboot")


def test_a_worker_that_stopped_mid_call_leaves_a_failed_action_not_a_second_run(active_node):
    power = ask(active_node, "power-cycle")
    taken_long_ago = F("requested_at") - timedelta(hours=1)
    PowerAction.objects.filter(pk=power.pk).update(state="asking", due_at=None, taken_at=taken_long_ago)
    assert tasks.reconcile_power_actions() == {"power_actions_sent": 0, "restart_checks_sent": 0}
    power.refresh_from_db()
    assert power.state == "failed" and "may have run" in power.result
    ask(active_node, "reboot")  # the node is free for the next request


def test_the_database_refuses_a_second_open_action_on_a_node(active_node):
    power = ask(active_node, "reboot")
    with pytest.raises(IntegrityError):
        PowerAction.objects.create(
            node=active_node,
            reservation_id=power.reservation_id,
            action="reboot",
            requested_by="x",
            due_at=power.due_at,
        )
