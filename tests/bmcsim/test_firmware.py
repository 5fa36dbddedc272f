"""UpdateService's FirmwareInventory, SimpleUpdate of each kind of firmware through a task, and the
firmware_tamper fault: what the inventory shows, what a boot measures, what a reflash repairs."""

from __future__ import annotations

import hashlib
import os

import pytest

INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
SIMPLE_UPDATE = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
NODE = "node-002"
SYSTEM = f"/redfish/v1/Systems/{NODE}"
COMPONENTS = ["BIOS", "BMC", *(f"GPU{i}-VBIOS" for i in range(8)), "NIC0"]


def bmc_auth(bmcsim, node: str) -> tuple[str, str]:
    credentials = bmcsim.node(node)["credentials"]
    return credentials["username"], credentials["password"]


def published(bmcsim) -> dict[str, list[dict]]:
    return bmcsim.get("/bmcsim/v1/firmware-releases").json()["components"]


def item(bmcsim, name: str, node: str = NODE) -> dict:
    r = bmcsim.get(f"{INVENTORY}/{node}-{name}")
    assert r.status_code == 200, r.text
    return r.json()


def flash(bmcsim, image: str, *targets: str, auth=None) -> dict:
    body: dict = {"ImageURI": f"http://127.0.0.1:9/firmware/{image}", "TransferProtocol": "HTTP"}
    if targets:
        body["Targets"] = list(targets)
    kwargs = {} if auth is None else {"auth": auth}
    r = bmcsim.post(SIMPLE_UPDATE, json=body, **kwargs)
    assert r.status_code == 202, r.text
    task = bmcsim.get(r.headers["Location"]).json()
    assert task["TaskState"] == "Completed", task
    return task


def event_log_digest(bmcsim, component: str, node: str = NODE) -> str:
    log = bmcsim.post(f"/agent/{node}/evidence", json={"nonce": os.urandom(16).hex()}).json()["event_log"]
    (digest,) = [e["digest"] for e in log if e["component"] == component]
    return digest


def test_the_inventory_lists_every_component_of_every_node_with_version_and_digest(bmcsim):
    service = bmcsim.get("/redfish/v1/UpdateService").json()
    assert service["FirmwareInventory"] == {"@odata.id": INVENTORY}
    members = [m["@odata.id"] for m in bmcsim.get(INVENTORY).json()["Members"]]
    assert members == [f"{INVENTORY}/node-{n:03d}-{c}" for n in range(1, 5) for c in COMPONENTS]

    factory = {kind: releases[-1] for kind, releases in published(bmcsim).items()}
    system = bmcsim.get(SYSTEM).json()
    for name, kind, related in [
        ("BIOS", "BIOS", [SYSTEM]),
        ("BMC", "BMC", [SYSTEM, f"/redfish/v1/Managers/{NODE}"]),
        ("GPU3-VBIOS", "VBIOS", [f"{SYSTEM}/Processors/GPU3"]),
        ("NIC0", "NIC", [SYSTEM]),
    ]:
        body = item(bmcsim, name)
        assert body["@odata.type"].startswith("#SoftwareInventory.")
        assert (body["Id"], body["SoftwareId"], body["Updateable"]) == (f"{NODE}-{name}", kind, True)
        assert body["Version"] == factory[kind]["release"]
        assert body["RelatedItem"] == [{"@odata.id": path} for path in related]
        assert body["Status"] == {"State": "Enabled", "Health": "OK"}
        assert body["Measurement"] == {
            "Measurement": factory[kind]["digest"],
            "MeasurementSize": 32,
            "MeasurementIndex": 0,
            "MeasurementSpecification": 0,
        }
    # The BIOS's digest is the one its boot measures, its version the one the System reports.
    assert item(bmcsim, "BIOS")["Measurement"]["Measurement"] == event_log_digest(bmcsim, "firmware")
    assert item(bmcsim, "BIOS")["Version"] == system["BiosVersion"]
    manager = bmcsim.get(f"/redfish/v1/Managers/{NODE}").json()
    assert manager["FirmwareVersion"] == item(bmcsim, "BMC")["Version"]
    gpu = bmcsim.get(f"{SYSTEM}/Processors/GPU3").json()
    assert gpu["FirmwareVersion"] == item(bmcsim, "GPU3-VBIOS")["Version"]


def test_a_node_credential_sees_its_own_inventory_only(bmcsim):
    auth = bmc_auth(bmcsim, NODE)
    members = [m["@odata.id"] for m in bmcsim.get(INVENTORY, auth=auth).json()["Members"]]
    assert members == [f"{INVENTORY}/{NODE}-{c}" for c in COMPONENTS]
    assert bmcsim.get(f"{INVENTORY}/{NODE}-GPU7-VBIOS", auth=auth).status_code == 200
    for other in ("node-001-BIOS", "node-003-GPU0-VBIOS", "node-004-NIC0"):
        r = bmcsim.get(f"{INVENTORY}/{other}", auth=auth)
        assert r.status_code == 403, other
    for missing in ("node-002-GPU8-VBIOS", "node-002-NIC1", "node-009-BIOS", "BIOS", "node-002-GPU3"):
        assert bmcsim.get(f"{INVENTORY}/{missing}").status_code == 404, missing


