"""The BMC's system event log (LogServices/SEL): entries for injected events and for a GPU that fell
off the bus, paging, the ETag a reader polls with, ClearLog, and who may read it."""

from __future__ import annotations

import pytest

NODE = "node-001"
SERVICES = f"/redfish/v1/Systems/{NODE}/LogServices"
SEL = f"{SERVICES}/SEL"
ENTRIES = f"{SEL}/Entries"
CLEAR = f"{SEL}/Actions/LogService.ClearLog"


def inject(bmcsim, node: str = NODE, **fault) -> dict:
    r = bmcsim.post("/bmcsim/v1/faults", json={"node": node, **fault})
    assert r.status_code == 201, r.text
    return r.json()


def entries(bmcsim, path: str = ENTRIES, **kwargs) -> list[dict]:
    return bmcsim.get(path, **kwargs).json()["Members"]


@pytest.fixture
def empty_sel(bmcsim, factory_reset):
    assert bmcsim.post(CLEAR, json={}).status_code == 204
    assert entries(bmcsim) == []


def test_the_sel_is_a_log_service_beside_the_console(bmcsim):
    members = [m["@odata.id"] for m in bmcsim.get(SERVICES).json()["Members"]]
    assert members == [f"{SERVICES}/Console", SEL]
    service = bmcsim.get(SEL).json()
    assert (service["Id"], service["LogEntryType"], service["OverWritePolicy"]) == ("SEL", "SEL", "WrapsWhenFull")
    assert service["Entries"] == {"@odata.id": ENTRIES} and service["MaxNumberOfRecords"] == 1000
    assert service["Actions"]["#LogService.ClearLog"]["target"] == CLEAR
    collection = bmcsim.get(ENTRIES).json()
    assert collection["@odata.type"] == "#LogEntryCollection.LogEntryCollection"


@pytest.mark.parametrize(
    ("message_id", "severity", "message", "sensor", "origin"),
    [
        (
            "Power.1.0.1.PowerSupplyFailed",
            "Warning",
            "Power supply 'PSU1' has failed.",
            "Power Supply / Converter",
            "/redfish/v1/Chassis/node-001/Power",
        ),
        (
            "Environmental.1.1.0.FanFailed",
            "Warning",
            "Fan 'Fan 3' has failed.",
            "Fan",
            "/redfish/v1/Chassis/node-001/Thermal",
        ),
        (
            "Environmental.1.1.0.TemperatureAboveUpperFatalThreshold",
            "Critical",
            "Temperature 'CPU0 temperature' reading of 105 degrees (C) is above the 100 upper fatal threshold.",
            "Temperature",
            "/redfish/v1/Chassis/node-001/Thermal",
        ),
        (
            "ResourceEvent.1.0.3.ResourceErrorsDetected",
            "Critical",
            "The resource property DIMM A3 has detected errors of type 'Uncorrectable ECC'.",
            "Memory",
            "/redfish/v1/Systems/node-001",
        ),
    ],
)
def test_an_injected_event_is_logged_with_its_registry_message(
    bmcsim, empty_sel, message_id, severity, message, sensor, origin
):
    logged = inject(bmcsim, kind="sel", message_id=message_id)
    (entry,) = entries(bmcsim)
    assert logged == {
        "node": NODE,
        "kind": "sel",
        "entry": entry["Id"],
        "severity": severity,
        "message_id": message_id,
        "message": message,
    }
    assert entry["@odata.type"].startswith("#LogEntry.") and entry["@odata.id"] == f"{ENTRIES}/{entry['Id']}"
    assert (entry["EntryType"], entry["Severity"], entry["MessageId"], entry["Message"]) == (
        "SEL",
        severity,
        message_id,
        message,
    )
    assert entry["SensorType"] == sensor and entry["Links"]["OriginOfCondition"] == {"@odata.id": origin}
    assert entry["Created"].endswith("+00:00")
    assert bmcsim.get(f"{ENTRIES}/{entry['Id']}").json() == entry
    # An event, not a standing fault: not listed, and DELETE /bmcsim/v1/faults leaves the log alone.
    assert bmcsim.get("/bmcsim/v1/faults").json() == {"faults": []}
    bmcsim.delete("/bmcsim/v1/faults")
    assert entries(bmcsim) == [entry]


def test_an_event_may_carry_its_own_severity_arguments_and_message(bmcsim, empty_sel):
    inject(bmcsim, kind="sel", message_id="Power.1.0.1.PowerSupplyFailed", severity="Critical", args=["PSU3"])
    inject(bmcsim, kind="sel", message_id="OEM.1.0.ChassisIntrusion", severity="Warning", message="Lid opened.")
    inject(bmcsim, kind="sel", message_id="0x6F0100FF", severity="OK")
    first, second, third = entries(bmcsim)
    assert (first["Severity"], first["Message"], first["MessageArgs"]) == (
        "Critical",
        "Power supply 'PSU3' has failed.",
        ["PSU3"],
    )
    assert (second["MessageId"], second["Message"], second["Severity"]) == (
        "OEM.1.0.ChassisIntrusion",
        "Lid opened.",
        "Warning",
    )
    assert "SensorType" not in second and "Links" not in second
    assert (third["Message"], third["Severity"]) == ("0x6F0100FF", "OK")
    assert [int(e["Id"]) for e in (first, second, third)] == sorted(int(e["Id"]) for e in (first, second, third))
    assert len({e["Id"] for e in (first, second, third)}) == 3


