"""A System's BIOS settings (applied at the next boot), the bios_tamper fault, and UEFI Secure Boot:
SecureBootCurrentBoot changes at the next boot, which measures it into PCR 7."""

from __future__ import annotations

import base64
import datetime
import hashlib

import pytest

from attestation.policy import load_policy
from attestation.reference import parse_manifest, reference_values
from attestation.verifier import GPUIdentity, NodeIdentity, TrustedRoots, new_nonce, verify
from bmcsim import settings
from tests.bmcsim.test_evidence import parse_tpms_attest, replay
from tests.support.bmcsim import start_bmcsim
from tests.support.measured_boot import efi_variable
from tests.support.simulated_gpu_evidence import served_gpu_references

NODE = "node-004"
SYSTEM = f"/redfish/v1/Systems/{NODE}"
BIOS = f"{SYSTEM}/Bios"
SETTINGS = f"{BIOS}/Settings"
SECURE_BOOT = f"{SYSTEM}/SecureBoot"
DEFAULTS = {
    "BootMode": "Uefi",
    "ProcVirtualization": "Enabled",
    "LogicalProc": "Enabled",
    "ProcTurboMode": "Enabled",
    "SriovGlobalEnable": "Enabled",
    "IommuSupport": "Enabled",
    "MmioAbove4Gb": "Enabled",
    "PcieAriSupport": "Enabled",
    "TpmSecurity": "On",
}


def attributes(bmcsim) -> dict:
    return bmcsim.get(BIOS).json()["Attributes"]


def pending(bmcsim) -> dict:
    return bmcsim.get(SETTINGS).json()["Attributes"]


def message_ids(response) -> list[str]:
    return [m["MessageId"] for m in response.json()["error"]["@Message.ExtendedInfo"]]


def test_bios_and_its_settings_object_have_redfish_shapes(bmcsim):
    system = bmcsim.get(SYSTEM).json()
    assert system["Bios"] == {"@odata.id": BIOS} and system["SecureBoot"] == {"@odata.id": SECURE_BOOT}
    bios = bmcsim.get(BIOS).json()
    assert bios["@odata.type"] == "#Bios.v1_2_0.Bios" and bios["Id"] == "BIOS"
    assert bios["AttributeRegistry"] and bios["Attributes"] == DEFAULTS
    assert bios["@Redfish.Settings"] == {
        "@odata.type": "#Settings.v1_3_5.Settings",
        "SettingsObject": {"@odata.id": SETTINGS},
        "SupportedApplyTimes": ["OnReset"],
    }
    settings = bmcsim.get(SETTINGS).json()
    assert (settings["@odata.type"], settings["Id"], settings["Attributes"]) == ("#Bios.v1_2_0.Bios", "Settings", {})
    # The current attributes are read-only: change them through the settings object.
    assert bmcsim.patch(BIOS, json={"Attributes": {"ProcTurboMode": "Disabled"}}).status_code == 405


