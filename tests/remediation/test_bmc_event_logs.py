"""BMC event logs (SEL) as a fault source: how an entry maps onto the remediation ladders, how the
reader keeps its cursor on a real bmcsim (new entries only, 304 when nothing was logged, a log that
wrapped, was cleared or started its Ids again), and the sweep: each entry acted on once, under the
cap, never twice for a GPU the agent already reported, and a BMC that hangs holding no other."""

from __future__ import annotations

import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.db.models.functions import Now
from django.utils import timezone

from core.parsing import InvalidInput
from core.topology import bmc_password
from fleet.models import AuditEvent, Node
from remediation import rules, services
from remediation.models import BMCEventLogCursor, Remediation
from tests.support.bmcsim import start_bmcsim
from tests.support.factories import drive, make_available
from workflows.bmc_event_logs import Cursor, read_due, read_new_entries
from workflows.redfish import BMCAccess, RedfishClient

NODES = 3
NODE = "node-001"
ENTRIES = f"/redfish/v1/Systems/{NODE}/LogServices/SEL/Entries"
PSU = "Power.1.0.1.PowerSupplyFailed"
FAN = "Environmental.1.1.0.FanFailed"
THERMAL_TRIP = "Environmental.1.1.0.TemperatureAboveUpperFatalThreshold"
PLATFORM_ERROR = "Platform.1.0.1.PlatformErrorAtLocation"


def log_entry(entry_id="7", *, severity="Critical", message_id=PSU, message="Power supply 'PSU1' has failed.", **more):
    return {
        "Id": entry_id,
        "Created": "2026-12-01T10:00:00.123+00:00",
        "EntryType": "SEL",
        "Severity": severity,
        "MessageId": message_id,
        "Message": message,
        **more,
    }


def at_gpu(gpu: int) -> dict:
    return {"Links": {"OriginOfCondition": {"@odata.id": f"/redfish/v1/Systems/{NODE}/Processors/GPU{gpu}"}}}


# -- the rules ---------------------------------------------------------------------------------


def alert_of(node: str, entry: dict) -> rules.Alert:
    """The alert of an entry that must make one."""
    alert = rules.sel_entry(node, entry)
    assert alert is not None, f"{entry} makes no alert"
    return alert


def test_a_critical_entry_quarantines_a_warning_is_recorded_and_ok_calls_for_nothing():
    critical = rules.decide(alert_of(NODE, log_entry()))
    assert (critical.rule, critical.step, critical.node, critical.gpu) == (
        "hardware_failed",
        rules.Step.QUARANTINE,
        NODE,
        None,
    )
    assert critical.reason == f"sel: {PSU}: Power supply 'PSU1' has failed."

    warning = alert_of(NODE, log_entry(severity="Warning", message_id=FAN, message="Fan 'Fan 3' has failed."))
    assert warning.name == rules.BMC_WARNING_EVENT
    assert rules.decide(warning) == rules.Decision("none", None, NODE, None, f"sel: {FAN}: Fan 'Fan 3' has failed.")

    assert rules.sel_entry(NODE, log_entry(severity="OK")) is None
    assert rules.sel_entry(NODE, {"Id": "9", "Message": "no severity"}) is None


def test_a_platform_error_at_a_gpu_climbs_xid_79s_ladder_and_other_critical_events_at_a_gpu_do_not():
    lost = rules.decide(alert_of(NODE, log_entry(message_id=PLATFORM_ERROR, **at_gpu(3))))
    assert (lost.rule, lost.step, lost.gpu) == (rules.XIDS[79].ladder, rules.Step.REBOOT, 3)
    # Another version of the registry says the same.
    newer = rules.decide(alert_of(NODE, log_entry(message_id="Platform.1.1.0.PlatformErrorAtLocation", **at_gpu(3))))
    assert newer.rule == "gpu_lost"
    at_the_system = rules.decide(alert_of(NODE, log_entry(message_id=PLATFORM_ERROR)))
    assert at_the_system.rule == "hardware_failed"
    too_hot = rules.decide(alert_of(NODE, log_entry(message_id=THERMAL_TRIP, **at_gpu(3))))
    assert (too_hot.rule, too_hot.gpu) == ("hardware_failed", 3)