def test_a_gpu_that_fell_off_the_bus_is_a_critical_sel_entry(bmcsim, empty_sel):
    inject(bmcsim, kind="xid", gpu=6, xid=48)  # a double-bit ECC error: the GPU's, not the BMC's, to log
    assert entries(bmcsim) == []
    inject(bmcsim, kind="xid", gpu=6, xid=79)
    (entry,) = entries(bmcsim)
    assert (entry["Severity"], entry["MessageId"], entry["SensorType"]) == (
        "Critical",
        "Platform.1.0.1.PlatformErrorAtLocation",
        "Critical Interrupt",
    )
    assert "GPU6" in entry["Message"] and "fell off the bus" in entry["Message"]
    assert entry["Links"]["OriginOfCondition"] == {"@odata.id": f"/redfish/v1/Systems/{NODE}/Processors/GPU6"}


def test_entries_page_with_skip_and_top_and_ids_keep_growing_after_a_clear(bmcsim, empty_sel):
    for _ in range(5):
        inject(bmcsim, kind="sel", message_id="Environmental.1.1.0.FanFailed")
    everything = entries(bmcsim)
    ids = [int(e["Id"]) for e in everything]
    assert ids == list(range(ids[0], ids[0] + 5))

    page = bmcsim.get(ENTRIES, params={"$skip": "1", "$top": "2"}).json()
    assert page["Members@odata.count"] == 5 and page["Members"] == everything[1:3]
    assert page["@odata.nextLink"] == f"{ENTRIES}?$skip=3&$top=2"
    assert bmcsim.get(page["@odata.nextLink"]).json()["Members"] == everything[3:]
    tail = bmcsim.get(ENTRIES, params={"$skip": "3", "$top": "5"}).json()
    assert tail["Members"] == everything[3:] and "@odata.nextLink" not in tail
    assert entries(bmcsim, params={"$skip": "9"}) == []
    assert entries(bmcsim, params={"$top": "0"}) == []
    for bad in ({"$top": "-1"}, {"$skip": "two"}, {"$top": "1.5"}):
        r = bmcsim.get(ENTRIES, params=bad)
        assert r.status_code == 400
        assert r.json()["error"]["@Message.ExtendedInfo"][0]["MessageId"] == "Base.1.18.QueryParameterValueFormatError"

    assert bmcsim.post(CLEAR, json={}).status_code == 204
    assert entries(bmcsim) == []
    inject(bmcsim, kind="sel", message_id="Environmental.1.1.0.FanFailed")
    assert [int(e["Id"]) for e in entries(bmcsim)] == [ids[-1] + 1]  # a reader's cursor stays valid


def test_the_etag_changes_exactly_when_the_log_does(bmcsim, empty_sel):
    first = bmcsim.get(ENTRIES)
    etag = first.headers["ETag"]
    assert first.json()["@odata.etag"] == etag
    assert bmcsim.get(ENTRIES).headers["ETag"] == etag
    unchanged = bmcsim.get(ENTRIES, headers={"If-None-Match": etag})
    assert unchanged.status_code == 304 and unchanged.headers["ETag"] == etag

    inject(bmcsim, kind="sel", message_id="Power.1.0.1.PowerSupplyFailed")
    changed = bmcsim.get(ENTRIES, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["ETag"] != etag
    after_one = changed.headers["ETag"]
    bmcsim.post(CLEAR, json={})
    assert bmcsim.get(ENTRIES).headers["ETag"] != after_one


def test_a_node_credential_reads_and_clears_its_own_sel_only(bmcsim, empty_sel):
    credentials = bmcsim.node("node-002")["credentials"]
    auth = (credentials["username"], credentials["password"])
    inject(bmcsim, kind="sel", message_id="Power.1.0.1.PowerSupplyFailed")
    for path in (SEL, ENTRIES, f"{ENTRIES}/{entries(bmcsim)[0]['Id']}"):
        assert bmcsim.get(path, auth=auth).status_code == 403, path
    assert bmcsim.post(CLEAR, auth=auth, json={}).status_code == 403
    assert len(entries(bmcsim)) == 1
    own = "/redfish/v1/Systems/node-002/LogServices/SEL/Entries"
    assert bmcsim.get(own, auth=auth).status_code == 200


def test_the_console_is_cleared_of_what_it_printed_and_unknown_services_are_404(bmcsim):
    console = f"{SERVICES}/Console"
    bmcsim.reset(NODE, "ForceRestart")
    assert entries(bmcsim, f"{console}/Entries")
    clear = bmcsim.get(console).json()["Actions"]["#LogService.ClearLog"]["target"]
    assert clear == f"{console}/Actions/LogService.ClearLog"
    assert bmcsim.post(clear, json={}).status_code == 204
    assert entries(bmcsim, f"{console}/Entries") == []
    assert bmcsim.get(f"{SERVICES}/Audit").status_code == 404
    assert bmcsim.get(f"{ENTRIES}/999999").status_code == 404


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({}, "'message_id' must be"),
        ({"message_id": "has spaces"}, "'message_id' must be"),
        ({"message_id": "OEM.1.0.Custom"}, "'severity' must be one of"),
        ({"message_id": "OEM.1.0.Custom", "severity": "Fatal"}, "'severity' must be one of"),
        ({"message_id": "OEM.1.0.Custom", "severity": "OK", "message": ""}, "'message' must be"),
        ({"message_id": "Power.1.0.1.PowerSupplyFailed", "args": "PSU1"}, "'args' must be"),
        ({"message_id": "Environmental.1.1.0.TemperatureAboveUpperFatalThreshold", "args": ["CPU0"]}, "arguments"),
    ],
)
def test_sel_requests_are_validated(bmcsim, body, detail):
    r = bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "sel", **body})
    assert r.status_code == 400 and detail in r.json()["detail"], r.text
