"""A tenant with root on its nodes says what it likes about them: XIDs through its agents' reports,
entries it writes into the BMC's event log from the OS, reports of a broken node. All of it spends
the tenant's own budget (GPUFLEET_TENANT_FAULT_BUDGET in the cap's window), never the blast-radius
cap that protects the other tenants; what the BMC's own sensors see still spends the cap; and a
node's agent may report only so fast."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

from fleet.models import Node
from remediation import rules, services
from remediation.models import Remediation
from reservations.models import Reservation, Tenant
from tests.support.agent_credentials import report_token, tenancy_drive
from tests.support.api import post, tenant_client
from tests.support.factories import QUARANTINING_XID, drive

THERMAL_TRIP = "Environmental.1.1.0.TemperatureAboveUpperFatalThreshold"


def token_on(node: Node) -> str:
    """The report token the node's OS holds: its tenancy's while it serves a tenant (what a tenant
    with root reads on its config drive), else its service boot's."""
    if Node.objects.get(pk=node.pk).reservation_id is not None:
        return tenancy_drive(node)[1]["report_token"]
    return report_token(node)


def report_xid(node: Node, *, xid: int = QUARANTINING_XID, gpu: int = 0):
    body = {"gpu": gpu, "xid": xid, "occurrence": 1, "seen_at": timezone.now().isoformat().replace("+00:00", "Z")}
    authorization = f"Bearer {token_on(node)}"
    return APIClient().post(f"/v1/agents/{node.name}/xids", body, format="json", HTTP_AUTHORIZATION=authorization)


def serving(tenant: Tenant, nodes: list[Node]) -> list[Node]:
    reservation = Reservation.objects.create(tenant=tenant, node_count=len(nodes), state="active")
    return [drive(node, "provision_requested", "provision_succeeded", reservation=reservation) for node in nodes]


def sel_entry(entry_id: str, **fields) -> dict:
    return {
        "Id": entry_id,
        "Created": timezone.now().isoformat(),
        "EntryType": "SEL",
        "Severity": "Critical",
        **fields,
    }


def thermal_trip(entry_id: str) -> dict:
    """What the BMC's own temperature sensor logs: out of band."""
    return sel_entry(entry_id, MessageId=THERMAL_TRIP, Message="CPU0 temperature fatal", SensorType="Temperature")


def state(node: Node) -> str:
    return Node.objects.get(pk=node.pk).state


@pytest.fixture
def acme(db) -> Tenant:
    tenant_client("acme")
    return Tenant.objects.get(name="acme")


@pytest.fixture
def globex(db) -> Tenant:
    tenant_client("globex")
    return Tenant.objects.get(name="globex")


def test_a_tenants_own_xid_reports_spend_its_budget_and_never_suppress_another_tenants_quarantine(
    available_fleet, acme, globex, settings
):
    settings.TENANT_FAULT_BUDGET = 3  # the fleet cap (5) and the pod cap (3) as configured by default
    attacker = serving(acme, available_fleet[:5])  # all in pod p1, beside the victims
    cooled, reported = serving(globex, available_fleet[5:7])

    answers = [report_xid(node) for node in attacker]

    assert [answer.status_code for answer in answers] == [202] * 5
    assert [answer.json()["status"] for answer in answers] == ["applied"] * 3 + ["suppressed"] * 2
    assert [state(node) for node in attacker] == ["quarantined"] * 3 + ["active"] * 2
    # The victims' faults: the BMC's own sensor (the cap's), and globex's agent (globex's budget).
    services.receive_sel_entries(node=cooled, entries=[thermal_trip("1")])
    assert report_xid(reported).json()["status"] == "applied"
    assert (state(cooled), state(reported)) == ("quarantined", "quarantined")
    assert Remediation.objects.get(node=cooled).self_reported_by is None  # counted against the cap
    for suppressed in Remediation.objects.filter(status="suppressed"):
        # Recorded for the operators, with the tenant whose word it is.
        assert suppressed.self_reported_by == acme
        assert "suppressed: tenant_fault_budget: 3 faults reported by its tenant's own nodes" in suppressed.reason
        assert [event.step for event in suppressed.timeline.all()][-1] == "suppressed"