def test_an_entry_is_keyed_by_its_node_its_id_and_its_created():
    first = alert_of(NODE, log_entry("7"))
    assert (first.fingerprint, first.starts_at) == (
        alert_of(NODE, log_entry("7", message="read again")).fingerprint,
        "2026-12-01T10:00:00.123+00:00",
    )
    assert alert_of("node-002", log_entry("7")).fingerprint != first.fingerprint
    assert alert_of(NODE, log_entry("8")).fingerprint != first.fingerprint
    restarted = alert_of(NODE, log_entry("7", Created="2026-12-02T08:00:00+00:00"))
    assert (restarted.fingerprint, restarted.starts_at) == (first.fingerprint, "2026-12-02T08:00:00+00:00")
    assert alert_of(NODE, log_entry("7", Created="yesterday")).starts_at == ""
    assert dict(first.labels) == {
        "alertname": rules.BMC_CRITICAL_EVENT,
        "node": NODE,
        "entry": "7",
        "message_id": PSU,
        "source": "bmc",
    }


@pytest.mark.parametrize(
    "entry",
    [
        [],
        {"Severity": "Critical", "Message": "no Id"},
        log_entry(7),
        log_entry("x" * 129),
        log_entry(message="a NUL \0 in it"),
        log_entry(MessageId=["not", "text"]),
    ],
)
def test_an_entry_that_cannot_be_read_or_stored_is_refused(entry):
    with pytest.raises(InvalidInput):
        rules.sel_entry(NODE, entry)


# -- the reader, against bmcsim ----------------------------------------------------------------


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    sim = start_bmcsim(tmp_path_factory.mktemp("bmcsim") / "data", nodes=NODES)
    yield sim
    sim.stop()


@pytest.fixture(autouse=True)
def empty_logs(request):
    """Every test that uses bmcsim starts with no fault and an empty SEL on every node."""
    if "sim" not in request.fixturenames:
        return
    sim = request.getfixturevalue("sim")
    assert sim.delete("/bmcsim/v1/faults", timeout=30).status_code == 200
    for number in range(1, NODES + 1):
        clear = f"/redfish/v1/Systems/node-{number:03d}/LogServices/SEL/Actions/LogService.ClearLog"
        assert sim.post(clear, json={}).status_code == 204


def log(sim, node: str = NODE, **event) -> str:
    """Log an event in the node's SEL; its entry's Id."""
    answer = sim.post("/bmcsim/v1/faults", json={"node": node, "kind": "sel", **event})
    assert answer.status_code == 201, answer.text
    return answer.json()["entry"]


def lose_gpu(sim, node: Node, gpu: int) -> None:
    """XID 79: the GPU falls off the bus, and the BMC logs the PCIe link it lost in its SEL."""
    fault = {"node": node.name, "kind": "xid", "gpu": gpu, "xid": 79}
    assert sim.post("/bmcsim/v1/faults", json=fault).status_code == 201


def bmc(sim, node: str = NODE) -> RedfishClient:
    return RedfishClient(BMCAccess(node, sim.url, node, "admin", bmc_password(node)), attempts=1)


def ids(entries: list[dict]) -> list[str]:
    return [e["Id"] for e in entries]


def first_read(client: RedfishClient) -> Cursor:
    read = read_new_entries(client, Cursor("", "", "", 0, ""), first=True)
    assert read.new_entries == []
    return read.cursor


def test_the_sel_is_found_through_the_systems_log_services(sim):
    assert bmc(sim).event_log_entries_path() == ENTRIES


