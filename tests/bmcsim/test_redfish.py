"""The Redfish service's own behaviour: access per BMC credential, errors, boot, tasks, BMC faults."""

from __future__ import annotations

import threading
import time

import pytest
import requests

SYSTEM = "/redfish/v1/Systems/node-001"
DRIVE = f"{SYSTEM}/Storage/1/Drives/0"
HUNG_DRIVE = "/redfish/v1/Systems/node-004/Storage/1/Drives/1"  # a hung erase stays hung: keep it off other tests' way


def extended_message_id(response: requests.Response) -> str:
    error = response.json()["error"]
    assert {"code", "message", "@Message.ExtendedInfo"} <= set(error)
    return error["@Message.ExtendedInfo"][0]["MessageId"]


def bmc_auth(bmcsim, node: str) -> tuple[str, str]:
    credentials = bmcsim.node(node)["credentials"]
    return credentials["username"], credentials["password"]


def test_service_root_answers_without_credentials_and_nothing_else_does(bmcsim):
    for path in ("/redfish/v1", "/redfish/v1/"):
        assert bmcsim.get(path, auth=None).json()["Systems"] == {"@odata.id": "/redfish/v1/Systems"}
    r = bmcsim.get(SYSTEM, auth=None)
    assert r.status_code == 401 and extended_message_id(r).endswith("NoValidSession")
    assert bmcsim.get(SYSTEM, auth=("root", "wrong")).status_code == 401
    assert bmcsim.get(SYSTEM, auth=None, headers={"X-Auth-Token": "forged"}).status_code == 401


def test_a_bmc_credential_reaches_its_own_node_only(bmcsim):
    auth = bmc_auth(bmcsim, "node-001")
    assert auth[0] == "admin"
    assert bmcsim.get(SYSTEM, auth=auth).status_code == 200
    for path in ("/redfish/v1/Managers/node-001/VirtualMedia/Cd", "/redfish/v1/Chassis/node-001/Power", DRIVE):
        assert bmcsim.get(path, auth=auth).status_code == 200, path
    systems = bmcsim.get("/redfish/v1/Systems", auth=auth).json()
    assert systems["Members"] == [{"@odata.id": SYSTEM}]
    for path in ("/redfish/v1/Systems/node-002", "/redfish/v1/Managers/node-002", "/redfish/v1/Chassis/node-002"):
        r = bmcsim.get(path, auth=auth)
        assert r.status_code == 403 and extended_message_id(r).endswith("InsufficientPrivilege"), path
    r = bmcsim.post(
        "/redfish/v1/Systems/node-002/Actions/ComputerSystem.Reset", auth=auth, json={"ResetType": "ForceOff"}
    )
    assert r.status_code == 403
    assert bmcsim.get("/redfish/v1/Systems/node-002").json()["PowerState"] == "On"