def test_a_tenants_reports_of_broken_nodes_and_its_agents_xids_share_one_budget(available_fleet, settings):
    settings.TENANT_FAULT_BUDGET = 3
    acme = tenant_client("acme")
    reservation = post(acme, "/v1/reservations", {"node_count": 4, "pod": "p1"}).json()
    first, second, third, fourth = (Node.objects.get(name=name) for name in reservation["nodes"])
    nodes = f"/v1/reservations/{reservation['id']}/nodes"
    for node in (first, second):
        assert post(acme, f"{nodes}/{node.name}/report", {"description": "broken, honest"}).status_code == 202

    assert report_xid(third).json()["status"] == "applied"
    assert report_xid(fourth).json()["status"] == "suppressed"  # two reports and one XID: spent
    refused = post(acme, f"{nodes}/{fourth.name}/report", {"description": "and this one"})

    assert refused.status_code == 429
    assert refused.json()["detail"].startswith("tenant_fault_budget: your nodes have reported 3 faults")
    assert state(fourth) == "provisioning"  # still the tenant's; the operators see the suppressed XID
    assert Remediation.objects.get(node=fourth).status == "suppressed"


def test_sel_entries_the_host_can_write_spend_the_tenants_budget_and_the_bmcs_own_the_cap(
    available_fleet, acme, globex, settings
):
    settings.TENANT_FAULT_BUDGET, settings.REMEDIATION_CAP = 1, 1
    forged_oem, forged_by_os, overheated = serving(acme, available_fleet[:3])
    (victim,) = serving(globex, available_fleet[3:4])
    oem = sel_entry("1", EntryType="Oem", MessageId="OEM.1.0.GpuFailed", Message="GPU failed")
    by_os = sel_entry("2", GeneratorId="0x0041", MessageId="ResourceEvent.1.0.3.ResourceErrorsDetected")

    services.receive_sel_entries(node=forged_oem, entries=[oem])  # spends acme's one fault
    services.receive_sel_entries(node=forged_by_os, entries=[by_os])  # over acme's budget
    services.receive_sel_entries(node=overheated, entries=[thermal_trip("3")])  # the cap's one
    services.receive_sel_entries(node=victim, entries=[thermal_trip("4")])  # over the cap

    def outcome(node: Node) -> tuple[str, str]:
        remediation = Remediation.objects.get(node=node)
        return remediation.labels["source"], remediation.status

    assert [outcome(node) for node in (forged_oem, forged_by_os, overheated, victim)] == [
        (rules.HOST_SOFTWARE, "applied"),
        (rules.HOST_SOFTWARE, "suppressed"),
        (rules.BMC_SENSORS, "applied"),
        (rules.BMC_SENSORS, "suppressed"),
    ]
    assert "tenant_fault_budget" in Remediation.objects.get(node=forged_by_os).reason
    assert Remediation.objects.get(node=victim).reason.endswith(
        "suppressed: 1 automatic remediation in the last 10 minutes (cap 1)"
    )


@pytest.mark.parametrize(
    ("entry", "in_band"),
    [
        ({"GeneratorId": "0x0041", "SensorType": "Temperature", "MessageId": THERMAL_TRIP}, True),  # the OS
        ({"GeneratorId": "0x0001", "SensorType": "Memory"}, True),  # the BIOS
        ({"GeneratorId": "0x0020", "SensorType": "Critical Interrupt"}, False),  # the BMC itself
        ({"EntryType": "Oem", "MessageId": "Power.1.0.1.PowerSupplyFailed"}, True),
        ({"SensorType": "Critical Interrupt", "MessageId": "Platform.1.0.1.PlatformErrorAtLocation"}, True),
        ({"SensorType": "Power Supply / Converter", "MessageId": "Power.1.0.1.PowerSupplyFailed"}, False),
        ({"MessageId": "Environmental.1.1.0.FanFailed"}, False),
        ({"MessageId": "Acme.1.0.Anything"}, True),
    ],
)
def test_which_sel_entries_are_the_nodes_own_word(entry, in_band):
    alert = rules.sel_entry("node-001", sel_entry("9", **entry))
    assert alert is not None
    assert rules.said_by_the_node(alert) is in_band


def test_a_nodes_xid_reports_are_rate_limited_per_node(available_fleet, settings):
    settings.AGENT_XID_REPORT_RATE = "2/min"
    cache.clear()  # the counts of earlier tests' reports
    flooding, other = available_fleet[:2]
    assert [report_xid(flooding, xid=43, gpu=gpu).status_code for gpu in (0, 1)] == [202, 202]

    refused = report_xid(flooding, xid=43, gpu=2)

    assert refused.status_code == 429
    assert set(refused.json()) == {"detail"}
    assert 0 < int(refused["Retry-After"]) <= 60
    assert report_xid(other, xid=43).status_code == 202  # another node's count is its own
    assert Remediation.objects.filter(node=flooding).count() == 2