def test_a_first_read_takes_the_log_as_history_then_only_new_entries_are_read(sim):
    history = [log(sim, message_id=FAN) for _ in range(3)]
    client = bmc(sim)
    cursor = first_read(client)
    assert (cursor.entries_path, cursor.last_entry_id, cursor.position) == (ENTRIES, history[-1], 3)

    new = [log(sim, message_id=PSU), log(sim, message_id=FAN)]
    calls = client.calls
    read = read_new_entries(client, cursor)
    assert ids(read.new_entries) == new
    assert client.calls - calls == 1  # the page from the cursor's entry on
    assert [e["MessageId"] for e in read.new_entries] == [PSU, FAN]
    assert (read.cursor.last_entry_id, read.cursor.position) == (new[-1], 5)
    assert read.cursor.last_entry_created == read.new_entries[-1]["Created"]


def test_a_log_with_nothing_new_answers_304_to_one_request(sim):
    log(sim, message_id=FAN)
    client = bmc(sim)
    cursor = read_new_entries(client, first_read(client)).cursor
    assert client.log_entries(ENTRIES, skip=0, top=1, etag=cursor.etag) is None  # bmcsim's 304
    calls = client.calls
    again = read_new_entries(client, cursor)
    assert (again.new_entries, again.cursor, client.calls - calls) == ([], cursor, 1)


def test_new_entries_past_one_page_are_all_read(sim):
    client = bmc(sim)
    cursor = first_read(client)
    new = [log(sim, message_id=FAN) for _ in range(5)]
    read = read_new_entries(client, cursor, page=2)
    assert ids(read.new_entries) == new
    assert read.cursor.position == 5
    assert read_new_entries(client, read.cursor, page=2).new_entries == []


def test_a_cleared_log_is_read_from_its_start(sim):
    log(sim, message_id=FAN)
    client = bmc(sim)
    cursor = first_read(client)
    assert sim.post(f"{ENTRIES.removesuffix('/Entries')}/Actions/LogService.ClearLog", json={}).status_code == 204
    emptied = read_new_entries(client, cursor)
    assert emptied.new_entries == [] and (emptied.cursor.last_entry_id, emptied.cursor.position) == ("", 0)
    logged_since = [log(sim, message_id=PSU), log(sim, message_id=FAN)]
    assert ids(read_new_entries(client, emptied.cursor).new_entries) == logged_since

    # Cleared and written again between two reads: the cursor's entry is gone, all of it is new.
    sim.post(f"{ENTRIES.removesuffix('/Entries')}/Actions/LogService.ClearLog", json={})
    written_again = [log(sim, message_id=FAN) for _ in range(3)]
    assert ids(read_new_entries(client, cursor, page=2).new_entries) == written_again


def test_a_log_whose_ids_started_again_is_read_whole(sim):
    """A BMC whose log started over (replaced, reset to its factory state) numbers its entries from
    1 again: the cursor's entry is not in it, whatever its Ids."""
    logged = [log(sim, message_id=FAN), log(sim, message_id=PSU)]
    former = Cursor(ENTRIES, logged[0], "2020-01-01T00:00:00+00:00", 900, 'W/"900-1000"')
    assert ids(read_new_entries(bmc(sim), former).new_entries) == logged


def test_a_log_that_wrapped_is_read_back_to_the_cursors_entry(sim):
    """A full log drops its oldest entries as it logs new ones: the cursor's entry is no longer
    where it stood, and is found again reading back from the end."""
    logged = [log(sim, message_id=FAN) for _ in range(6)]
    client = bmc(sim)
    # The cursor's entry is the third, but stood first when it was read: two older ones went since.
    cursor = Cursor(ENTRIES, logged[2], _created(client, logged[2]), 1, "")
    read = read_new_entries(client, cursor, page=2)
    assert ids(read.new_entries) == logged[3:]
    assert (read.cursor.last_entry_id, read.cursor.position) == (logged[-1], 6)


def _created(client: RedfishClient, entry_id: str) -> str:
    return client.get(f"{ENTRIES}/{entry_id}")["Created"]


# -- the sweep: bmcsim's fleet enrolled, read and acted on -------------------------------------