def test_a_bmc_credential_opens_a_session_scoped_to_its_node(bmcsim):
    username, password = bmc_auth(bmcsim, "node-003")
    r = bmcsim.post("/redfish/v1/SessionService/Sessions", auth=None, json={"UserName": username, "Password": password})
    assert r.status_code == 201
    token = {"X-Auth-Token": r.headers["X-Auth-Token"]}
    assert bmcsim.get("/redfish/v1/Systems/node-003", auth=None, headers=token).status_code == 200
    assert bmcsim.get(SYSTEM, auth=None, headers=token).status_code == 403
    assert bmcsim.delete(r.headers["Location"], auth=None, headers=token).status_code == 204
    assert bmcsim.get("/redfish/v1/Systems/node-003", auth=None, headers=token).status_code == 401
    bad = bmcsim.post("/redfish/v1/SessionService/Sessions", auth=None, json={"UserName": username, "Password": "x"})
    assert bad.status_code == 401


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        (
            "post",
            f"{SYSTEM}/Actions/ComputerSystem.Reset",
            {"ResetType": "Explode"},
            400,
            "ActionParameterValueNotInList",
        ),
        ("post", f"{SYSTEM}/Actions/ComputerSystem.Reset", {}, 400, "ActionParameterMissing"),
        ("post", f"{SYSTEM}/Actions/ComputerSystem.Reset", b"{not json", 400, "MalformedJSON"),
        ("patch", SYSTEM, b"[1, 2", 400, "MalformedJSON"),
        ("patch", SYSTEM, {"SerialNumber": "X"}, 400, "PropertyNotWritable"),
        ("patch", SYSTEM, {"PowerState": "Off"}, 400, "PropertyNotWritable"),
        ("patch", SYSTEM, {"Frobnicate": 1}, 400, "PropertyUnknown"),
        ("patch", SYSTEM, {"Boot": {"BootSourceOverrideTarget": "Floppy"}}, 400, "PropertyValueNotInList"),
        ("get", "/redfish/v1/Systems/node-999", None, 404, "ResourceNotFound"),
        ("get", f"{SYSTEM}/Processors/GPU8", None, 404, "ResourceNotFound"),
        ("get", "/redfish/v1/Nowhere", None, 404, "ResourceNotFound"),
        ("delete", SYSTEM, None, 405, "OperationNotAllowed"),
        ("post", "/redfish/v1/Chassis/node-001", {}, 405, "OperationNotAllowed"),
    ],
)
def test_bad_requests_get_redfish_error_bodies(bmcsim, method, path, body, status, message):
    kwargs = {"data": body} if isinstance(body, bytes) else {"json": body} if body is not None else {}
    r = getattr(bmcsim, method)(path, **kwargs)
    assert r.status_code == status, r.text
    assert extended_message_id(r) == f"Base.1.18.{message}"
    if status == 405:
        assert {"GET", "HEAD"} <= set(r.headers["Allow"].split(", "))


def test_head_answers_where_get_does(bmcsim):
    r = requests.head(bmcsim.url + SYSTEM, auth=("root", "calvin"), timeout=5)
    assert r.status_code == 200 and r.headers["Allow"] == "GET, HEAD, PATCH" and not r.content


def test_a_rejected_patch_changes_nothing(bmcsim):
    r = bmcsim.patch(SYSTEM, json={"Boot": {"BootSourceOverrideTarget": "Pxe"}, "UUID": "x", "Frob": 1})
    assert r.status_code == 400
    messages = [m["MessageId"] for m in r.json()["error"]["@Message.ExtendedInfo"]]
    assert messages == ["Base.1.18.PropertyNotWritable", "Base.1.18.PropertyUnknown"]
    assert bmcsim.get(SYSTEM).json()["Boot"]["BootSourceOverrideTarget"] == "None"