def test_simple_update_of_an_inventory_item_changes_it_when_the_task_completes(bmcsim, factory_reset):
    vbios = published(bmcsim)["VBIOS"]
    older, current = vbios[0], vbios[1]
    before = bmcsim.post(f"/agent/{NODE}/evidence", json={"nonce": "aa"}).json()["gpus"]
    task = flash(bmcsim, older["image"], f"{INVENTORY}/{NODE}-GPU3-VBIOS")
    assert older["release"] in task["Name"] and "GPU3" in task["Name"]
    shown = item(bmcsim, "GPU3-VBIOS")
    assert (shown["Version"], shown["Measurement"]["Measurement"]) == (older["release"], older["digest"])
    assert item(bmcsim, "GPU2-VBIOS")["Version"] == current["release"]
    # The GPU's own attestation report measures the VBIOS it now has, still a known release.
    after = bmcsim.post(f"/agent/{NODE}/evidence", json={"nonce": "aa"}).json()["gpus"]
    golden = {m["digest"] for m in bmcsim.get("/bmcsim/v1/reference-values").json()["gpu"]["measurements"]["vbios"]}
    assert after[3]["measurements"]["vbios"] != before[3]["measurements"]["vbios"]
    assert after[3]["measurements"]["vbios"] in golden
    assert after[2]["measurements"] == before[2]["measurements"]

    # A VBIOS image with the System as target updates every GPU of it.
    flash(bmcsim, older["image"], SYSTEM)
    assert {item(bmcsim, f"GPU{i}-VBIOS")["Version"] for i in range(8)} == {older["release"]}


def test_bmc_and_nic_images_update_their_component(bmcsim, factory_reset):
    bmc, nic = published(bmcsim)["BMC"][0], published(bmcsim)["NIC"][0]
    flash(bmcsim, bmc["image"], f"/redfish/v1/Managers/{NODE}")
    assert item(bmcsim, "BMC")["Version"] == bmc["release"]
    assert bmcsim.get(f"/redfish/v1/Managers/{NODE}").json()["FirmwareVersion"] == bmc["release"]
    flash(bmcsim, nic["image"], auth=bmc_auth(bmcsim, NODE))  # a BMC credential updates its own node
    assert item(bmcsim, "NIC0")["Version"] == nic["release"]
    assert item(bmcsim, "BIOS")["Version"] == published(bmcsim)["BIOS"][-1]["release"]


@pytest.mark.parametrize(
    ("image", "targets", "why"),
    [
        ("GF-VBIOS-96.00.74.00.01.bin", [f"{INVENTORY}/{NODE}-BIOS"], "is BIOS firmware, not VBIOS"),
        ("GF-BIOS-2.3.1.bin", [f"/redfish/v1/Managers/{NODE}"], "takes BMC images only"),
        ("GF-NIC-28.39.1002.bin", [f"{INVENTORY}/{NODE}-NIC0", f"{INVENTORY}/node-003-NIC0"], "of one node"),
        ("GF-NIC-1.0.bin", [SYSTEM], "names no known firmware image"),
        ("GF-TPM-1.0.bin", [SYSTEM], "names no known firmware image"),
        ("GF-BMC-1.4.2.bin", [f"{INVENTORY}/{NODE}-TPM"], "names no System"),
        ("GF-BMC-1.4.2.bin", [7], "names no System"),
        ("GF-BMC-1.4.2.bin", "/redfish/v1/Systems/node-002", "must name"),
    ],
)
def test_simple_update_refuses_an_image_its_target_cannot_take(bmcsim, image, targets, why):
    r = bmcsim.post(SIMPLE_UPDATE, json={"ImageURI": f"http://127.0.0.1:9/{image}", "Targets": targets})
    assert r.status_code == 400, r.text
    (message,) = r.json()["error"]["@Message.ExtendedInfo"]
    assert message["MessageId"] == "Base.1.18.ActionParameterValueNotInList" and why in message["Message"]


def test_firmware_tamper_shows_in_the_inventory_survives_wipes_and_reboots_and_ends_with_a_reflash(
    bmcsim, factory_reset
):
    clean = item(bmcsim, "NIC0")
    r = bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "firmware_tamper", "component": "NIC0"})
    assert r.status_code == 201
    assert r.json() == {
        "node": NODE,
        "kind": "firmware_tamper",
        "component": "NIC0",
        "version": clean["Version"] + "-custom",
    }
    tampered = item(bmcsim, "NIC0")
    assert tampered["Version"] == clean["Version"] + "-custom"
    digests = {r["digest"] for releases in published(bmcsim).values() for r in releases}
    assert tampered["Measurement"]["Measurement"] not in digests

    for drive in ("0", "1"):
        r = bmcsim.post(f"{SYSTEM}/Storage/1/Drives/{drive}/Actions/Drive.SecureErase", json={})
        assert bmcsim.get(r.headers["Location"]).json()["TaskState"] == "Completed"
    bmcsim.reset(NODE, "PowerCycle")
    assert item(bmcsim, "NIC0") == tampered

    factory = published(bmcsim)["NIC"][-1]
    flash(bmcsim, factory["image"], f"{INVENTORY}/{NODE}-NIC0")
    assert item(bmcsim, "NIC0") == clean
    assert bmcsim.get("/bmcsim/v1/faults").json() == {"faults": []}