@pytest.fixture
def managed(sim, db) -> list[Node]:
    """bmcsim's nodes enrolled, inspected and available, their logs read once (history)."""
    call_command("seed_fleet", "--bmcsim-url", sim.url, stdout=StringIO())
    nodes = make_available(list(Node.objects.order_by("name")))
    sweep()
    return nodes


def sweep() -> dict:
    """Every cursor made due, and the sweep the beat sends."""
    BMCEventLogCursor.objects.update(read_due_at=Now())
    return read_due(limit=100)


def test_the_sweep_reads_managed_nodes_only_and_a_first_read_acts_on_nothing(sim, db):
    call_command("seed_fleet", "--bmcsim-url", sim.url, stdout=StringIO())
    enrolled, available, quarantined = Node.objects.order_by("name")
    make_available([available])
    drive(quarantined, "operator_quarantine")
    for node in (enrolled, available, quarantined):
        log(sim, node.name, message_id=PSU, severity="Critical")
    assert sweep() == {"read": 2, "failed": 0, "new_entries": 0}
    assert set(BMCEventLogCursor.objects.values_list("node__name", flat=True)) == {available.name, quarantined.name}
    assert not Remediation.objects.exists()
    cursor = BMCEventLogCursor.objects.get(node=available)
    assert (cursor.entries_path, cursor.position, cursor.read_at is not None) == (
        f"/redfish/v1/Systems/{available.name}/LogServices/SEL/Entries",
        1,
        True,
    )
    assert sweep() == {"read": 2, "failed": 0, "new_entries": 0}  # nothing logged since: 304s
    assert read_due(limit=100) == {"read": 0, "failed": 0, "new_entries": 0}  # not due again yet


def test_a_critical_event_quarantines_the_node_and_a_warning_is_only_recorded(sim, managed):
    critical, warned, _ = managed
    log(sim, critical.name, message_id=PSU, severity="Critical", args=["PSU2"])
    log(sim, warned.name, message_id=FAN)
    assert sweep() == {"read": NODES, "failed": 0, "new_entries": 2}

    critical.refresh_from_db()
    assert critical.state == "quarantined"
    assert critical.quarantine_reason == f"hardware_fault: sel: {PSU}: Power supply 'PSU2' has failed."
    (quarantine,) = AuditEvent.objects.filter(node=critical, event="hardware_fault")
    assert quarantine.actor == services.AUTOMATIC_ACTOR  # counted against the cap
    (acted,) = Remediation.objects.filter(node=critical)
    assert (acted.alert, acted.action, acted.step, acted.status) == (
        rules.BMC_CRITICAL_EVENT,
        "hardware_failed",
        "quarantine",
        "applied",
    )
    assert [e.step for e in acted.timeline.all()] == ["alert_firing", "webhook_received", "quarantined"]

    (recorded,) = Remediation.objects.filter(node=warned)
    assert (recorded.alert, recorded.action, recorded.status, recorded.reason) == (
        rules.BMC_WARNING_EVENT,
        "none",
        "no_action",
        f"sel: {FAN}: Fan 'Fan 3' has failed.",
    )
    assert Node.objects.get(pk=warned.pk).state == "available"


def test_an_entry_read_twice_is_acted_on_once(sim, managed):
    node = managed[0]
    before = BMCEventLogCursor.objects.get(node=node)
    log(sim, node.name, message_id=FAN)
    lose_gpu(sim, node, 3)
    sweep()
    recorded = sorted(Remediation.objects.values_list("pk", "status", "step"))
    assert [(status, step) for _, status, step in recorded] == [("no_action", ""), ("pending", "reboot")]
    # The cursor lost (restored from a backup, say): the same entries are read again.
    BMCEventLogCursor.objects.filter(pk=before.pk).update(
        last_entry_id=before.last_entry_id, position=before.position, etag=""
    )
    assert sweep()["new_entries"] == 2
    assert sorted(Remediation.objects.values_list("pk", "status", "step")) == recorded