def test_settings_are_pending_until_a_reset_boots_the_node(bmcsim, factory_reset):
    r = bmcsim.patch(SETTINGS, json={"Attributes": {"ProcTurboMode": "Disabled"}})
    assert r.status_code == 200 and r.json()["Attributes"] == {"ProcTurboMode": "Disabled"}
    r = bmcsim.patch(
        SETTINGS,
        json={"Attributes": {"BootMode": "Bios"}, "@Redfish.SettingsApplyTime": {"ApplyTime": "OnReset"}},
    )
    assert r.status_code == 200
    assert pending(bmcsim) == {"ProcTurboMode": "Disabled", "BootMode": "Bios"}
    assert attributes(bmcsim) == DEFAULTS

    # Neither an NMI nor a power-off boots anything; powering on does.
    bmcsim.reset(NODE, "Nmi")
    bmcsim.reset(NODE, "ForceOff")
    assert attributes(bmcsim) == DEFAULTS
    bmcsim.reset(NODE, "On")
    assert attributes(bmcsim) == {**DEFAULTS, "ProcTurboMode": "Disabled", "BootMode": "Bios"}
    assert pending(bmcsim) == {}

    assert bmcsim.post(f"{BIOS}/Actions/Bios.ResetBios", json={}).status_code == 204
    assert pending(bmcsim) == DEFAULTS
    bmcsim.reset(NODE, "GracefulRestart")
    assert attributes(bmcsim) == DEFAULTS and pending(bmcsim) == {}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"Attributes": {"Frobnicate": "Enabled"}}, ["PropertyUnknown"]),
        ({"Attributes": {"SriovGlobalEnable": True}}, ["PropertyValueTypeError"]),
        ({"Attributes": {"SriovGlobalEnable": 1}}, ["PropertyValueTypeError"]),
        ({"Attributes": {"TpmSecurity": "Maybe"}}, ["PropertyValueNotInList"]),
        ({"Attributes": ["SriovGlobalEnable"]}, ["PropertyValueTypeError"]),
        (
            {"Attributes": {"Nope": "x", "BootMode": 3, "ProcTurboMode": "Disabled"}},
            ["PropertyUnknown", "PropertyValueTypeError"],
        ),
        ({"Id": "Other", "Attributes": {"ProcTurboMode": "Disabled"}}, ["PropertyNotWritable"]),
        ({"Oem": {}}, ["PropertyUnknown"]),
        (
            {"Attributes": {"ProcTurboMode": "Disabled"}, "@Redfish.SettingsApplyTime": {"ApplyTime": "Immediate"}},
            ["PropertyValueNotInList"],
        ),
    ],
)
def test_a_bad_setting_is_a_400_and_nothing_is_pending(bmcsim, body, expected):
    r = bmcsim.patch(SETTINGS, json=body)
    assert r.status_code == 400, r.text
    assert message_ids(r) == [f"Base.1.18.{m}" for m in expected]
    assert pending(bmcsim) == {}


def test_bios_tamper_survives_wipes_and_reboots_until_settings_set_it_back(bmcsim, factory_reset):
    r = bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "bios_tamper"})
    assert r.status_code == 201
    assert r.json() == {
        "node": NODE,
        "kind": "bios_tamper",
        "attribute": "SriovGlobalEnable",
        "value": "Disabled",
        "was": "Enabled",
    }
    assert attributes(bmcsim)["SriovGlobalEnable"] == "Disabled"
    erase = bmcsim.post(f"{SYSTEM}/Storage/1/Drives/0/Actions/Drive.SecureErase", json={})
    assert bmcsim.get(erase.headers["Location"]).json()["TaskState"] == "Completed"
    bmcsim.reset(NODE, "PowerCycle")
    assert attributes(bmcsim)["SriovGlobalEnable"] == "Disabled"

    bmcsim.patch(SETTINGS, json={"Attributes": {"SriovGlobalEnable": "Enabled"}})
    assert attributes(bmcsim)["SriovGlobalEnable"] == "Disabled"  # not before the reboot
    assert [f["kind"] for f in bmcsim.get("/bmcsim/v1/faults").json()["faults"]] == ["bios_tamper"]
    bmcsim.reset(NODE, "ForceRestart")
    assert attributes(bmcsim) == DEFAULTS
    assert bmcsim.get("/bmcsim/v1/faults").json() == {"faults": []}


def test_bios_tamper_of_another_attribute_goes_with_delete_faults(bmcsim, factory_reset):
    fault = {"node": NODE, "kind": "bios_tamper", "attribute": "IommuSupport"}
    assert bmcsim.post("/bmcsim/v1/faults", json=fault).json()["value"] == "Disabled"
    fault = {"node": NODE, "kind": "bios_tamper", "attribute": "BootMode", "value": "Bios"}
    assert bmcsim.post("/bmcsim/v1/faults", json=fault).status_code == 201
    assert attributes(bmcsim) == {**DEFAULTS, "IommuSupport": "Disabled", "BootMode": "Bios"}
    bmcsim.reset(NODE, "ForceRestart")  # a reboot with nothing pending keeps both
    assert attributes(bmcsim) == {**DEFAULTS, "IommuSupport": "Disabled", "BootMode": "Bios"}
    assert bmcsim.delete("/bmcsim/v1/faults", params={"node": NODE}).json() == {"cleared": 2}
    assert attributes(bmcsim) == DEFAULTS


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"attribute": "Frobnicate"}, "'attribute' must be one of"),
        ({"attribute": ["BootMode"]}, "'attribute' must be one of"),
        ({"attribute": "BootMode", "value": "Legacy"}, "'value' of BootMode must be one of"),
        ({"value": True}, "'value' of SriovGlobalEnable must be one of"),
    ],
)
def test_bios_tamper_requests_are_validated(bmcsim, body, detail):
    r = bmcsim.post("/bmcsim/v1/faults", json={"node": NODE, "kind": "bios_tamper", **body})
    assert r.status_code == 400 and detail in r.json()["detail"]
    assert attributes(bmcsim) == DEFAULTS


