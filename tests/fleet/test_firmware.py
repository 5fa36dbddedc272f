"""The pure firmware baseline: reading a BMC's FirmwareInventory, comparing, planning the repair,
and the baselines operators publish."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.validation import Invalid
from fleet.firmware import (
    Baseline,
    Drift,
    Expected,
    Flash,
    Found,
    Installed,
    SecureBoot,
    compare,
    describe,
    installed_components,
    parse_baselines,
    plan,
    secure_boot,
)

SYSTEM = "/redfish/v1/Systems/node-001"
INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
BIOS_DIGEST, BMC_DIGEST, VBIOS_DIGEST, NIC_DIGEST = ("1" * 64, "2" * 64, "3" * 64, "4" * 64)
TAMPERED = "f" * 64


def item(node: str, suffix: str, kind: str, version: str, digest: str, related: str | None = None) -> dict:
    return {
        "@odata.id": f"{INVENTORY}/{node}-{suffix}",
        "Id": f"{node}-{suffix}",
        "Name": f"{suffix} firmware",
        "Version": version,
        "SoftwareId": kind,
        "Updateable": True,
        "RelatedItem": [{"@odata.id": related or f"/redfish/v1/Systems/{node}"}],
        "Measurement": {"Measurement": digest, "MeasurementSize": 32},
    }


def inventory(node: str = "node-001", gpus: int = 8) -> list[dict]:
    system = f"/redfish/v1/Systems/{node}"
    return [
        item(node, "BIOS", "BIOS", "GF-BIOS 2.4.0", BIOS_DIGEST),
        item(node, "BMC", "BMC", "1.4.2", BMC_DIGEST),
        *(
            item(node, f"GPU{i}-VBIOS", "VBIOS", "96.00.99.00.01", VBIOS_DIGEST, f"{system}/Processors/GPU{i}")
            for i in range(gpus)
        ),
        item(node, "NIC0", "NIC", "22.41.1000", NIC_DIGEST),
    ]


BASELINE = Baseline(
    name="h100",
    gpu_model="NVIDIA H100 80GB HBM3",
    components={
        "BIOS": Expected("GF-BIOS 2.4.0", BIOS_DIGEST, "GF-BIOS-2.4.0.bin"),
        "BMC": Expected("1.4.2", BMC_DIGEST, "GF-BMC-1.4.2.bin"),
        "VBIOS": Expected("96.00.99.00.01", VBIOS_DIGEST, "GF-VBIOS-96.00.99.00.01.bin"),
        "NIC": Expected("22.41.1000", NIC_DIGEST, ""),
    },
    bios_attributes={"SriovEnable": True, "BootMode": "Uefi"},
    secure_boot_required=True,
)
SECURE = SecureBoot(enabled=True, current_boot="Enabled")


def found(items=None, attributes=None, boot=SECURE) -> Found:
    return Found(
        components=installed_components(inventory() if items is None else items, system=SYSTEM),
        bios_attributes={"SriovEnable": True, "BootMode": "Uefi", "Other": 3} if attributes is None else attributes,
        secure_boot=boot,
    )


def tampered(name_suffix: str, version: str = "1.4.2-x", digest: str = TAMPERED) -> list[dict]:
    items = inventory()
    for entry in items:
        if entry["Id"] == f"node-001-{name_suffix}":
            entry["Version"], entry["Measurement"]["Measurement"] = version, digest
    return items


# -- reading ----------------------------------------------------------------------------------


def test_components_are_named_by_processor_or_by_id_without_the_node_and_keyed_by_software_id():
    components = installed_components(inventory(), system=SYSTEM)
    assert sorted(components) == sorted(["BIOS", "BMC", "NIC0", *(f"GPU{i} VBIOS" for i in range(8))])
    assert components["GPU3 VBIOS"] == Installed(
        "GPU3 VBIOS", "VBIOS", "96.00.99.00.01", VBIOS_DIGEST, f"{INVENTORY}/node-001-GPU3-VBIOS"
    )
    assert components["BIOS"].target == SYSTEM  # a BIOS flash names the System
    assert components["NIC0"].kind == "NIC"


def test_another_nodes_items_are_not_this_nodes_and_unrelated_items_are():
    others = inventory("node-002")
    single_server = {"@odata.id": f"{INVENTORY}/CPLD", "Id": "CPLD", "Version": "3", "SoftwareId": "CPLD"}
    components = installed_components([*inventory(), *others, single_server], system=SYSTEM)
    assert len(components) == 12 and components["CPLD"].sha256 == ""


def test_an_item_related_to_the_systems_manager_is_the_nodes():
    bmc = item("x", "BMC", "BMC", "1", BMC_DIGEST, related="/redfish/v1/Managers/bmc-7")
    assert list(installed_components([bmc], system=SYSTEM, managers={"/redfish/v1/Managers/bmc-7"})) == ["x-BMC"]
    assert installed_components([bmc], system=SYSTEM) == {}


def test_two_items_of_one_name_do_not_hide_each_other():
    twins = [item("node-001", "BMC", "BMC", "1", BMC_DIGEST), item("node-001", "BMC", "BMC", "2", BMC_DIGEST)]
    twins[1]["Id"] = "BMC-backup"
    assert sorted(installed_components(twins, system=SYSTEM)) == ["BMC", "BMC-backup"]


def test_secure_boot_is_read_from_redfish():
    assert secure_boot({"SecureBootEnable": True, "SecureBootCurrentBoot": "Enabled"}) == SECURE
    assert secure_boot({"SecureBootEnable": "yes"}) == SecureBoot(False, "")


# -- comparing --------------------------------------------------------------------------------


def test_a_node_that_runs_the_baseline_has_no_drift():
    assert compare(BASELINE, found()) == []


def test_a_tampered_bmc_is_a_repairable_drift_naming_expected_and_found():
    drifts = compare(BASELINE, found(tampered("BMC")))
    assert drifts == [Drift("BMC", f"1.4.2 (sha256 {BMC_DIGEST[:16]}…)", f"1.4.2-x (sha256 {TAMPERED[:16]}…)", True)]
    assert describe(drifts) == f"BMC expected 1.4.2 (sha256 {BMC_DIGEST[:16]}…) found 1.4.2-x (sha256 {TAMPERED[:16]}…)"


def test_the_same_version_with_another_digest_is_drift():
    (drift,) = compare(BASELINE, found(tampered("GPU5-VBIOS", version="96.00.99.00.01")))
    assert drift.component == "GPU5 VBIOS" and drift.repairable


def test_a_component_without_an_image_is_not_repairable():
    (drift,) = compare(BASELINE, found(tampered("NIC0", version="22.0")))
    assert (drift.component, drift.repairable) == ("NIC0", False)


def test_a_component_the_baseline_does_not_know_is_not_repairable():
    extra = item("node-001", "FPGA0", "FPGA", "7", "5" * 64)
    (drift,) = compare(BASELINE, found([*inventory(), extra]))
    assert str(drift) == f"FPGA0 expected nothing (not in the baseline) found 7 (sha256 {'5' * 16}…)"
    assert not drift.repairable


def test_a_component_the_baseline_expects_but_the_node_lacks_is_not_repairable():
    (drift,) = compare(BASELINE, found([i for i in inventory() if i["SoftwareId"] != "NIC"]))
    assert (drift.component, drift.found, drift.repairable) == ("NIC", "nothing", False)


def test_a_baseline_entry_for_one_component_wins_over_its_kind():
    special = Baseline(
        **{**BASELINE.__dict__, "components": {**BASELINE.components, "GPU3 VBIOS": Expected("1", "6" * 64, "")}}
    )
    (drift,) = compare(special, found())
    assert (drift.component, drift.repairable) == ("GPU3 VBIOS", False)


def test_bios_attributes_are_compared_by_value_and_type():
    drifts = compare(BASELINE, found(attributes={"SriovEnable": 1, "BootMode": "Uefi"}))
    assert drifts == [Drift("BIOS attribute SriovEnable", "true", "1", True)]
    (missing,) = compare(BASELINE, found(attributes={"SriovEnable": True}))
    assert (missing.component, missing.found, missing.repairable) == ("BIOS attribute BootMode", "nothing", False)


@pytest.mark.parametrize(
    ("boot", "shown"),
    [
        (SecureBoot(False, "Disabled"), "Disabled"),
        (SecureBoot(True, "Disabled"), "Disabled"),  # enabled from the next boot: not yet
        (SecureBoot(False, "Enabled"), "Enabled, but disabled from the next boot"),
        (SecureBoot(False, ""), "nothing"),
    ],
)
def test_secure_boot_must_be_on_now_and_at_the_next_boot(boot, shown):
    assert compare(BASELINE, found(boot=boot)) == [Drift("Secure Boot", "Enabled", shown, True)]
    relaxed = Baseline(**{**BASELINE.__dict__, "secure_boot_required": False})
    assert compare(relaxed, found(boot=boot)) == []


# -- planning ---------------------------------------------------------------------------------


def test_the_plan_flashes_each_drifting_component_with_its_image_onto_its_target():
    repair = plan(BASELINE, found(tampered("BMC")))
    assert repair.flashes == (Flash("BMC", "GF-BMC-1.4.2.bin", f"{INVENTORY}/node-001-BMC"),)
    assert (repair.bios_settings, repair.enable_secure_boot) == ({}, False)
    assert not repair.reboot  # a BMC applies its own firmware


def test_the_plan_for_bios_settings_and_secure_boot_reboots():
    spoiled = found(
        tampered("BIOS", "GF-BIOS 2.3.1"), {"SriovEnable": False, "BootMode": "Uefi"}, SecureBoot(False, "Disabled")
    )
    repair = plan(BASELINE, spoiled)
    assert repair.flashes == (Flash("BIOS", "GF-BIOS-2.4.0.bin", SYSTEM),)
    assert repair.bios_settings == {"SriovEnable": True}
    assert repair.enable_secure_boot and repair.reboot


def test_secure_boot_enabled_for_the_next_boot_needs_only_the_reboot():
    repair = plan(BASELINE, found(boot=SecureBoot(True, "Disabled")))
    assert (repair.enable_secure_boot, repair.reboot) == (False, True)


@given(
    changed=st.sets(st.sampled_from(["BIOS", "BMC", *(f"GPU{i}-VBIOS" for i in range(8))])),
    sriov=st.sampled_from([True, False, 1, "Enabled"]),
    boot=st.sampled_from([SECURE, SecureBoot(False, "Disabled"), SecureBoot(True, "Disabled")]),
)
def test_a_repair_by_the_plan_leaves_no_drift(changed, sriov, boot):
    items = inventory()
    for entry in items:
        if entry["Id"].removeprefix("node-001-") in changed:
            entry["Version"], entry["Measurement"]["Measurement"] = "evil", TAMPERED
    before = found(items, {"SriovEnable": sriov, "BootMode": "Uefi"}, boot)
    drifts = compare(BASELINE, before)
    assert all(d.repairable for d in drifts)
    repair = plan(BASELINE, before)
    assert len(repair.flashes) == len(changed)

    # What the BMC does with the plan: each flash installs the baseline's release on its target.
    flashes = {f.target: f for f in repair.flashes}
    for entry in items:
        flash = flashes.get(SYSTEM if entry["SoftwareId"] == "BIOS" else entry["@odata.id"])
        if flash is not None:
            expected = BASELINE.expected(before.components[flash.component])
            assert expected is not None
            entry["Version"], entry["Measurement"]["Measurement"] = expected.version, expected.sha256
    attributes = {**before.bios_attributes, **repair.bios_settings}
    enabled = boot.enabled or repair.enable_secure_boot
    after_boot = SecureBoot(enabled, "Enabled" if enabled else "Disabled") if repair.reboot else boot
    assert compare(BASELINE, found(items, attributes, after_boot)) == []


# -- published baselines ----------------------------------------------------------------------

DOCUMENT = {
    "baselines": [
        {
            "name": "h100",
            "gpu_model": "NVIDIA H100 80GB HBM3",
            "components": {"BIOS": {"version": "GF-BIOS 2.4.0", "sha256": BIOS_DIGEST, "image": "GF-BIOS-2.4.0.bin"}},
            "bios_attributes": {"SriovEnable": True, "NumaNodesPerSocket": 2, "BootMode": "Uefi"},
        },
        {"name": "default", "components": {"BMC": {"version": "1.4.2", "sha256": BMC_DIGEST}}},
    ]
}


def test_a_published_document_reads_as_baselines_with_defaults():
    h100, default = parse_baselines(DOCUMENT)
    assert h100.components == {"BIOS": Expected("GF-BIOS 2.4.0", BIOS_DIGEST, "GF-BIOS-2.4.0.bin")}
    assert h100.secure_boot_required and h100.bios_attributes["NumaNodesPerSocket"] == 2
    assert (default.gpu_model, default.components["BMC"].image, default.bios_attributes) == ("", "", {})


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"name": "no spaces"}, "baselines[0].name"),
        ({"components": {}}, "baselines[0].components"),
        ({"components": {"BIOS": {"version": "1", "sha256": "AB" * 32}}}, "baselines[0].components.BIOS.sha256"),
        (
            {"components": {"BIOS": {"version": "1", "sha256": BIOS_DIGEST, "image": "../x.bin"}}},
            "baselines[0].components.BIOS.image",
        ),
        (
            {"components": {"BIOS": {"version": "1", "sha256": BIOS_DIGEST, "image": "http://evil/x.bin"}}},
            "baselines[0].components.BIOS.image",
        ),
        ({"components": {"/etc": {"version": "1", "sha256": BIOS_DIGEST}}}, "baselines[0].components./etc"),
        ({"bios_attributes": {"SriovEnable": None}}, "baselines[0].bios_attributes.SriovEnable"),
        ({"bios_attributes": {"Ratio": 1.5}}, "baselines[0].bios_attributes.Ratio"),
        ({"bios_attributes": []}, "baselines[0].bios_attributes"),
        ({"secure_boot_required": "yes"}, "baselines[0].secure_boot_required"),
        ({"gpu_model": ""}, "baselines"),  # two defaults
    ],
)
def test_a_malformed_document_is_refused_naming_the_place(change, where):
    document = {"baselines": [{**DOCUMENT["baselines"][0], **change}, DOCUMENT["baselines"][1]]}
    with pytest.raises(Invalid) as refused:
        parse_baselines(document)
    assert refused.value.path == where