def test_a_tamper_that_survives_the_reflash_still_shows_after_the_task_completes(bmcsim, factory_reset):
    fault = {"node": NODE, "kind": "firmware_tamper", "component": "GPU5", "survives_reflash": True}
    assert bmcsim.post("/bmcsim/v1/faults", json=fault).status_code == 201
    tampered = item(bmcsim, "GPU5-VBIOS")
    golden = {m["digest"] for m in bmcsim.get("/bmcsim/v1/reference-values").json()["gpu"]["measurements"]["vbios"]}
    report = bmcsim.post(f"/agent/{NODE}/evidence", json={"nonce": "bb"}).json()["gpus"][5]
    assert report["measurements"]["vbios"] not in golden  # the GPU measures the tampered VBIOS

    task = flash(bmcsim, published(bmcsim)["VBIOS"][-1]["image"], f"{INVENTORY}/{NODE}-GPU5-VBIOS")
    assert task["TaskStatus"] == "OK"
    assert item(bmcsim, "GPU5-VBIOS") == tampered
    listed = bmcsim.get("/bmcsim/v1/faults").json()["faults"]
    assert [f["kind"] for f in listed] == ["firmware_tamper"] and listed[0]["survives_reflash"] is True

    assert bmcsim.delete("/bmcsim/v1/faults", params={"node": NODE}).json() == {"cleared": 1}
    assert item(bmcsim, "GPU5-VBIOS")["Version"] == published(bmcsim)["VBIOS"][-1]["release"]


def test_a_tampered_bios_is_what_the_next_boot_runs_and_measures(bmcsim, factory_reset):
    golden = {r["digest"] for r in bmcsim.get("/bmcsim/v1/reference-values").json()["boot"]["components"]["firmware"]}
    clean_digest, clean_version = event_log_digest(bmcsim, "firmware"), bmcsim.get(SYSTEM).json()["BiosVersion"]
    bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "firmware_tamper", "component": "BIOS"})
    tampered = item(bmcsim, "BIOS")
    assert tampered["Version"] == clean_version + "-custom"
    # Flashed at once; run and measured from the next boot, into PCR 0 (the implant is the kernel's, PCR 9).
    assert (bmcsim.get(SYSTEM).json()["BiosVersion"], event_log_digest(bmcsim, "firmware")) == (
        clean_version,
        clean_digest,
    )
    kernel = event_log_digest(bmcsim, "kernel")
    bmcsim.reset(NODE, "ForceRestart")
    assert bmcsim.get(SYSTEM).json()["BiosVersion"] == tampered["Version"]
    assert event_log_digest(bmcsim, "firmware") == tampered["Measurement"]["Measurement"]
    assert event_log_digest(bmcsim, "firmware") not in golden
    assert event_log_digest(bmcsim, "kernel") == kernel

    # The reflash ends the tamper; the boot after it runs, and measures, the clean BIOS again.
    flash(bmcsim, published(bmcsim)["BIOS"][-1]["image"], SYSTEM)
    assert item(bmcsim, "BIOS")["Version"] == clean_version
    assert event_log_digest(bmcsim, "firmware") != clean_digest  # until the next boot
    bmcsim.reset(NODE, "ForceRestart")
    assert event_log_digest(bmcsim, "firmware") == clean_digest
    assert bmcsim.get(SYSTEM).json()["BiosVersion"] == clean_version


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"kind": "firmware_tamper"}, "'component' must be one of"),
        ({"kind": "firmware_tamper", "component": "GPU8"}, "'component' must be one of"),
        ({"kind": "firmware_tamper", "component": ["BIOS"]}, "'component' must be one of"),
        ({"kind": "firmware_tamper", "component": "BMC", "survives_reflash": "yes"}, "'survives_reflash'"),
    ],
)
def test_firmware_tamper_requests_are_validated(bmcsim, body, detail):
    r = bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, **body})
    assert r.status_code == 400 and detail in r.json()["detail"]


def test_the_published_releases_are_what_simple_update_takes(bmcsim):
    for kind, releases in published(bmcsim).items():
        assert len(releases) >= 2
        for release in releases:
            assert release["image"] == f"GF-{kind}-{release['version']}.bin"
            assert len(bytes.fromhex(release["digest"])) == 32
    bios = published(bmcsim)["BIOS"][-1]
    assert bios["digest"] == hashlib.sha256(f"bmcsim/firmware/{bios['release']}".encode()).hexdigest()