def test_one_time_boot_override_is_cleared_by_the_next_boot(bmcsim):
    r = bmcsim.patch(SYSTEM, json={"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}})
    assert r.status_code == 200 and r.json()["Boot"]["BootSourceOverrideEnabled"] == "Once"
    bmcsim.reset("node-001", "ForceRestart")
    boot = bmcsim.get(SYSTEM).json()["Boot"]
    assert (boot["BootSourceOverrideEnabled"], boot["BootSourceOverrideTarget"]) == ("Disabled", "None")
    assert bmcsim.get("/agent/node-001/inventory").json()["boot_source"] == "Pxe"
    bmcsim.reset("node-001", "ForceRestart")
    assert bmcsim.get("/agent/node-001/inventory").json()["boot_source"] == "Hdd"


def test_continuous_boot_override_stays(bmcsim):
    bmcsim.patch(SYSTEM, json={"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Continuous"}})
    for _ in range(2):
        bmcsim.reset("node-001", "ForceRestart")
        assert bmcsim.get("/agent/node-001/inventory").json()["boot_source"] == "Cd"
    assert bmcsim.get(SYSTEM).json()["Boot"]["BootSourceOverrideEnabled"] == "Continuous"


def test_power_off_and_on(bmcsim):
    bmcsim.reset("node-001", "ForceOff")
    system = bmcsim.get(SYSTEM).json()
    assert system["PowerState"] == "Off" and system["BootProgress"]["LastState"] == "None"
    assert bmcsim.get("/redfish/v1/Chassis/node-001").json()["PowerState"] == "Off"
    bmcsim.reset("node-001", "On")
    assert bmcsim.get(SYSTEM).json()["PowerState"] == "On"


def test_secure_erase_returns_a_task_monitor_the_client_polls(bmcsim):
    r = bmcsim.post(f"{DRIVE}/Actions/Drive.SecureErase", json={})
    assert r.status_code == 202
    monitor = r.headers["Location"]
    assert monitor.startswith("/redfish/v1/TaskService/TaskMonitors/")
    done = bmcsim.get(monitor)
    assert done.status_code == 200
    task = done.json()
    assert (task["TaskState"], task["TaskStatus"], task["PercentComplete"]) == ("Completed", "OK", 100)
    assert bmcsim.get(task["@odata.id"]).json()["TaskState"] == "Completed"
    tasks = bmcsim.get("/redfish/v1/TaskService/Tasks").json()["Members"]
    assert {"@odata.id": task["@odata.id"]} in tasks
    drives = bmcsim.get("/agent/node-001/inventory").json()["drives"]
    assert drives[0]["last_erased_at"] is not None
    # Another BMC's credential cannot read this node's task.
    assert bmcsim.get(monitor, auth=bmc_auth(bmcsim, "node-002")).status_code == 403


def test_a_failing_erase_ends_in_exception_and_a_hung_one_never_ends(bmcsim):
    bmcsim.post("/bmcsim/v1/faults", json={"node": "node-004", "kind": "erase_fail"})
    monitor = bmcsim.post(f"{HUNG_DRIVE}/Actions/Drive.SecureErase", json={}).headers["Location"]
    assert bmcsim.get(monitor).json()["TaskState"] == "Exception"
    bmcsim.delete("/bmcsim/v1/faults", params={"node": "node-004"})
    bmcsim.post("/bmcsim/v1/faults", json={"node": "node-004", "kind": "erase_hang"})
    monitor = bmcsim.post(f"{HUNG_DRIVE}/Actions/Drive.SecureErase", json={}).headers["Location"]
    r = bmcsim.get(monitor)
    assert r.status_code == 202 and r.json()["TaskState"] == "Running"
    assert bmcsim.get(HUNG_DRIVE).json()["Status"]["State"] == "Updating"
    again = bmcsim.post(f"{HUNG_DRIVE}/Actions/Drive.SecureErase", json={})
    assert again.status_code == 409


def test_bmc_error_fault_makes_that_bmc_answer_500(bmcsim):
    bmcsim.post("/bmcsim/v1/faults", json={"node": "node-002", "kind": "bmc_error"})
    r = bmcsim.get("/redfish/v1/Systems/node-002")
    assert r.status_code == 500 and extended_message_id(r).endswith("InternalError")
    assert bmcsim.get(SYSTEM).status_code == 200
    bmcsim.delete("/bmcsim/v1/faults", params={"node": "node-002"})
    assert bmcsim.get("/redfish/v1/Systems/node-002").status_code == 200


@pytest.mark.timing
def test_bmc_timeout_fault_hangs_that_bmc_until_cleared(bmcsim):
    bmcsim.post("/bmcsim/v1/faults", json={"node": "node-002", "kind": "bmc_timeout"})
    with pytest.raises(requests.Timeout):
        bmcsim.get("/redfish/v1/Systems/node-002", timeout=1.5)
    assert bmcsim.get(SYSTEM, timeout=2).status_code == 200
    answered = {}

    def hanging_request():
        answered["response"] = bmcsim.get("/redfish/v1/Systems/node-002", timeout=20)

    thread = threading.Thread(target=hanging_request)
    thread.start()
    time.sleep(0.5)
    assert "response" not in answered
    bmcsim.delete("/bmcsim/v1/faults", params={"node": "node-002"})
    thread.join(timeout=10)
    assert answered["response"].status_code == 200


def test_virtual_media_insert_and_eject_actions(bmcsim):
    base = "/redfish/v1/Managers/node-001/VirtualMedia/Cd"
    r = bmcsim.post(f"{base}/Actions/VirtualMedia.InsertMedia", json={"Image": "http://127.0.0.1:9/a.iso"})
    assert r.status_code == 204
    media = bmcsim.get(base).json()
    assert (media["Image"], media["Inserted"], media["ConnectedVia"]) == ("http://127.0.0.1:9/a.iso", True, "URI")
    r = bmcsim.post(f"{base}/Actions/VirtualMedia.InsertMedia", json={"Inserted": True})
    assert r.status_code == 400 and extended_message_id(r).endswith("ActionParameterMissing")
    assert bmcsim.post(f"{base}/Actions/VirtualMedia.EjectMedia", json={}).status_code == 204
    assert bmcsim.get(base).json()["Image"] is None


def test_raid_volumes_are_created_read_and_deleted(bmcsim):
    volumes = f"{SYSTEM}/Storage/1/Volumes"
    drives = [{"@odata.id": f"{SYSTEM}/Storage/1/Drives/{d}"} for d in ("0", "1")]
    r = bmcsim.post(volumes, json={"RAIDType": "RAID1", "Name": "root", "Links": {"Drives": drives}})
    assert r.status_code == 201
    volume = bmcsim.get(r.headers["Location"]).json()
    assert (volume["RAIDType"], volume["Name"], volume["CapacityBytes"]) == ("RAID1", "root", 3_840_755_982_336)
    assert {"@odata.id": r.headers["Location"]} in bmcsim.get(volumes).json()["Members"]
    for bad in (
        {"RAIDType": "RAID5"},
        {"RAIDType": "RAID1", "Links": {"Drives": drives[:1]}},
        {"Links": {"Drives": [{"@odata.id": "/redfish/v1/Systems/node-002/Storage/1/Drives/0"}]}},
        {"Links": ["not", "an", "object"]},
        {"Links": {"Drives": "0"}},
    ):
        assert bmcsim.post(volumes, json=bad).status_code == 400, bad
    assert bmcsim.delete(r.headers["Location"]).status_code == 204
    assert bmcsim.get(r.headers["Location"]).status_code == 404


WRITES = [
    ("post", f"{SYSTEM}/Actions/ComputerSystem.Reset"),
    ("patch", SYSTEM),
    ("post", f"{DRIVE}/Actions/Drive.SecureErase"),
    ("post", f"{SYSTEM}/Storage/1/Volumes"),
    ("post", "/redfish/v1/Managers/node-001/VirtualMedia/Floppy/Actions/VirtualMedia.InsertMedia"),
    ("patch", "/redfish/v1/Managers/node-001/VirtualMedia/Floppy"),
    ("post", "/redfish/v1/SessionService/Sessions"),
    ("post", "/bmcsim/v1/faults"),
    ("post", "/agent/node-001/evidence"),
]
ODD_BODIES = [
    b"\xff\xfe",
    b"null",
    b"[]",
    b'"text"',
    b'{"ResetType": [], "Boot": [], "Image": 5, "Links": 5, "UserName": 1, "node": [], "kind": {}, "nonce": {}}',
    b'{"Boot": {"BootSourceOverrideTarget": {}}, "Inserted": "yes", "Links": {"Drives": [7]}, "Image": {}}',
]


@pytest.mark.parametrize(
    ("method", "path"), [*WRITES, ("post", "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate")]
)
def test_a_body_over_a_mebibyte_is_413_with_an_error_body_on_every_route(bmcsim, method, path):
    body = b'{"padding": "' + b"x" * (1024 * 1024) + b'"}'
    r = getattr(bmcsim, method)(path, data=body, headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 413, r.text[:300]
    if path.startswith("/redfish/"):
        assert extended_message_id(r) == "Base.1.18.GeneralError"
        assert "limit of 1048576 bytes" in r.json()["error"]["@Message.ExtendedInfo"][0]["Message"]
    else:
        assert "detail" in r.json()


def test_a_nic_is_found_by_its_ascii_number_only(bmcsim):
    nics = f"{SYSTEM}/EthernetInterfaces"
    assert bmcsim.get(f"{nics}/NIC0").status_code == 200
    for name in ("NIC\u00b2", "NIC\uff11", "NIC-1", "NIC" + "9" * 30, "NIC", "0"):
        r = bmcsim.get(f"{nics}/{name}")
        assert r.status_code == 404, (name, r.status_code)
        assert extended_message_id(r).endswith("ResourceNotFound")


@pytest.mark.parametrize(("method", "path"), WRITES)
def test_odd_bodies_never_cause_a_server_error(bmcsim, method, path):
    for body in ODD_BODIES:
        r = getattr(bmcsim, method)(path, data=body, headers={"Content-Type": "application/json"})
        assert 400 <= r.status_code < 500 or r.status_code in (201, 202, 204), (body, r.status_code, r.text)
        if r.status_code != 204:
            assert r.headers["Content-Type"].startswith("application/json")


def test_simple_update_flashes_firmware_that_the_next_boot_runs_and_measures(bmcsim):
    firmware = bmcsim.get("/bmcsim/v1/reference-values").json()["boot"]["components"]["firmware"]
    older, current = firmware[0], firmware[1]
    assert bmcsim.get(SYSTEM).json()["BiosVersion"] == current["release"]
    action = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
    image = "http://127.0.0.1:9/images/" + older["release"].replace(" ", "-") + ".bin"
    r = bmcsim.post(action, auth=bmc_auth(bmcsim, "node-001"), json={"ImageURI": image, "TransferProtocol": "HTTP"})
    assert r.status_code == 202
    task = bmcsim.get(r.headers["Location"]).json()
    assert task["TaskState"] == "Completed" and older["release"] in task["Name"]
    assert bmcsim.get(SYSTEM).json()["BiosVersion"] == current["release"]  # still running the old flash
    bmcsim.reset("node-001", "ForceRestart")
    assert bmcsim.get(SYSTEM).json()["BiosVersion"] == older["release"]
    log = bmcsim.post("/agent/node-001/evidence", json={"nonce": "01"}).json()["event_log"]
    assert [e["digest"] for e in log if e["component"] == "firmware"] == [older["digest"]]

    back = image.replace(older["release"].replace(" ", "-"), current["release"].replace(" ", "-"))
    targets = ["/redfish/v1/Systems/node-001"]
    assert bmcsim.post(action, json={"ImageURI": back, "Targets": targets}).status_code == 202
    bmcsim.reset("node-001", "ForceRestart")
    assert bmcsim.get(SYSTEM).json()["BiosVersion"] == current["release"]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"ImageURI": "http://127.0.0.1:9/evil.bin", "Targets": ["/redfish/v1/Systems/node-001"]}, 400),
        ({"Targets": ["/redfish/v1/Systems/node-001"]}, 400),
        ({"ImageURI": "http://127.0.0.1:9/GF-BIOS-2.4.0.bin"}, 400),  # the operator must name the System
        ({"ImageURI": "http://127.0.0.1:9/GF-BIOS-2.4.0.bin", "Targets": ["/redfish/v1/Systems/node-404"]}, 400),
        (
            {
                "ImageURI": "http://127.0.0.1:9/GF-BIOS-2.4.0.bin",
                "Targets": ["/redfish/v1/Systems/node-001"],
                "TransferProtocol": "CIFS",
            },
            400,
        ),
    ],
)
def test_simple_update_rejects_what_it_cannot_flash(bmcsim, body, status):
    r = bmcsim.post("/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate", json=body)
    assert r.status_code == status and extended_message_id(r).startswith("Base.1.18.ActionParameter")


def test_a_bmc_credential_cannot_update_another_node(bmcsim):
    r = bmcsim.post(
        "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
        auth=bmc_auth(bmcsim, "node-002"),
        json={"ImageURI": "http://127.0.0.1:9/GF-BIOS-2.3.1.bin", "Targets": ["/redfish/v1/Systems/node-001"]},
    )
    assert r.status_code == 403