def test_over_the_cap_a_critical_event_is_suppressed_and_recorded(sim, managed, settings):
    settings.REMEDIATION_CAP = 1
    first, second, _ = managed
    log(sim, first.name, message_id=PSU, severity="Critical")
    sweep()
    log(sim, second.name, message_id=PSU, severity="Critical")
    sweep()
    assert Node.objects.get(pk=first.pk).state == "quarantined"
    assert Node.objects.get(pk=second.pk).state == "available"
    suppressed = Remediation.objects.get(node=second)
    assert suppressed.status == "suppressed"
    assert "suppressed: 1 automatic remediation in the last 10 minutes (cap 1)" in suppressed.reason


def test_a_gpu_off_the_bus_that_the_agent_reported_is_not_acted_on_again_from_the_sel(sim, managed):
    node = managed[0]
    lose_gpu(sim, node, 3)
    seen_at = timezone.now().isoformat().replace("+00:00", "Z")
    reported, _ = services.receive_agent_report(node=node, gpu=3, xid=79, occurrence=1, seen_at=seen_at)
    assert (reported.status, reported.step) == ("pending", "reboot")
    services.step_finished(remediation_id=reported.pk, healthy=True)  # the reboot brought it back

    assert sweep()["new_entries"] == 1
    logged = Remediation.objects.get(alert=rules.BMC_CRITICAL_EVENT)
    assert (logged.action, logged.gpu, logged.status, logged.step) == ("gpu_lost", 3, "no_action", "")
    assert logged.reason.endswith(f"already acted on by remediation {reported.pk} ({rules.AGENT_XID_REPORT})")
    assert Remediation.objects.exclude(status="no_action").get() == reported
    assert Node.objects.get(pk=node.pk).state == "available"


def test_an_agents_report_after_the_sel_entry_of_the_same_gpu_is_not_acted_on_again(sim, managed):
    node = managed[0]
    lose_gpu(sim, node, 5)  # the agent's report is late: the SEL is read first
    sweep()
    logged = Remediation.objects.filter(alert=rules.BMC_CRITICAL_EVENT).exclude(status="no_action").get()
    assert (logged.gpu, logged.status, logged.step) == (5, "pending", "reboot")
    seen_at = timezone.now().isoformat().replace("+00:00", "Z")
    late, _ = services.receive_agent_report(node=node, gpu=5, xid=79, occurrence=1, seen_at=seen_at)
    assert late.status == "no_action"
    assert late.reason.endswith(f"already acted on by remediation {logged.pk} ({rules.BMC_CRITICAL_EVENT})")


def test_a_bmc_that_hangs_holds_no_other_and_is_read_again_later(sim, managed, settings):
    settings.BMC_TIMEOUT = 1
    hung, critical, _ = managed
    assert sim.post("/bmcsim/v1/faults", json={"node": hung.name, "kind": "bmc_timeout"}).status_code == 201
    log(sim, critical.name, message_id=PSU, severity="Critical")
    began = time.monotonic()
    assert sweep() == {"read": NODES - 1, "failed": 1, "new_entries": 1}
    assert time.monotonic() - began < 5
    assert Node.objects.get(pk=critical.pk).state == "quarantined"
    failed = BMCEventLogCursor.objects.get(node=hung)
    assert hung.name in failed.failure and "Timeout" in failed.failure

    sim.delete("/bmcsim/v1/faults")
    log(sim, hung.name, message_id=FAN)
    assert sweep()["failed"] == 0
    assert BMCEventLogCursor.objects.get(node=hung).failure == ""
    assert Remediation.objects.get(node=hung).alert == rules.BMC_WARNING_EVENT


def test_a_node_that_operators_hold_is_read_but_not_acted_on(sim, managed):
    node = drive(managed[0], "operator_maintenance")
    log(sim, node.name, message_id=PSU, severity="Critical")  # a power supply pulled for its replacement
    assert sweep()["new_entries"] == 1
    assert not Remediation.objects.exists()
    assert Node.objects.get(pk=node.pk).state == "maintenance"
    drive(node, "operator_return")  # back to service: what it logged meanwhile stays read
    assert sweep()["new_entries"] == 0
    assert not Remediation.objects.exists()