def secure_boot_event(bmcsim, node: str = NODE) -> dict:
    log = bmcsim.get(f"/bmcsim/v1/nodes/{node}/event-log").json()["event_log"]
    (event,) = [e for e in log if e["pcr"] == 7]
    return event


def test_secure_boot_starts_off_and_runs_from_the_next_boot_which_measures_it(bmcsim, factory_reset):
    body = bmcsim.get(SECURE_BOOT).json()
    assert body["@odata.type"] == "#SecureBoot.v1_1_2.SecureBoot"
    assert (body["SecureBootEnable"], body["SecureBootCurrentBoot"], body["SecureBootMode"]) == (
        False,
        "Disabled",
        "UserMode",
    )
    # PCR 7 holds the SecureBoot variable as firmware measures it (UEFI_VARIABLE_DATA), as on a real host.
    off = secure_boot_event(bmcsim)
    assert off["component"] == "secureboot" and "EV_EFI_VARIABLE_DRIVER_CONFIG" in off["description"]
    assert off["digest"] == hashlib.sha256(efi_variable("SecureBoot", b"\x00")).hexdigest()

    r = bmcsim.patch(SECURE_BOOT, json={"SecureBootEnable": True})
    assert r.status_code == 200 and r.json()["SecureBootEnable"] is True
    assert r.json()["SecureBootCurrentBoot"] == "Disabled"  # this boot ran without it
    assert secure_boot_event(bmcsim) == off
    bmcsim.reset(NODE, "ForceRestart")
    assert bmcsim.get(SECURE_BOOT).json()["SecureBootCurrentBoot"] == "Enabled"
    on = secure_boot_event(bmcsim)
    assert on["digest"] == hashlib.sha256(efi_variable("SecureBoot", b"\x01")).hexdigest()

    # The agent's evidence quotes PCRs 0, 4, 8 and 9 only, as the control plane's policy asks:
    # PCR 7's event is not in it, and what is replays to the quote.
    evidence = bmcsim.post(f"/agent/{NODE}/evidence", json={"nonce": "ab"}).json()
    assert [e["component"] for e in evidence["event_log"]] == ["firmware", "bootloader", "kernel", "initrd", "cmdline"]
    attest = parse_tpms_attest(base64.b64decode(evidence["quote"]["attest"]))
    pcrs = replay(evidence["event_log"])
    assert attest["pcrDigest"] == hashlib.sha256(b"".join(pcrs[i] for i in (0, 4, 8, 9))).digest()

    # Without the platform key, Secure Boot cannot run: SetupMode, and the next boot runs without it.
    keys = f"{SECURE_BOOT}/Actions/SecureBoot.ResetKeys"
    assert bmcsim.post(keys, json={"ResetKeysType": "DeletePK"}).status_code == 204
    bmcsim.reset(NODE, "ForceRestart")
    body = bmcsim.get(SECURE_BOOT).json()
    assert (body["SecureBootEnable"], body["SecureBootCurrentBoot"], body["SecureBootMode"]) == (
        True,
        "Disabled",
        "SetupMode",
    )
    assert secure_boot_event(bmcsim) == off


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    [
        ("patch", SECURE_BOOT, {"SecureBootEnable": "yes"}, "PropertyValueTypeError"),
        ("patch", SECURE_BOOT, {"SecureBootEnable": 1}, "PropertyValueTypeError"),
        ("patch", SECURE_BOOT, {"SecureBootCurrentBoot": "Enabled"}, "PropertyNotWritable"),
        ("patch", SECURE_BOOT, {"SecureBootMode": "SetupMode"}, "PropertyNotWritable"),
        ("post", f"{SECURE_BOOT}/Actions/SecureBoot.ResetKeys", {}, "ActionParameterMissing"),
        ("post", f"{SECURE_BOOT}/Actions/SecureBoot.ResetKeys", {"ResetKeysType": []}, "ActionParameterValueNotInList"),
    ],
)
def test_bad_secure_boot_requests_are_400s_that_change_nothing(bmcsim, method, path, body, expected):
    r = getattr(bmcsim, method)(path, json=body)
    assert r.status_code == 400 and message_ids(r) == [f"Base.1.18.{expected}"]
    body = bmcsim.get(SECURE_BOOT).json()
    assert (body["SecureBootEnable"], body["SecureBootMode"]) == (False, "UserMode")


POLICY_WITH_SECURE_BOOT = """
name = "secure-boot"
cc_mode = "on"
max_evidence_age_seconds = 300
[boot]
pcrs = { firmware = 0, bootloader = 4, secureboot = 7, kernel = 9, initrd = 9, cmdline = 8 }
[gpu]
evidence = "in_band"
measurements = ["vbios", "driver"]
"""


def test_with_pcr_7_quoted_the_evidence_proves_secure_boot_to_the_verifier(tmp_path):
    """bmcsim --quoted-pcrs 0,4,7,8,9: the quote covers PCR 7, the event log gives its event and the
    reference values its golden digest (Secure Boot on), so a policy measuring `secureboot` in PCR 7
    refuses a node until Secure Boot runs on it."""
    sim = start_bmcsim(tmp_path / "data", nodes=1, args=("--quoted-pcrs", "0,4,7,8,9"))
    try:
        sim.boot_with_config_drive("node-001")
        manifest = sim.get("/bmcsim/v1/reference-values").json()
        roots = sim.get("/bmcsim/v1/roots").json()
        assert manifest["boot"]["quoted_pcrs"] == [0, 4, 7, 8, 9] and manifest["boot"]["pcrs"]["secureboot"] == 7
        node = sim.node("node-001")
        identity = NodeIdentity(
            name=node["name"],
            serial=node["serial"],
            gpus=tuple(GPUIdentity(index=g["index"], uuid=g["uuid"], serial=g["serial"]) for g in node["gpus"]),
        )

        def verdict():
            now = datetime.datetime.now(datetime.UTC)
            nonce = new_nonce(now)
            evidence = sim.post("/agent/node-001/evidence", json={"nonce": nonce.hex()}).json()
            assert [e["pcr"] for e in evidence["event_log"]] == [0, 7, 4, 9, 9, 8]
            return verify(
                evidence=evidence,
                nonce=nonce,
                node=identity,
                reference=reference_values(parse_manifest(manifest)),
                policy=load_policy(POLICY_WITH_SECURE_BOOT, format="toml"),
                roots=TrustedRoots.from_pem(
                    manufacturer_ca=roots["manufacturer_ca"], gpu_vendor_root=roots["gpu_vendor_root"]
                ),
                now=now,
                gpu_references=gpu_references,
            )

        gpu_references = served_gpu_references(sim.get)
        refused = verdict()
        assert [(f.code, f.component) for f in refused.failures] == [("unknown_component_digest", "secureboot")]
        assert sim.patch("/redfish/v1/Systems/node-001/SecureBoot", json={"SecureBootEnable": True}).status_code == 200
        sim.reset("node-001", "ForceRestart")
        affirmed = verdict()
        assert affirmed.affirming, affirmed.failures
        assert affirmed.measurements["secureboot"] == hashlib.sha256(efi_variable("SecureBoot", b"\x01")).hexdigest()
    finally:
        sim.stop()


@pytest.mark.parametrize("bad", ["0,4,x", "0,24", "", "-1"])
def test_quoted_pcrs_must_be_pcr_indexes(bad, capsys):
    with pytest.raises(SystemExit):
        settings.parse(["--quoted-pcrs", bad])
    assert "--quoted-pcrs" in capsys.readouterr().err
    assert settings.parse(["--quoted-pcrs", "9,0,7,4,8,7"]).quoted_pcrs == (0, 4, 7, 8, 9)
    assert settings.parse([]).quoted_pcrs == (0, 4, 8, 9)
